"""One round's figures for the round table (seed 004's table, the playbooks' "对照表").

Per round: what the client achieved, what the server ran, failures by kind, output throughput
at every ladder step (with the requests behind each, for the interval), the single-request
figures (a baseline run, or else the ladder's concurrency-1 step), the critical concurrency and
the bottleneck named by the single-run verdict.

Steps are keyed by the ladder's load axis (:mod:`llm_locust.analysis.loadaxis`): target users in a
concurrency ladder, offered requests/s in a request-rate ladder (``--shape rate``), whose
``target_users`` is only the pool that sent the schedule. A rate ladder has no concurrency-1 step:
its single-request figures come from a baseline run only.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from llm_locust.analysis.compare.changes import RoundDirs
from llm_locust.analysis.compare.stats import (
    THROUGHPUT_SLICES,
    Estimate,
    bin_mean_ci,
    median_ci,
    median_ratio_ci,
    nan_estimate,
    throughput_ci,
)
from llm_locust.analysis.loadaxis import USERS, LoadAxis, load_axis
from llm_locust.analysis.perrequest.metrics import prorated_tokens, with_request_metrics
from llm_locust.analysis.perstep.table import step_table, window_tokens_from_file
from llm_locust.analysis.pipeline import AnalysisResult, analyze
from llm_locust.analysis.server.serverlog.errors import count_by_kind

PRORATED_BIN_S = 1.0
"""Target length of the bins a step window is cut into for the prorated throughput's interval, s
(:func:`prorated_step_estimates`)."""

TIMEOUT_KINDS: tuple[str, ...] = ("connect_timeout", "ttft_timeout", "stall_timeout", "total_timeout")
"""Client error kinds counted as timeouts."""

REJECT_KINDS: tuple[str, ...] = ("http_429", "http_4xx", "http_5xx", "connection_error")
"""Client error kinds counted as rejects (the server refused or dropped the request)."""

GPU_MEMORY_METRICS: dict[str, float] = {
    "DCGM_FI_DEV_FB_USED": 1.0,  # dcgm-exporter, MiB
    "nv_gpu_memory_used_bytes": 1.0 / 2**20,  # Triton, bytes
}
"""Scraped gauges of GPU memory in use and the factor to MiB (the peak is taken over the run)."""


@dataclass(frozen=True, kw_only=True)
class RoundSummary:
    """Everything the round table and the attribution need from one round.

    Attributes
    ----------
    name : str
    steps : pandas.DataFrame
        The ladder's step table (:func:`llm_locust.analysis.perstep.table.step_table` plus the server columns
        chosen by the pipeline); empty without a ladder run.
    step_tps : dict
        ``{load level: Estimate}``: output tokens/s of each step with its interval
        (:func:`llm_locust.analysis.compare.stats.throughput_ci`), keyed by :attr:`axis` (target users, or
        offered requests/s).
    step_tps_prorated : dict
        ``{load level: Estimate}``: each step's ``output_tps_prorated`` (tokens that arrived in
        the window / window, tokens/s) with its interval over the window's one-second bins
        (:func:`prorated_step_estimates`); what the attribution compares.
    single_ttft_ms, single_decode_tps : Estimate
        Median TTFT (ms) and decode rate (tokens/s per request) of the single-request requests.
    single_ttft_values, single_decode_values : numpy.ndarray
        The per-request values behind them (for the ratio intervals).
    single_prefill_values : numpy.ndarray
        The server's own prefill time of each single request, ms (``server_prompt_ms``: llama.cpp's
        ``timings.prompt_ms``, a format file's ``[response.timings]``); NaN where the server sent
        none (empty array without single requests).
    single_source : str
        ``"baseline run (N requests)"``, ``"ladder step at concurrency 1"`` or ``"none"``.
    single_repeat_decode_ratio, single_repeat_ttft_ratio : Estimate
        The round's own repeat of the single-request figures: median decode rate (TTFT) of the
        ladder's concurrency-1 step over the baseline run's (the same server, one request at a
        time, minutes apart); NaN unless the round has both. How far each is from 1 is how much
        the single-request figure moves on this deployment without any change.
    critical_users : float or None
        The critical load on :attr:`axis` (users, or requests/s in a rate ladder).
    knee_users : float or None
        Where the round's knee throughput is read (on :attr:`axis`): the critical load, else the
        highest step with a measured throughput.
    bottleneck : str
        The verdict's primary kind; ``"-"`` when no verdict was computed.
    successes, failures : int
    failure_kinds : dict
        Client failures ``{error_kind: n}``.
    server_log_errors : dict
        Server-log error lines ``{kind: n}``.
    running_mean, running_max, waiting_mean, waiting_max : float
        Over the ladder's steady windows: the largest per-step time-average (``_mean``) and the
        largest instantaneous value (``_max``) of the server series; NaN without server data.
    achieved_max : float
        Largest per-step time-averaged client in-flight.
    gpu_memory_peak_mib : float
        Peak of a :data:`GPU_MEMORY_METRICS` gauge, MiB; NaN when none was scraped.
    axis : LoadAxis, default USERS
        What the ladder's steps are keyed by (:func:`llm_locust.analysis.loadaxis.load_axis`).
    """

    name: str
    steps: pd.DataFrame
    step_tps: dict[float, Estimate]
    single_ttft_ms: Estimate
    single_decode_tps: Estimate
    single_ttft_values: np.ndarray
    single_decode_values: np.ndarray
    single_source: str
    critical_users: float | None
    single_repeat_decode_ratio: Estimate = field(default_factory=nan_estimate)
    single_repeat_ttft_ratio: Estimate = field(default_factory=nan_estimate)
    single_prefill_values: np.ndarray = field(default_factory=lambda: np.array([]))
    step_tps_prorated: dict[float, Estimate] = field(default_factory=dict)
    knee_users: float | None
    bottleneck: str
    successes: int
    failures: int
    failure_kinds: dict[str, int] = field(default_factory=dict)
    server_log_errors: dict[str, int] = field(default_factory=dict)
    running_mean: float = math.nan
    running_max: float = math.nan
    waiting_mean: float = math.nan
    waiting_max: float = math.nan
    achieved_max: float = math.nan
    gpu_memory_peak_mib: float = math.nan
    server_config: object = None
    window_s: float = math.nan
    axis: LoadAxis = USERS

    @property
    def timeouts(self) -> int:
        return sum(self.failure_kinds.get(k, 0) for k in TIMEOUT_KINDS)

    @property
    def rejects(self) -> int:
        return sum(self.failure_kinds.get(k, 0) for k in REJECT_KINDS)

    def tps_at(self, users: float | None) -> Estimate | None:
        """The step estimate at load level ``users`` on :attr:`axis` (None when not measured)."""
        return None if users is None else self.step_tps.get(float(users))

    def prorated_at(self, users: float | None) -> Estimate | None:
        """The step's prorated throughput estimate at load level ``users`` (None when not measured)."""
        return None if users is None else self.step_tps_prorated.get(float(users))

    @property
    def prefix_cache_hit_ratio(self) -> float:
        """The server's prefix-cache hit ratio over the ladder's steps (0-1): the steps'
        ``prefix_cache_hit_ratio`` weighted by their ``prefix_cache_queried_tokens``, i.e. hits /
        queries over all steps; 0 when the server looked nothing up (prefix cache off); NaN
        without the counters (:mod:`llm_locust.analysis.perstep.inputs`)."""
        if self.steps.empty or "prefix_cache_hit_ratio" not in self.steps:
            return math.nan
        ratio = self.steps["prefix_cache_hit_ratio"].astype(float)
        queried = self.steps.get("prefix_cache_queried_tokens", pd.Series(math.nan, index=self.steps.index))
        queried = queried.astype(float)
        ok = ratio.notna()
        if not ok.any():
            return math.nan
        weights = queried[ok]
        if not (weights > 0).any():
            return float(ratio[ok].mean())
        weights = weights.fillna(0.0)
        return float((ratio[ok] * weights).sum() / weights.sum())

    def step_value(self, users: float, column: str) -> float:
        """A step-table value at load level ``users`` on :attr:`axis` (NaN when absent)."""
        if self.steps.empty or self.axis.column not in self.steps or column not in self.steps:
            return math.nan
        rows = self.steps[self.steps[self.axis.column] == users]
        return float(rows[column].iloc[0]) if len(rows) else math.nan


