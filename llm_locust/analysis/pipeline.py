"""Library entry point: run directory -> per-step table -> critical concurrency -> ``report/``.

:func:`analyze` is pure (a loaded :class:`~llm_locust.analysis.rundir.reader.Run` in, an :class:`AnalysisResult`
out); :func:`write_report` is the only writer (PNGs, ``steps.csv``, ``summary.md``);
:func:`analyze_run` chains load, analyze and write.
"""

from __future__ import annotations

import importlib
import json
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib
import pandas as pd

from llm_locust.analysis.atomicwrite import write_text_atomic
from llm_locust.analysis.loadaxis import RATE, load_axis, planned_levels
from llm_locust.analysis.perrequest.chunks import CHUNK_COLUMNS, chunk_table
from llm_locust.analysis.perrequest.faults import outage_spells, step_faults
from llm_locust.analysis.perrequest.gatewaypage import gateway_timeouts
from llm_locust.analysis.perrequest.metrics import end_time_s, inflight_binned, inflight_series
from llm_locust.analysis.perrequest.outcome import (
    RunOutcome,
    error_examples,
    error_lines,
    judge_outcome,
    outcome_line,
    request_counts,
)
from llm_locust.analysis.perrequest.servertime import SPLIT_COLUMNS, ttft_split_table
from llm_locust.analysis.perrequest.sessions import SESSION_COLUMNS, session_table, sessions_markdown
from llm_locust.analysis.perstep.baseline import Baseline, baseline_medians
from llm_locust.analysis.perstep.goodput import GOODPUT_COLUMNS, Slo, goodput_knee, goodput_table, parse_slo
from llm_locust.analysis.perstep.inputs import input_columns, input_lines
from llm_locust.analysis.perstep.table import (
    replica_column,
    replica_names,
    replica_step_means,
    step_server_means,
    step_table,
    step_windows,
    window_tokens_from_file,
)
from llm_locust.analysis.report.figures import FigureJob, save_figures
from llm_locust.analysis.report.html import write_run_index
from llm_locust.analysis.report.plots import plot_errors, plot_latency, plot_throughput, plot_timeline
from llm_locust.analysis.report.sections import chunks_markdown, goodput_markdown, server_timings_markdown
from llm_locust.analysis.report.verdict import verdict_markdown
from llm_locust.analysis.report.workers import workers_markdown
from llm_locust.analysis.rundir.reader import LAZY_REQUEST_COLUMNS, Run, load_run
from llm_locust.analysis.schema import REQUESTS_CSV, RUN_JSON
from llm_locust.analysis.server.batches import batch_stats
from llm_locust.analysis.server.serverlog.errors import count_by_kind
from llm_locust.analysis.server.sources import (
    ServerEvidence,
    ServerOptions,
    choose_step_means,
    describe_sources,
    gather,
    step_server_seconds,
)
from llm_locust.analysis.server.userformat import error_settings
from llm_locust.analysis.thresholds import (
    EXIT_THRESHOLD_FAILED,
    Threshold,
    ThresholdCheck,
    check_table_steps,
    evaluate,
    summary_lines,
)
from llm_locust.analysis.verdict import RULES, ClientSide, ServerSide, Verdict, diagnose
from llm_locust.analysis.verdict.configcheck import ConfigCheck, check_config
from llm_locust.analysis.verdict.jsonout import BASELINE_NOTE, write_baseline_json, write_verdict_json
from llm_locust.analysis.verdict.knee import CriticalConcurrency, find_critical_concurrency, fmt_users
from llm_locust.analysis.verdict.prefixcache import SharedPrefix

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

PLOT_STYLE: dict[RcKeyType, Any] = {
    "figure.dpi": 100,
    "savefig.dpi": 110,
    "font.size": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.fontsize": "small",
    "legend.framealpha": 0.85,
}
"""rc settings applied (via ``rc_context``) while the report figures are drawn."""

DISPLAY_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("step", "step", "{:.0f}"),
    ("target_users", "users", "users"),
    ("client_inflight", "in-flight", "{:.2f}"),
    ("server_running", "running", "{:.2f}"),
    ("server_waiting", "waiting", "{:.2f}"),
    ("kv_usage_ratio", "KV", "{:.1%}"),
    ("output_tps", "out tok/s", "{:.1f}"),
    ("request_rps", "req/s", "{:.2f}"),
    ("ttft_p50_ms", "TTFT p50 ms", "{:.0f}"),
    ("ttft_p95_ms", "TTFT p95 ms", "{:.0f}"),
    ("tpot_p50_ms", "TPOT p50 ms", "{:.1f}"),
    ("e2e_p50_ms", "E2E p50 ms", "{:.0f}"),
    ("completed", "ok", "{:.0f}"),
    ("errors", "errors", "{:.0f}"),
)
"""(column, header, format) of the printed and markdown step tables."""

RATE_DISPLAY_COLUMNS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "target_users": (
        ("target_rate_rps", "rate req/s", "{:g}"),
        ("achieved_rate_rps", "sent req/s", "{:.2f}"),
        ("send_lag_p50_ms", "lag p50 ms", "{:.1f}"),
        ("send_lag_p99_ms", "lag p99 ms", "{:.1f}"),
        ("unsent", "unsent", "{:.0f}"),
    ),
    "ttft_p95_ms": (("ttft_from_schedule_p50_ms", "TTFT p50 from sched ms", "{:.0f}"),),
    "e2e_p50_ms": (("e2e_from_schedule_p50_ms", "E2E p50 from sched ms", "{:.0f}"),),
}
"""A request-rate ladder's table (:mod:`llm_locust.analysis.perstep.rate`): the column named by each key is
replaced (``target_users``: the pool is no load level) or followed by these."""