def summarize_round(round_: RoundDirs) -> RoundSummary:
    """Analyse a round's runs (:func:`llm_locust.analysis.pipeline.analyze`) and collect its figures.

    Parameters
    ----------
    round_ : RoundDirs

    Returns
    -------
    RoundSummary
    """
    ladder = analyze(round_.ladder) if round_.ladder is not None else None
    ladder_reqs = with_request_metrics(ladder.run.requests) if ladder is not None else None
    base_req = _single_requests(round_, ladder, ladder_reqs)
    single_source = (
        "none"
        if base_req is None
        else f"baseline run ({len(base_req)} requests)"
        if round_.baseline is not None
        else f"ladder step at concurrency 1 ({len(base_req)} requests)"
    )
    ttft = base_req["ttft_ms"].to_numpy("float64") if base_req is not None else np.array([])
    decode = base_req["decode_tps"].to_numpy("float64") if base_req is not None else np.array([])
    prefill = (
        base_req["server_prompt_ms"].to_numpy("float64")
        if base_req is not None and "server_prompt_ms" in base_req.columns
        else np.array([])
    )
    repeat_decode, repeat_ttft = nan_estimate(), nan_estimate()
    if round_.baseline is not None and ladder is not None and ladder_reqs is not None:
        one_user = _ladder_single_requests(ladder, ladder_reqs)
        if one_user is not None and len(one_user) and len(decode):
            repeat_decode = median_ratio_ci(one_user["decode_tps"].to_numpy("float64"), decode)
            repeat_ttft = median_ratio_ci(one_user["ttft_ms"].to_numpy("float64"), ttft)
    all_requests = pd.concat([r.requests for r in round_.runs], ignore_index=True)
    failed = all_requests[~all_requests["error_kind"].isin(["", "interrupted"])]  # interrupted: cut by the stop
    fields: dict = {}
    if ladder is not None and ladder_reqs is not None:
        fields = _ladder_fields(ladder, ladder_reqs)
    return RoundSummary(
        name=round_.name,
        single_ttft_ms=median_ci(ttft),
        single_decode_tps=median_ci(decode),
        single_ttft_values=ttft,
        single_decode_values=decode,
        single_prefill_values=prefill,
        single_source=single_source,
        single_repeat_decode_ratio=repeat_decode,
        single_repeat_ttft_ratio=repeat_ttft,
        successes=int((all_requests["error_kind"] == "").sum()),
        failures=len(failed),
        failure_kinds={str(k): int(n) for k, n in failed["error_kind"].value_counts().sort_index().items()},
        **(
            {
                "steps": pd.DataFrame(),
                "step_tps": {},
                "step_tps_prorated": {},
                "critical_users": None,
                "knee_users": None,
                "bottleneck": "-",
            }
            | fields
        ),
    )