MARKDOWN_EXTRA_COLUMNS: dict[str, tuple[str, str, str]] = {
    "output_tps": ("output_tps_prorated", "out tok/s prorated", "{:.1f}"),
}
"""Columns only ``summary.md``'s table shows, each after the column named by its key."""

SINGLE_LEVEL_LINE = "one load level: no ladder to judge"
"""Start of the verdict line of a run without shape steps (``shape.kind == "none"``)."""


@dataclass(frozen=True, kw_only=True)
class ReportPaths:
    """Files written into ``<run_dir>/report/``."""

    report_dir: Path
    throughput_png: Path | None
    """None when there is nothing to draw against concurrency (no ladder, no success)."""
    latency_png: Path | None
    """None like ``throughput_png``."""
    timeline_png: Path
    steps_csv: Path
    summary_md: Path
    errors_png: Path | None = None
    """Failures by kind per step, client vs server log; None without a verdict."""
    verdict_json: Path | None = None
    """``verdict.json``; None without a verdict or a measured baseline (whose file states the baseline)."""
    index_html: Path | None = None
    """``index.html``: the verdict, ``summary.md`` and the PNGs on one page (:mod:`llm_locust.analysis.report.html`)."""


@dataclass(frozen=True, kw_only=True)
class AnalysisResult:
    """Everything computed from one run directory.

    Attributes
    ----------
    run : Run
        The loaded run directory.
    table : pandas.DataFrame
        Per-step table (:func:`llm_locust.analysis.perstep.table.step_table`).
    critical : CriticalConcurrency
    server : pandas.DataFrame
        Normalised server series drawn on the timeline (:mod:`llm_locust.analysis.server.series`; metrics, or the
        log under the ``log`` policy or without metrics); empty without server data.
    inflight : pandas.DataFrame
        Client in-flight, 1 s averages (:func:`llm_locust.analysis.perrequest.metrics.inflight_binned`).
    baseline : Baseline or None
        Medians of a baseline run (``shape.kind == "baseline"``), else None.
    paths : ReportPaths or None
        Written files; None until :func:`write_report` ran.
    evidence : ServerEvidence or None
        Everything read about the server (metrics, log, configuration).
    server_source_line : str
        Which source the step table's server columns came from (also the first line of the
        critical-concurrency evidence).
    config_check : ConfigCheck or None
        "Batching settings took effect: …".
    outcome : RunOutcome
        Whether any request succeeded (:mod:`llm_locust.analysis.perrequest.outcome`); without one there is no verdict
        and :attr:`exit_code` is 1.
    errors : pandas.DataFrame
        Failures by kind with one example message each (:func:`llm_locust.analysis.perrequest.outcome.error_examples`).
    single_level : bool
        The run had no shape steps (``shape.kind == "none"``): one load level of unknown target
        concurrency, no ladder to judge.
    notes : tuple of str
        What the analysis had to assume (e.g. a run that ended without a clean stop).
    verdict : Verdict or None
        The bottleneck with its evidence and recommendations (:func:`llm_locust.analysis.verdict.rules`);
        None without a ladder (one load level, a baseline) or without any request.
    slos : tuple of Slo
        The service-level objectives goodput was measured against (``--slo``, else run.json
        ``slo``); () for none (then the table has no goodput columns).
    goodput_knee_users : float or None
        Knee by goodput (:func:`llm_locust.analysis.perstep.goodput.goodput_knee`); None without SLOs or goodput.
    outages : pandas.DataFrame or None
        The server's outages (:func:`llm_locust.analysis.perrequest.faults.outage_spells`), shaded on the timeline.
    thresholds : tuple of ThresholdCheck
        The ``--fail-on`` thresholds checked on this run (:mod:`llm_locust.analysis.thresholds`); any that
        failed make :attr:`exit_code` 3.
    no_verdict_line : str
        The line shown instead of the critical concurrency when there is none to judge
        ("No verdict: no requests were recorded: …", "No verdict: no successful request: …",
        "One load level: no ladder to judge …"); "" when there is a verdict.
    """

    run: Run
    table: pd.DataFrame
    critical: CriticalConcurrency
    server: pd.DataFrame
    inflight: pd.DataFrame
    baseline: Baseline | None = None
    paths: ReportPaths | None = None
    evidence: ServerEvidence | None = None
    server_source_line: str = ""
    config_check: ConfigCheck | None = None
    outcome: RunOutcome = RunOutcome.MEASURED
    errors: pd.DataFrame | None = None
    single_level: bool = False
    notes: tuple[str, ...] = ()
    no_verdict_line: str = ""
    verdict: Verdict | None = None
    slos: tuple[Slo, ...] = ()
    goodput_knee_users: float | None = None
    outages: pd.DataFrame | None = None
    thresholds: tuple[ThresholdCheck, ...] = ()

    @property
    def exit_code(self) -> int:
        """0 when some request succeeded, 1 when none did or none was recorded, 3
        (:data:`~llm_locust.analysis.thresholds.EXIT_THRESHOLD_FAILED`) when measured but a threshold failed."""
        if self.outcome is RunOutcome.MEASURED and any(c.failed for c in self.thresholds):
            return EXIT_THRESHOLD_FAILED
        return self.outcome.exit_code

    @property
    def vs_concurrency(self) -> bool:
        """Whether throughput and latency can be drawn against concurrency: a success, and two
        load levels or more (one point, a baseline or a one-step ladder, is no curve: its figures
        are in the table and the timeline)."""
        return self.outcome is RunOutcome.MEASURED and not self.single_level and len(self.table) >= 2


def analyze(
    run: Run,
    *,
    min_gain_per_doubling: float = 1.15,
    waiting_threshold: float = 0.5,
    ttft_growth: float = 1.5,
    server: ServerOptions | None = None,
    slo: str | None = None,
    fail_on: tuple[Threshold, ...] = (),
) -> AnalysisResult:
    """Compute the step table, server series, critical concurrency and config check (no I/O),
    and check the ``fail_on`` thresholds (:mod:`llm_locust.analysis.thresholds`) on the result.

    The table also gets the server-side TTFT split (:data:`llm_locust.analysis.perrequest.servertime.SPLIT_COLUMNS`),
    the tokens per chunk and ITL per token and per chunk (:data:`llm_locust.analysis.perrequest.chunks.CHUNK_COLUMNS`)
    and, with service-level objectives (``slo``, else run.json's ``slo``), goodput
    (:data:`llm_locust.analysis.perstep.goodput.GOODPUT_COLUMNS`) and the knee by goodput.

    A run without shape steps (``shape.kind == "none"``) is treated as one step spanning the
    whole run with unknown target concurrency: one load level, no ladder to judge, so no
    critical concurrency (:data:`SINGLE_LEVEL_LINE`, with the achieved in-flight). A run with no
    request, or no successful one, gets no verdict either (:mod:`llm_locust.analysis.perrequest.outcome`). Thresholds
    are those of
    :func:`llm_locust.analysis.verdict.knee.find_critical_concurrency`. The step table's server columns come from
    the source chosen by ``server.source`` (:mod:`llm_locust.analysis.server.sources`): ``auto`` (default)
    uses metrics first and the log where metrics have no value; the table's ``server_source``
    column and the first evidence line say which source each step used.

    Raises
    ------
    ValueError
        An unknown ``server.family`` or time zone, an unusable user format file, or an SLO text
        :func:`llm_locust.analysis.perstep.goodput.parse_slo` refuses;
        :class:`~llm_locust.analysis.thresholds.ThresholdError` for an ``@USERS`` threshold the run has no
        step for (raised before anything is computed).
    """
    options = server or ServerOptions()
    slo_text = slo if slo is not None else run.meta.get("slo")
    slos = parse_slo(slo_text) if slo_text else ()
    steps = run.steps
    check_table_steps(fail_on, steps)
    single_level = bool(steps.empty)
    if single_level:
        steps = pd.DataFrame(
            {"step": [0], "target_users": [float("nan")], "start_s": [run.started_at_s], "end_s": [run.ended_at_s]}
        )
    evidence = gather(run, options)
    policy = evidence.resolve(options.source)
    windows = step_windows(steps, run.warmup_s)
    window_tokens = None
    if "token_times_us" not in run.requests.columns:
        window_tokens = window_tokens_from_file(run.run_dir / REQUESTS_CSV, windows)
    table = step_table(run.requests, windows, None, window_tokens)
    spells = outage_spells(run.requests)
    faults = step_faults(run.requests, windows, spells)
    for column in faults.columns:
        table[column] = faults[column].to_numpy()
    metrics_means = step_server_means(windows, evidence.metrics)
    means, labels = choose_step_means(metrics_means, step_server_means(windows, evidence.log_series), policy)
    for column in means.columns:
        table[column] = means[column].to_numpy("float64")
    table["server_data_s"] = step_server_seconds(
        windows, evidence.metrics, evidence.log_series, metrics_means, policy
    ).to_numpy("float64")
    table["server_source"] = pd.Series(labels, index=table.index, dtype=str)
    per_replica = replica_step_means(windows, evidence.replicas)
    for column in per_replica.columns:
        table[column] = per_replica[column].to_numpy("float64")
    family = evidence.metrics_family.value if evidence.metrics_family is not None else None
    for column, values in input_columns(table, run.requests, run.server_samples, family).items():
        table[column] = values
    rules = replace(
        RULES, min_gain_per_doubling=min_gain_per_doubling, waiting_threshold=waiting_threshold, ttft_growth=ttft_growth
    )
    outcome, no_verdict_line = judge_outcome(run.requests), ""
    shape = run.meta.get("shape") or {}
    verdict = None
    if outcome is not RunOutcome.NO_REQUESTS and not single_level and shape.get("kind") != "baseline":
        verdict = diagnose(
            table,
            server_side(evidence, windows, run.requests),
            evidence.config,
            ClientSide.from_meta(run.meta, run.client_load, run.requests, run.reported_requests),
            rules=rules,
            planned=planned_levels(shape),
            warmup_s=run.warmup_s,
            request_tokens=_request_tokens(run),
            shared_prefix=SharedPrefix.from_workload(run.meta.get("workload")),
        )
        table, critical = verdict.table, verdict.critical
    else:
        critical = find_critical_concurrency(table, **rules.knee_kwargs())
    table = table.copy()
    split = ttft_split_table(run.requests, windows)
    for column in SPLIT_COLUMNS:
        table[column] = split[column].to_numpy("float64")
    chunked = chunk_table(run.requests, windows, run.run_dir / REQUESTS_CSV)
    for column in CHUNK_COLUMNS:
        table[column] = chunked[column].to_numpy("float64")
    sessions = session_table(run.requests, windows)
    for column in SESSION_COLUMNS:
        table[column] = sessions[column].to_numpy("float64")
    goodput_knee_users = None
    if slos:
        goodput = goodput_table(run.requests, windows, slos)
        for column in GOODPUT_COLUMNS:
            table[column] = goodput[column].to_numpy("float64")
        goodput_knee_users = None if single_level else goodput_knee(table, load_axis(table).column)
    source_line = describe_sources(evidence, options.source, labels)
    critical = replace(critical, evidence=(source_line,) + critical.evidence)
    if outcome is not RunOutcome.MEASURED:
        why = outcome_line(
            outcome, len(run.requests), interrupted=int((run.requests["error_kind"] == "interrupted").sum())
        )
        critical, no_verdict_line = _no_verdict(None, why), f"No verdict: {why}"
    elif single_level:
        level = table.iloc[0]
        why = (
            f"{SINGLE_LEVEL_LINE} (shape none: achieved concurrency "
            f"{level['client_inflight']:.2f} requests in flight, {level['output_tps']:.1f} "
            f"output tokens/s)"
        )
        critical, no_verdict_line = _no_verdict(source_line, why), why[0].upper() + why[1:]
    elif shape.get("kind") == "baseline":
        critical, no_verdict_line = (
            _no_verdict(source_line, BASELINE_NOTE),
            BASELINE_NOTE[0].upper() + BASELINE_NOTE[1:],
        )
    server_series = evidence.series(options.source)
    check = check_config(
        evidence.config,
        server_series,
        table,
        window_start_s=run.started_at_s,
        window_end_s=run.ended_at_s,
        request_tokens=_request_tokens(run),
        waiting_threshold=waiting_threshold,
        batches=evidence.batches,
    )
    inflight = inflight_binned(inflight_series(run.requests["t_start_s"], end_time_s(run.requests)))
    baseline = baseline_medians(run.requests, shape.get("requests")) if shape.get("kind") == "baseline" else None
    checks = evaluate(
        fail_on,
        table=table,
        requests=run.requests,
        critical_users=(
            None
            if verdict is None
            else verdict.critical.users
            if load_axis(table) is RATE
            else verdict.critical_concurrency
        ),
        bottleneck=verdict.bottleneck.value if verdict is not None else None,
    )
    return AnalysisResult(
        run=replace(run, steps=steps),
        table=table,
        critical=critical,
        server=server_series,
        inflight=inflight,
        baseline=baseline,
        evidence=evidence,
        server_source_line=source_line,
        config_check=check,
        outcome=outcome,
        errors=error_examples(run.requests),
        single_level=single_level,
        notes=run.notes,
        verdict=verdict,
        no_verdict_line=no_verdict_line,
        slos=slos,
        goodput_knee_users=goodput_knee_users,
        outages=spells,
        thresholds=checks,
    )