def _single_requests(
    round_: RoundDirs, ladder: AnalysisResult | None, ladder_reqs: pd.DataFrame | None
) -> pd.DataFrame | None:
    """Successful single-request requests: the baseline run's first N, or the concurrency-1 step's
    requests completed in its steady window."""
    if round_.baseline is not None:
        reqs = with_request_metrics(round_.baseline.requests).sort_values("t_start_s", kind="stable")
        ok = reqs[reqs["ok"]]
        n = (round_.baseline.meta.get("shape") or {}).get("requests")
        return ok.head(int(n)) if n else ok
    if ladder is None or ladder_reqs is None:
        return None
    return _ladder_single_requests(ladder, ladder_reqs)


def _ladder_single_requests(ladder: AnalysisResult, reqs: pd.DataFrame) -> pd.DataFrame | None:
    """Successful requests completed in the steady window of the ladder's concurrency-1 step; None
    in a request-rate ladder (one user in its pool sends a schedule, not one request at a time)."""
    if load_axis(ladder.table) is not USERS:
        return None
    one = ladder.table[ladder.table["target_users"] == 1.0]
    if one.empty:
        return None
    row = one.iloc[0]
    return reqs[reqs["ok"] & (reqs["t_end_s"] >= row["window_start_s"]) & (reqs["t_end_s"] < row["window_end_s"])]