def server_side(
    evidence: ServerEvidence, windows: pd.DataFrame | None = None, requests: pd.DataFrame | None = None
) -> ServerSide:
    """The :class:`~llm_locust.analysis.verdict.ServerSide` of a run's server evidence: its family (metrics,
    else log, else the configuration's engine), the log's error lines, and per step (with
    ``windows``, :func:`llm_locust.analysis.perstep.table.step_windows`) the statistics of the batches the log
    reports; with ``requests`` (``requests.csv``), the gateway whose 504 page they carry."""
    family = evidence.metrics_family or (evidence.log.family if evidence.log is not None else None)
    name = family.value if family is not None else evidence.config.engine
    batches = None
    if windows is not None and not evidence.batches.empty:
        batches = batch_stats(evidence.batches, windows, batch_wait_max_ms=evidence.config.batch_wait_max_ms)
    errors = evidence.log.errors if evidence.log is not None else None
    settings = error_settings(evidence.user_format, errors)
    page = ""
    gateway = gateway_timeouts(requests) if requests is not None else None
    logged = errors is not None and bool((errors["kind"] == "timeout").any())
    if gateway is not None and not logged:  # the page names it where no log line does
        settings, page = {**settings, "timeout": gateway.setting}, gateway.gateway
    return ServerSide(
        family=name,
        errors=evidence.log.errors if evidence.log is not None else None,
        batches=batches,
        batch_wait_max_ms=evidence.config.batch_wait_max_ms,
        replica_ceilings={r.name: r.config.batch_ceiling for r in evidence.replicas},
        error_settings=settings,
        timeout_page=page,
    )


def _no_verdict(source_line: str | None, why: str) -> CriticalConcurrency:
    """A :class:`CriticalConcurrency` without a value whose last evidence line says why."""
    return CriticalConcurrency(
        users=None,
        saturated_step=None,
        saturated_users=None,
        highest_tested_users=None,
        server_data=False,
        evidence=(*([source_line] if source_line else []), why),
        kneed_users=None,
    )


def _request_tokens(run: Run) -> float | None:
    """Mean prompt tokens of successful requests + max_tokens: the KV one request holds at most."""
    ok = run.requests[run.requests["error_kind"] == ""]
    prompt = ok["prompt_tokens"].mean() if len(ok) else float("nan")
    max_tokens = (run.meta.get("workload") or {}).get("max_tokens")
    if max_tokens is None:
        max_tokens = ok["output_tokens"].mean() if len(ok) else float("nan")
    total = (0.0 if pd.isna(prompt) else float(prompt)) + (0.0 if pd.isna(max_tokens) else float(max_tokens))
    return total if total > 0 else None


def analyze_run(
    run_dir: Path | str,
    *,
    min_gain_per_doubling: float = 1.15,
    waiting_threshold: float = 0.5,
    ttft_growth: float = 1.5,
    write: bool = True,
    server: ServerOptions | None = None,
    server_log: Path | str | None = None,
    server_log_format: Path | str | None = None,
    slo: str | None = None,
    fail_on: tuple[Threshold, ...] = (),
    stage: Callable[[str], None] | None = None,
) -> AnalysisResult:
    """Load a run directory, analyse it and (by default) write ``<run_dir>/report/``.

    Parameters
    ----------
    run_dir : Path or str
    min_gain_per_doubling, waiting_threshold, ttft_growth : float
        Critical-concurrency thresholds (:func:`llm_locust.analysis.verdict.knee.find_critical_concurrency`).
    write : bool, default True
        Write the PNGs, ``steps.csv`` and ``summary.md``.
    server : ServerOptions, optional
        Which server source to use and how to read the log (:mod:`llm_locust.analysis.server.sources`).
    server_log, server_log_format : Path or str, optional
        A server log / user format file to read instead of the run directory's own.
    slo : str, optional
        Service-level objectives (``"ttft_ms<=500,tpot_ms<=50"``) instead of run.json's.
    fail_on : tuple of Threshold
        ``--fail-on`` thresholds to check (:mod:`llm_locust.analysis.thresholds`).
    stage : callable, optional
        Called with the name of each stage as it starts (loading, analysing, writing): the
        progress lines of ``llm-locust analyze`` (:class:`llm_locust.analysis.console.Heartbeat`).

    Returns
    -------
    AnalysisResult
        With ``paths`` set when ``write`` is true.

    Raises
    ------
    llm_locust.analysis.rundir.reader.RunDirError
        If the run directory is missing files or holds unreadable data.
    ReportWriteError
        ``write`` and the report could not be written; the analysis is its ``result``.
    """
    say = stage or (lambda name: None)
    _preload_kneed(Path(run_dir))
    say("loading the run directory (requests.csv, server data)")
    run = load_run(run_dir, server_log=server_log, server_log_format=server_log_format, unread=LAZY_REQUEST_COLUMNS)
    say("step table and verdict")
    result = analyze(
        run,
        min_gain_per_doubling=min_gain_per_doubling,
        waiting_threshold=waiting_threshold,
        ttft_growth=ttft_growth,
        server=server,
        slo=slo,
        fail_on=fail_on,
    )
    if not write:
        return result
    say("writing the report (figures, summary.md, index.html)")
    try:
        return write_report(result)
    except OSError as exc:
        raise ReportWriteError(result, exc) from exc


class ReportWriteError(Exception):
    """The report could not be written (a file where its folder should be, no permission, a full
    disk): the analysis was done and is kept in :attr:`result` (``paths`` None), the run directory's
    data is untouched.

    Parameters
    ----------
    result : AnalysisResult
        The analysis, without written files.
    cause : OSError
        What the write raised; its file name and reason make the message.
    """

    def __init__(self, result: AnalysisResult, cause: OSError) -> None:
        where = f" {cause.filename}" if cause.filename else ""
        super().__init__(f"cannot write the report:{where}: {cause.strerror or cause}")
        self.result = result


def _preload_kneed(run_dir: Path) -> None:
    """Start importing kneed (it imports scipy.signal: 1.5-3 s) in a daemon thread while the run
    directory loads (pyarrow reads ``requests.csv`` without the GIL), when ``run.json`` names
    three steps or more (the knee's cross-check needs three: :func:`llm_locust.analysis.verdict.knee.kneed_cross_check`).
    Nothing else: a run.json it cannot read is left to the loader, a failed import to the cross-check."""
    if "kneed" in sys.modules:
        return
    try:
        steps = (json.loads((run_dir / RUN_JSON).read_text(encoding="utf-8")).get("shape") or {}).get("steps")
    except (OSError, ValueError, AttributeError):
        return
    if isinstance(steps, list) and len(steps) >= 3:
        threading.Thread(target=_import_quietly, args=("kneed",), name="llm-locust-preload", daemon=True).start()


def _import_quietly(name: str) -> None:
    try:
        importlib.import_module(name)
    except Exception:  # the cross-check imports it again and says why
        pass