def _ladder_fields(result: AnalysisResult, reqs: pd.DataFrame) -> dict:
    table = result.table
    axis = load_axis(table)
    step_tps: dict[float, Estimate] = {}
    for row in table.itertuples(index=False):
        level = float(getattr(row, axis.column))
        if not (math.isfinite(level) and math.isfinite(row.output_tps)):
            continue
        done = reqs[reqs["ok"] & (reqs["t_end_s"] >= row.window_start_s) & (reqs["t_end_s"] < row.window_end_s)]
        step_tps[level] = throughput_ci(
            float(row.output_tps), _slice_tps(reqs[reqs["ok"]], row.window_start_s, row.window_end_s), len(done)
        )
    critical = result.critical.users
    prorated = prorated_step_estimates(result, reqs)
    knee = critical if critical is not None else (max(step_tps) if step_tps else None)
    series = result.server if result.server is not None else pd.DataFrame()
    in_windows = _in_windows(series, table)
    log_errors = {}
    if result.evidence is not None and result.evidence.log is not None and len(result.evidence.log.errors):
        log_errors = count_by_kind(result.evidence.log.errors)
    return {
        "steps": table,
        "step_tps": step_tps,
        "step_tps_prorated": prorated,
        "critical_users": critical,
        "knee_users": knee,
        "bottleneck": _bottleneck(result),
        "server_log_errors": log_errors,
        "running_mean": _max(table.get("server_running")),
        "waiting_mean": _max(table.get("server_waiting")),
        "running_max": _max(in_windows.get("running")),
        "waiting_max": _max(in_windows.get("waiting")),
        "achieved_max": _max(table.get("client_inflight")),
        "gpu_memory_peak_mib": gpu_memory_peak_mib(result.run.server_samples),
        "server_config": result.evidence.config if result.evidence is not None else None,
        "window_s": float(table["window_s"].median()) if len(table) else math.nan,
        "axis": axis,
    }


def prorated_step_estimates(result: AnalysisResult, reqs: pd.DataFrame) -> dict[float, Estimate]:
    """Each step's ``output_tps_prorated`` with a bootstrap interval over the window's bins.

    The steady window ``[W0, W1)`` is cut into ``k = max(2, round(W / PRORATED_BIN_S))`` equal
    bins and the prorated throughput of each bin is computed with the step table's own rule
    (:func:`llm_locust.analysis.perstep.table.step_table`: tokens counted when they arrived where the request
    recorded its token times, else spread over its decode), so the bins' mean is the step's
    ``output_tps_prorated``. The interval resamples the bins (:func:`~llm_locust.analysis.compare.stats.bin_mean_ci`):
    the spread of the token rate second by second is this figure's own noise. Bins, not the
    step's completions: a prorated figure is no sum over completions, and completions in a closed
    loop come in waves (a window holds a whole wave more or less) where the token rate does not.
    Adjacent seconds share requests, so the interval is a little narrow when requests last
    several seconds; the attribution adds its 10 % floor (:data:`llm_locust.analysis.compare.attribution.MIN_EFFECT`).

    Parameters
    ----------
    result : AnalysisResult
        The ladder's analysis (its ``table`` has ``window_start_s``, ``window_end_s``,
        ``output_tps_prorated``).
    reqs : pandas.DataFrame
        :func:`llm_locust.analysis.perrequest.metrics.with_request_metrics` of the ladder's requests.

    Returns
    -------
    dict
        ``{load level: Estimate}`` (``n``: requests completed in the window) for the steps with
        a finite ``output_tps_prorated``; value NaN-free, interval NaN when the window is empty.
    """
    table = result.table
    if table.empty or "output_tps_prorated" not in table:
        return {}
    axis = load_axis(table)
    rows: list[tuple[float, float, float, float, int, int]] = []
    bins: list[tuple[float, float]] = []
    for row in table.itertuples(index=False):
        level = float(getattr(row, axis.column))
        start, end = float(row.window_start_s), float(row.window_end_s)
        if not (math.isfinite(level) and math.isfinite(row.output_tps_prorated) and end > start):
            continue
        k = max(2, round((end - start) / PRORATED_BIN_S))
        edges = np.linspace(start, end, k + 1)
        rows.append((level, float(row.output_tps_prorated), start, end, len(bins), k))
        bins += list(zip(edges[:-1], edges[1:]))
    if not bins:
        return {}
    windows = pd.DataFrame(
        {
            "step": np.arange(len(bins), dtype="int64"),
            "target_users": np.zeros(len(bins)),
            "window_start_s": [b[0] for b in bins],
            "window_end_s": [b[1] for b in bins],
        }
    )
    windows["window_s"] = windows["window_end_s"] - windows["window_start_s"]
    requests = result.run.requests
    tokens = None
    if "token_times_us" not in requests.columns:
        tokens = window_tokens_from_file(result.run.run_dir / "requests.csv", windows)
    per_bin = step_table(requests, windows, None, tokens)["output_tps_prorated"].to_numpy("float64")
    per_bin = np.nan_to_num(per_bin, nan=0.0)  # NaN: no request in flight in that bin, 0 tokens
    out: dict[float, Estimate] = {}
    for level, value, start, end, first, k in rows:
        done = int((reqs["ok"] & (reqs["t_end_s"] >= start) & (reqs["t_end_s"] < end)).sum())
        out[level] = bin_mean_ci(value, per_bin[first : first + k], done)
    return out