def write_report(result: AnalysisResult, report_dir: Path | None = None) -> AnalysisResult:
    """Write throughput/latency/timeline PNGs, ``steps.csv``, ``summary.md`` and ``index.html``.

    The throughput and latency plots are drawn against concurrency: with one load level (a
    baseline, ``--shape none``, a one-step ladder) they would hold one point, without a successful
    request none, so they are not written (and a
    stale copy from an earlier analysis is removed); ``paths`` then holds None for them.

    The first half of the figures is drawn in a forked child while this process draws the rest
    and writes the other files, when that is safe (:mod:`llm_locust.analysis.report.figures`); the files
    are the same either way, byte for byte.

    Parameters
    ----------
    result : AnalysisResult
    report_dir : Path, optional
        Defaults to ``<run_dir>/report``; created if missing.

    Returns
    -------
    AnalysisResult
        ``result`` with ``paths`` set.
    """
    out = Path(report_dir) if report_dir is not None else result.run.run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    drawn = result.vs_concurrency
    verdict = result.verdict
    judged = verdict is not None
    baseline = result.baseline if result.outcome is RunOutcome.MEASURED else None
    for name, keep in (
        ("throughput.png", drawn),
        ("latency.png", drawn),
        ("errors.png", judged),
        ("verdict.json", judged or baseline is not None),
    ):
        if not keep:
            (out / name).unlink(missing_ok=True)
    throughput_png, latency_png, errors_png = out / "throughput.png", out / "latency.png", out / "errors.png"
    verdict_json = out / "verdict.json"
    paths = ReportPaths(
        report_dir=out,
        throughput_png=throughput_png if drawn else None,
        latency_png=latency_png if drawn else None,
        timeline_png=out / "timeline.png",
        steps_csv=out / "steps.csv",
        summary_md=out / "summary.md",
        errors_png=errors_png if judged else None,
        verdict_json=verdict_json if judged or baseline is not None else None,
        index_html=out / "index.html",
    )
    invalid: frozenset[int] = frozenset()
    if "valid" in result.table.columns:
        invalid = frozenset(int(s) for s in result.table.loc[~result.table["valid"].astype(bool), "step"])
    steps = result.run.steps.iloc[0:0] if result.single_level else result.run.steps
    jobs = []
    if drawn:
        jobs += [
            FigureJob(throughput_png, (9, 5.5), lambda ax: plot_throughput(ax, result.table, result.critical)),
            FigureJob(latency_png, (9, 5.5), lambda ax: plot_latency(ax, result.table, result.critical)),
        ]
    jobs.append(
        FigureJob(
            paths.timeline_png,
            (12, 5),
            lambda ax: plot_timeline(
                ax,
                steps=steps,
                warmup_s=result.run.warmup_s,
                inflight=result.inflight,
                server=result.server,
                t0_s=result.run.started_at_s,
                invalid_steps=invalid,
                outages=result.outages,
                end_s=result.run.ended_at_s,
                replicas={r.name: r.series for r in result.evidence.replicas} if result.evidence else None,
                shaded="the baseline"
                if (result.run.meta.get("shape") or {}).get("kind") == "baseline"
                else "ladder steps",
            ),
        )
    )
    if verdict is not None:
        jobs.append(
            FigureJob(
                errors_png,
                (11, 5),
                lambda ax: plot_errors(
                    ax, verdict.table, server_log=result.evidence is not None and result.evidence.log is not None
                ),
            )
        )

    def write_data() -> None:
        if verdict is not None:
            write_verdict_json(verdict, verdict_json, thresholds=result.thresholds)
        elif baseline is not None:  # the baseline itself, and that no concurrency verdict applies
            write_baseline_json(baseline, verdict_json, thresholds=result.thresholds)
        write_text_atomic(paths.steps_csv, result.table.to_csv(index=False))
        write_text_atomic(paths.summary_md, summary_markdown(result))

    with matplotlib.rc_context(PLOT_STYLE):  # the forked children draw under it too
        save_figures(jobs, meanwhile=write_data)
    write_run_index(out, result.run.run_dir)  # links the PNGs that exist: after every figure
    return replace(result, paths=paths)


def _display_rows(table: pd.DataFrame, *, markdown: bool = False) -> tuple[list[str], list[list[str]]]:
    """Header and formatted cells; an ``error kinds`` column only when some step has errors, a
    ``server errors`` column only when the server log has error lines in some step, a ``valid``
    column only when the verdict marked some step invalid (the reason is in the verdict block);
    with ``markdown``, also :data:`MARKDOWN_EXTRA_COLUMNS` (those the table has)."""
    columns: list[tuple[str, str, str]] = []
    rate = load_axis(table) is RATE
    for column in DISPLAY_COLUMNS:
        if rate and column[0] in RATE_DISPLAY_COLUMNS:
            columns += [column] if column[0] != "target_users" else []
            columns += RATE_DISPLAY_COLUMNS[column[0]]
            continue
        columns.append(column)
        extra = MARKDOWN_EXTRA_COLUMNS.get(column[0])
        if markdown and extra is not None and extra[0] in table.columns:
            columns.append(extra)
    for name in reversed(replica_names(table)):  # each replica's figures after the aggregate's
        at = next(k for k, c in enumerate(columns) if c[0] == "server_waiting") + 1
        columns[at:at] = [
            (replica_column("server_running", name), f"running {name}", "{:.2f}"),
            (replica_column("server_waiting", name), f"waiting {name}", "{:.2f}"),
        ]
        if replica_column("kv_usage_ratio", name) in table.columns:
            at = next(k for k, c in enumerate(columns) if c[0] == "kv_usage_ratio") + 1
            columns.insert(at, (replica_column("kv_usage_ratio", name), f"KV {name}", "{:.1%}"))
    if _server_data_short(table):
        at = next(k for k, c in enumerate(columns) if c[0] == "server_waiting") + 1
        columns.insert(at, ("server_data_s", "server data s", "coverage"))
    if (table["errors"] > 0).any():
        columns.append(("error_kinds", "error kinds", "text"))
    if "server_errors" in table.columns and (table["server_errors"] > 0).any():
        columns.append(("server_error_kinds", "server errors", "text"))
    if "valid" in table.columns and not table["valid"].astype(bool).all():
        columns.append(("valid", "valid", "yesno"))
    headers = [header for _, header, _ in columns]
    rows = []
    for record in table.to_dict("records"):
        cells = []
        for key, _, fmt in columns:
            value = record[key]
            if fmt == "text":
                cells.append(str(value))
            elif fmt == "yesno":
                cells.append("yes" if value else "NO")
            elif fmt == "users":
                cells.append(fmt_users(value))
            elif fmt == "coverage":
                cells.append(f"{value:.0f} of {record['window_s']:.0f}")
            else:
                cells.append("-" if pd.isna(value) else fmt.format(value))
        rows.append(cells)
    return headers, rows


def _server_data_short(table: pd.DataFrame) -> bool:
    """True when some step's server data covers less than its window (by > 0.5 s)
    while the run has server data at all: then the tables show ``server data s``."""
    if "server_data_s" not in table.columns or not (table["server_data_s"] > 0).any():
        return False
    return bool((table["server_data_s"] < table["window_s"] - 0.5).any())