def _slice_tps(ok: pd.DataFrame, start_s: float, end_s: float, slices: int = THROUGHPUT_SLICES) -> np.ndarray:
    """Prorated output tokens/s of each of ``slices`` equal slices of ``[start_s, end_s)``."""
    first = ok["t_start_s"] + ok["ttft_ms"] / 1000.0
    edges = np.linspace(start_s, end_s, slices + 1)
    width = (end_s - start_s) / slices
    return (
        np.array(
            [
                prorated_tokens(first, ok["t_end_s"], ok["output_tokens"], lo, hi) / width
                for lo, hi in zip(edges[:-1], edges[1:])
            ]
        )
        if width > 0
        else np.array([])
    )


def _in_windows(series: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    if series is None or series.empty or "t_s" not in series:
        return pd.DataFrame()
    keep = np.zeros(len(series), dtype=bool)
    for row in table.itertuples(index=False):
        keep |= ((series["t_s"] >= row.window_start_s) & (series["t_s"] < row.window_end_s)).to_numpy()
    return series[keep]


def _max(values) -> float:
    if values is None:
        return math.nan
    values = pd.Series(values, dtype="float64").dropna()
    return float(values.max()) if len(values) else math.nan


def _bottleneck(result: AnalysisResult) -> str:
    """The verdict's primary kind: from the analysis result when it carries a verdict, else from
    the run directory's ``report/verdict.json``; ``"-"`` when neither exists."""
    verdict = getattr(result, "verdict", None)
    kind = getattr(verdict, "bottleneck", None)
    if kind is not None:
        return str(getattr(kind, "value", kind))
    path = result.run.run_dir / "report" / "verdict.json"
    try:
        return str(json.loads(path.read_text(encoding="utf-8")).get("bottleneck") or "-")
    except (OSError, ValueError, AttributeError):
        return "-"


def gpu_memory_peak_mib(samples: pd.DataFrame) -> float:
    """Peak GPU memory in use over the run, MiB, from the first :data:`GPU_MEMORY_METRICS` gauge
    present in ``server_metrics.csv`` (summed over GPUs at each scrape); NaN when none was scraped.
    """
    if samples is None or samples.empty:
        return math.nan
    for metric, to_mib in GPU_MEMORY_METRICS.items():
        rows = samples[samples["metric"] == metric]
        if len(rows):
            return float(rows.groupby("t_s")["value"].sum().max() * to_mib)
    return math.nan