def format_table(table: pd.DataFrame) -> str:
    """Per-step table as aligned plain text (NaN shown as ``-``)."""
    headers, rows = _display_rows(table)
    widths = [max(len(h), *(len(r[k]) for r in rows)) if rows else len(h) for k, h in enumerate(headers)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(headers, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
    return "\n".join(lines)


def markdown_table(table: pd.DataFrame) -> str:
    """Per-step table as a GitHub-flavoured markdown table (NaN shown as ``-``), with the
    prorated throughput cross-check (:mod:`llm_locust.analysis.perstep.table`) after ``out tok/s``."""
    headers, rows = _display_rows(table, markdown=True)
    lines = ["| " + " | ".join(headers) + " |", "|" + "---:|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def critical_line(critical: CriticalConcurrency) -> str:
    """The one-line verdict, ``Critical concurrency: <number or "not reached ...">`` (``Critical
    rate: ...`` for a request-rate ladder)."""
    return f"Critical {critical.axis.quantity}: {critical.text}"


def shape_text(shape: dict, warmup_s: float) -> str:
    """How the load was shaped, in words, from run.json's ``shape`` object.

    >>> shape_text({"kind": "ladder", "ladder": [1, 2, 4], "dwell_s": 30.0}, 10.0)
    'shape `ladder` 1, 2, 4 users, each step held 30 s (the first 10 s warm-up)'
    >>> shape_text({"kind": "rate", "trace": "t.jsonl", "trace_speed": 2.0, "trace_rows": 40, "dwell_s": 6.5,
    ...             "max_users": 16, "workers": 2}, 0.0)
    'shape `rate`: trace t.jsonl replayed at 2x, 40 requests in one step of 6.5 s (16 users over 2 workers)'
    >>> shape_text({"kind": "none"}, 0.0)
    'shape `none` (users set by Locust itself, no steps)'
    """
    kind = shape.get("kind") or "none"
    if kind == "ladder":
        users = ", ".join(str(u) for u in shape.get("ladder") or [s.get("users") for s in shape.get("steps") or []])
        return f"shape `ladder` {users} users, each step held {shape.get('dwell_s', 0):g} s (the first {warmup_s:g} s warm-up)"
    if kind == "baseline":
        return f"shape `baseline` (one stream at a time, {shape.get('requests', '?')} requests)"
    if kind == "rate" and shape.get("trace"):
        return (
            f"shape `rate`: trace {shape.get('trace')} replayed at {shape.get('trace_speed', 1.0):g}x, "
            f"{shape.get('trace_rows', '?')} requests in one step of {shape.get('dwell_s', 0):.1f} s "
            f"({shape.get('max_users', '?')} users over {shape.get('workers', '?')} workers)"
        )
    if kind == "rate":
        rates = ", ".join(f"{r:g}" for r in shape.get("rates") or [s.get("rate_rps") for s in shape.get("steps") or []])
        arrival = shape.get("arrival", "?")
        if arrival == "poisson" and shape.get("burstiness", 1.0) != 1.0:
            arrival = f"gamma, burstiness {shape.get('burstiness'):g}"
        return (
            f"shape `rate` {rates} requests/s ({arrival} arrivals, seed {shape.get('seed', '?')}, "
            f"{shape.get('max_users', '?')} users over {shape.get('workers', '?')} workers), each step held "
            f"{shape.get('dwell_s', 0):g} s (the first {warmup_s:g} s warm-up)"
        )
    return f"shape `{kind}` (users set by Locust itself, no steps)"


def workload_text(workload: dict) -> str:
    """run.json's ``workload`` as one readable line: ``key=value`` for the keys that are set
    (None left out), a nested mapping as ``key=(a=1, b=2)``, fingerprints (``*_sha256``) cut to
    12 hex digits; "not recorded" for an empty mapping."""
    parts = []
    for key, value in workload.items():
        if value is None:
            continue
        if isinstance(value, dict):
            value = "(" + ", ".join(f"{k}={v}" for k, v in value.items()) + ")"
        elif key.endswith("sha256") and isinstance(value, str):
            value = value[:12]
        parts.append(f"{key}={value}")
    return ", ".join(parts) or "not recorded"


def summary_markdown(result: AnalysisResult) -> str:
    """``summary.md``: the verdict first (bottleneck, evidence, recommendations:
    :func:`llm_locust.analysis.report.verdict.verdict_markdown`), then run identity, notes, step table,
    critical concurrency with evidence (or why there is none, with the error kinds when every
    request failed), figures."""
    meta, crit = result.run.meta, result.critical
    workload = meta.get("workload") or {}
    shape = meta.get("shape") or {}
    lines = [
        f"# llm-locust run: {meta.get('model', '?')} at {meta.get('host', '?')}",
        "",
        *(verdict_markdown(result.verdict) if result.verdict is not None else []),
        *thresholds_markdown(result.thresholds),
        "## Run",
        "",
        f"- Run directory: `{result.run.run_dir}`",
        f"- Duration: {result.run.ended_at_s - result.run.started_at_s:.1f} s; {shape_text(shape, result.run.warmup_s)}",
        "- Workload: " + workload_text(workload),
        f"- Requests: {request_counts(result.run.requests)}; server metrics: "
        f"{'yes' if len(result.run.server_samples) else 'none scraped'}; server log: "
        f"{'yes' if result.run.server_files.log_text else 'none'}",
        *[f"- **Note: {note}**" for note in result.notes],
        "",
    ]
    if result.outcome is not RunOutcome.NO_REQUESTS:
        lines += [
            "## Per-step table (steady windows)",
            "",
            markdown_table(result.table),
            "",
            "`out tok/s`: output tokens of requests completed in the window / window "
            "length (the headline); `out tok/s prorated`: the tokens that arrived in the "
            "window by each request's token times (spread over its decode where they were "
            "not recorded) / window length (cross-check, see `llm_locust/analysis/perstep/table.py`).",
            *(
                [
                    "",
                    "`rate req/s`: offered (scheduled) rate; `sent req/s`: requests sent in the "
                    "window / window length; `lag`: send time - scheduled time (a send is late when "
                    "no user was free); `unsent`: the step's scheduled sends never sent; `from sched`: "
                    "latency counted from the scheduled send (free of coordinated omission; see "
                    "`llm_locust/analysis/perstep/rate.py`).",
                ]
                if load_axis(result.table) is RATE
                else []
            ),
            "",
        ]
    if result.baseline is not None and result.outcome is RunOutcome.MEASURED:
        lines += [f"**{result.baseline.text}**", ""]
    lines += [f"## Critical {crit.axis.quantity}", ""]
    if result.no_verdict_line:
        lines += [f"**{result.no_verdict_line}**", ""]
        if crit.evidence[:-1]:
            lines += [*[f"- {line}" for line in crit.evidence[:-1]], ""]
        if result.outcome is RunOutcome.NO_SUCCESS and result.errors is not None:
            lines += [
                "Errors by kind (one example message each):",
                "",
                *[f"- {line}" for line in error_lines(result.errors)],
                "",
            ]
    else:
        kneed = "no knee found" if crit.kneed_users is None else crit.axis.fmt(crit.kneed_users)
        lines += [
            f"**{critical_line(crit)}**",
            "",
            *[f"- {line}" for line in crit.evidence],
            "",
            f"kneed cross-check (knee of throughput vs log2 concurrency, not used for the verdict): {kneed}.",
            "",
        ]
    if result.outcome is RunOutcome.MEASURED:
        lines += goodput_markdown(result.table, result.slos, result.goodput_knee_users, crit.users)
        lines += server_timings_markdown(result.table)
        lines += chunks_markdown(result.table)
        lines += sessions_markdown(result.run.requests)
    figures = ["throughput", "latency"] if result.vs_concurrency else []
    lines += [
        *workers_markdown(result.run),
        *server_markdown(result),
        *input_lines(result.table),
        "## Figures",
        "",
        *[item for name in figures for item in (f"![{name}]({name}.png)", "")],
        "![timeline](timeline.png)",
        "",
        *(["![errors](errors.png)", ""] if result.verdict is not None else []),
        "Table as CSV: [steps.csv](steps.csv)",
        "",
    ]
    return "\n".join(lines)


def thresholds_markdown(checks: tuple[ThresholdCheck, ...]) -> list[str]:
    """``summary.md``'s "Thresholds" section (none without ``--fail-on``): the console lines of
    :func:`llm_locust.analysis.thresholds.summary_lines`, the first in bold, the failed ones too."""
    lines = summary_lines(checks)
    if not lines:
        return []
    items = [
        f"- **{line.strip()}**" if line.strip().startswith("FAILED") else f"- {line.strip()}" for line in lines[1:]
    ]
    return ["## Thresholds (--fail-on)", "", f"**{lines[0]}**", "", *items, ""]


def config_line(result: AnalysisResult) -> str:
    """``Batching settings took effect: yes/no/cannot tell, because …`` ("" without a check)."""
    return result.config_check.line if result.config_check is not None else ""


def format_check_lines(result: AnalysisResult) -> tuple[str, ...]:
    """The user format file checked against the server log: the lines each pattern matched,
    then a warning per pattern that matched none (``ServerLogResult.format_check``); printed by
    ``analyze``, ``run`` and ``diagnose`` and written to ``summary.md``. Empty without a format
    file or a log."""
    evidence = result.evidence
    return evidence.log.format_check if evidence is not None and evidence.log is not None else ()


def server_markdown(result: AnalysisResult) -> list[str]:
    """``summary.md`` lines: the batching-config check and what the server side said."""
    check, evidence = result.config_check, result.evidence
    if check is None or evidence is None:
        return []
    lines = [
        "## Batching configuration",
        "",
        f"**{check.line}**",
        "",
        *[f"- {detail}" for detail in check.details],
        "",
        "## Server side",
        "",
        f"- {result.server_source_line}",
    ]
    config = evidence.config
    if not config.empty:
        lines.append("- configuration read: " + "; ".join(config.describe()))
    log = evidence.log
    if log is not None:
        family = log.family.value if log.family else "unrecognised"
        lines.append(f"- server log: {family}, {log.data_lines} data lines, placed by {log.time_source or '-'}")
        lines += [f"- {note}" for note in log.notes]
        lines += [f"- {line}" for line in format_check_lines(result)]
        if len(log.errors):
            counts = ", ".join(f"{k} {n}" for k, n in count_by_kind(log.errors).items())
            lines.append(f"- server log error lines by kind: {counts}")
            for row in result.table.itertuples(index=False):
                inside = log.errors[(log.errors["t_s"] >= row.window_start_s) & (log.errors["t_s"] < row.window_end_s)]
                if len(inside):
                    per_kind = ", ".join(f"{k} {n}" for k, n in count_by_kind(inside).items())
                    lines.append(f"  - step {row.step} ({fmt_users(row.target_users)} users): {per_kind}")
    lines += [f"- {note}" for note in evidence.notes]
    return lines + [""]
