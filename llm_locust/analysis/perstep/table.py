"""Per-step table of a load shape: each step's steady window, client and server side by side.

A step's **steady window** is ``[start_s + warmup_s, end_s)`` (wall clock, Unix s): the warm-up
(ramp and queue fill) is dropped. Every per-step figure is computed over that window only.

Output throughput is given two ways (tokens/s, larger is better):

``output_tps`` (the headline, DESIGN.md's definition, used by the critical-concurrency rule)
    ``sum(output_tokens of successful requests completed in the window) / W``. Each request
    counts whole, in the window its end falls in. When requests run in synchronised waves and
    each lasts a sizeable part of the window, the number of completions in a window can differ
    by a whole wave from one step to the next (e.g. a 15 s window and 7 s requests: two waves
    or three), so ``output_tps`` jumps by up to one wave's tokens / W with no change on the
    server.
``output_tps_prorated`` (cross-check)
    The output tokens generated *during* the window, / W: each successful request's tokens
    counted at the instants they arrived where it recorded its token events (``token_times_us``,
    :func:`llm_locust.analysis.perrequest.metrics.token_events`), else spread uniformly over its decode, ``[t_start_s +
    ttft_ms / 1000, t_end_s]``, and integrated over the window - exact, no sampling
    (:func:`llm_locust.analysis.perrequest.metrics.prorated_tokens`). The arrival instants matter when a request spans
    two steps of a server whose decode slows as the batch grows: spread evenly, its fast early
    tokens would be credited to the later, slower step (a compute-bound run read x1.16 per
    doubling at its last step where the server generated x1.03). Waves do not make it jump; it
    reads low at the very end of a run that was cut short (requests still streaming then were
    never recorded). The two agree when the window
    holds many requests; a large gap means ``output_tps`` is quantised by waves.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from llm_locust.analysis.perrequest.metrics import (
    mean_inflight,
    prorated_tokens,
    succeeded,
    token_events,
    tokens_between,
    with_request_metrics,
)
from llm_locust.analysis.perrequest.metrics import quantile as _quantile
from llm_locust.analysis.perstep.rate import RATE_COLUMNS, rate_columns
from llm_locust.analysis.server.series import time_average

STEP_TABLE_COLUMNS: tuple[str, ...] = (
    "step",
    "target_users",
    "window_start_s",
    "window_end_s",
    "window_s",
    "client_inflight",
    "server_running",
    "server_waiting",
    "kv_usage_ratio",
    "server_gen_tps",
    "server_preemptions_per_s",
    "conn_wait_ms_mean",
    "completed",
    "output_tps",
    "output_tps_prorated",
    "output_tps_ci95_low",
    "output_tps_ci95_high",
    "request_rps",
    "ttft_p50_ms",
    "ttft_p95_ms",
    "tpot_p50_ms",
    "decode_tps_p50",
    "e2e_p50_ms",
    "errors",
    "error_kinds",
    *RATE_COLUMNS,
)
"""Columns of :func:`step_table`, in order (the request-rate figures of :mod:`llm_locust.analysis.perstep.rate`
last, NaN in a closed loop)."""


WindowTokens = tuple[np.ndarray, np.ndarray]
"""Output tokens that arrived in each step's window, counted from the requests' token events
(float64, shape (n_windows,)), and which requests had such events (bool, one per
``requests.csv`` row): :func:`window_tokens_from_file`."""


def step_windows(steps: pd.DataFrame, warmup_s: float) -> pd.DataFrame:
    """Steady window of each step.

    Parameters
    ----------
    steps : pandas.DataFrame
        Columns ``step``, ``target_users``, ``start_s``, ``end_s`` (Unix s), as in
        :attr:`llm_locust.analysis.rundir.reader.Run.steps`.
    warmup_s : float
        Seconds dropped at the start of each step.

    Returns
    -------
    pandas.DataFrame
        Columns ``step``, ``target_users``, ``window_start_s = start_s + warmup_s``,
        ``window_end_s = end_s`` and ``window_s = max(0, window_end_s - window_start_s)``
        (seconds; 0 when the warm-up covers the whole step); a rate run's steps (with
        ``target_rate_rps``) add ``target_rate_rps`` and ``step_start_s = start_s``.
    """
    out = steps[["step", "target_users"]].copy()
    out["window_start_s"] = steps["start_s"] + warmup_s
    out["window_end_s"] = steps["end_s"]
    out["window_s"] = (out["window_end_s"] - out["window_start_s"]).clip(lower=0.0)
    if "target_rate_rps" in steps.columns:
        out["target_rate_rps"] = steps["target_rate_rps"]
        out["step_start_s"] = steps["start_s"]
    return out.reset_index(drop=True)


def step_table(
    requests: pd.DataFrame,
    windows: pd.DataFrame,
    server: pd.DataFrame | None = None,
    window_tokens: WindowTokens | None = None,
) -> pd.DataFrame:
    """Client and server figures of every step over its steady window.

    A request *belongs* to the window its completion ``t_end_s = t_start_s + e2e_ms / 1000``
    falls in. Definitions (window length ``W`` s):

    - ``completed``: successful requests completed in the window.
    - ``output_tps = sum(output_tokens of those) / W`` (tokens/s, larger is better);
      ``request_rps = completed / W`` (requests/s). Both NaN when no request at all (successful
      or failed) completed in the window; 0 when only failures did.
    - ``output_tps_ci95_low``, ``output_tps_ci95_high`` (tokens/s): ``output_tps_prorated`` minus
      and plus the half-width of its 95 % interval from the step's own data
      (:func:`throughput_interval`); NaN when the window holds fewer than three requests' time
      in service (E2E p50 - TTFT p50).
    - ``output_tps_prorated`` (tokens/s): cross-check of ``output_tps``; the output tokens
      generated during the window, / W (module docstring): a successful request's tokens
      counted at the instants they arrived when it recorded its token events
      (``token_times_us``, in ``requests`` or ``window_tokens``), else spread uniformly over
      ``[t_start_s + ttft_ms / 1000, t_end_s]`` and integrated over the window. NaN when
      ``W = 0`` or no request (successful or failed) was in flight during the window.
    - ``ttft_p50_ms``, ``ttft_p95_ms``, ``tpot_p50_ms``, ``decode_tps_p50`` (per-request
      ``1000 / TPOT``, tokens/s), ``e2e_p50_ms``: percentiles (linear interpolation) over the
      successful requests completed in the window; NaN when none.
    - ``errors``: failed requests completed in the window, without the ``interrupted`` ones
      (cut by the test's stop: no failure); ``error_kinds`` every unsuccessful one by kind,
      ``interrupted`` included, e.g. ``"http_429:3 interrupted:1"`` ("" when none).
    - ``client_inflight``: time-average of the number of requests in flight (all requests,
      successful or not), exact integration of their ``[t_start_s, t_end_s]`` intervals.
    - ``server_running``, ``server_waiting`` (requests), ``kv_usage_ratio`` (0-1),
      ``server_gen_tps`` (tokens/s): time-averages of the step-hold server series over the
      window; NaN when no sample covers it. ``server_preemptions_per_s`` (1/s) likewise.
    - ``conn_wait_ms_mean``: mean wait for a free connection before sending (ms) of the
      requests (successful or failed) completed in the window; NaN when none.
    - The request-rate figures (offered and achieved rate, send lag, latency from the
      schedule): :func:`llm_locust.analysis.perstep.rate.rate_columns`; NaN in a closed loop.

    Parameters
    ----------
    requests : pandas.DataFrame
        ``requests.csv`` rows (:attr:`llm_locust.analysis.rundir.reader.Run.requests`).
    windows : pandas.DataFrame
        Output of :func:`step_windows`.
    server : pandas.DataFrame, optional
        A normalised server series (:mod:`llm_locust.analysis.server.series`); absent or empty -> server
        columns NaN.
    window_tokens : (numpy.ndarray, numpy.ndarray), optional
        :func:`window_tokens_from_file` of the same ``requests.csv`` and ``windows`` (when
        ``requests`` lacks ``token_times_us``); ignored when its lengths do not match.

    Returns
    -------
    pandas.DataFrame
        One row per step, columns :data:`STEP_TABLE_COLUMNS`; ``step``, ``completed`` and
        ``errors`` are int64, ``error_kinds`` str, the rest float64.
    """
    reqs = with_request_metrics(requests)
    ok_mask = reqs["ok"].to_numpy(bool)
    ok_end_s, ok_tokens = reqs["t_end_s"][ok_mask], reqs["output_tokens"][ok_mask]
    first_token_s = reqs["t_start_s"][ok_mask] + reqs["ttft_ms"][ok_mask] / 1000.0
    # tokens counted when they arrived where the request recorded its token events; spread over
    # the decode only for the others
    timed_in_window: np.ndarray | None = None
    if window_tokens is not None and len(window_tokens[1]) == len(reqs) and len(window_tokens[0]) == len(windows):
        event_times_s, event_counts = np.zeros(0), np.zeros(0)
        timed_in_window, timed = window_tokens[0], window_tokens[1][ok_mask]
    elif "token_times_us" in reqs.columns:
        event_times_s, event_counts, timed = token_events(
            reqs["t_start_s"][ok_mask],
            ok_tokens,
            reqs["token_times_us"][ok_mask],
            reqs["event_tokens"][ok_mask] if "event_tokens" in reqs.columns else None,
        )
    else:
        event_times_s, event_counts, timed = np.zeros(0), np.zeros(0), np.zeros(int(ok_mask.sum()), bool)
    ci_first_s, ci_end_s = first_token_s.to_numpy(float), ok_end_s.to_numpy(float)
    ci_tokens = ok_tokens.to_numpy(float)
    first_token_s, ok_end_s, spread_tokens = first_token_s[~timed], ok_end_s[~timed], ok_tokens[~timed]
    # the columns the windows read: a window's rows are copied with these only
    used = [c for c in ("t_end_s", "ok", "output_tokens", "ttft_ms", "tpot_ms", "decode_tps", "e2e_ms",
                        "error_kind", "conn_wait_ms") if c in reqs.columns]  # fmt: skip
    narrow = reqs[used]
    server_means = step_server_means(windows, server)
    rows: list[dict] = []
    for i, window in enumerate(windows.itertuples(index=False)):
        start_s, end_s = float(window.window_start_s), float(window.window_end_s)
        length_s = max(0.0, end_s - start_s)
        done = narrow[(narrow["t_end_s"] >= start_s) & (narrow["t_end_s"] < end_s)]
        ok = done[done["ok"]]
        failed = done[~done["ok"]]
        measured = length_s > 0 and len(done) > 0
        in_flight = length_s > 0 and bool(((reqs["t_start_s"] < end_s) & (reqs["t_end_s"] >= start_s)).any())
        row = {
            "step": int(window.step),
            "target_users": float(window.target_users),
            "window_start_s": start_s,
            "window_end_s": end_s,
            "window_s": length_s,
            "client_inflight": mean_inflight(reqs["t_start_s"], reqs["t_end_s"], start_s, end_s),
            **server_means.iloc[i].to_dict(),
            "conn_wait_ms_mean": (
                float(done["conn_wait_ms"].mean()) if len(done) and "conn_wait_ms" in done.columns else np.nan
            ),
            "completed": len(ok),
            "output_tps": ok["output_tokens"].sum() / length_s if measured else np.nan,
            "output_tps_prorated": (
                (
                    tokens_between(event_times_s, event_counts, start_s, end_s)
                    if timed_in_window is None
                    else float(timed_in_window[i])
                )
                + prorated_tokens(first_token_s, ok_end_s, spread_tokens, start_s, end_s)
            )
            / length_s
            if in_flight
            else np.nan,
            "request_rps": len(ok) / length_s if measured else np.nan,
            "ttft_p50_ms": _quantile(ok["ttft_ms"], 0.50),
            "ttft_p95_ms": _quantile(ok["ttft_ms"], 0.95),
            "tpot_p50_ms": _quantile(ok["tpot_ms"], 0.50),
            "decode_tps_p50": _quantile(ok["decode_tps"], 0.50),
            "e2e_p50_ms": _quantile(ok["e2e_ms"], 0.50),
            "errors": int((failed["error_kind"] != "interrupted").sum()),
            "error_kinds": " ".join(
                f"{kind}:{n}" for kind, n in failed["error_kind"].value_counts().sort_index().items()
            ),
        }
        in_service_ms = row["e2e_p50_ms"] - (row["ttft_p50_ms"] if row["ttft_p50_ms"] < row["e2e_p50_ms"] else 0.0)
        half, _ = throughput_interval(ci_first_s, ci_end_s, ci_tokens, start_s, end_s, in_service_ms / 1000.0)
        row["output_tps_ci95_low"] = row["output_tps_prorated"] - half
        row["output_tps_ci95_high"] = row["output_tps_prorated"] + half
        rows.append(row)
    table = pd.DataFrame(rows, columns=[c for c in STEP_TABLE_COLUMNS if c not in RATE_COLUMNS])
    rates = rate_columns(reqs, windows)
    for column in RATE_COLUMNS:
        table[column] = rates[column].to_numpy("float64")
    non_floats = ("step", "completed", "errors", "error_kinds")
    floats = [c for c in STEP_TABLE_COLUMNS if c not in non_floats]
    return table.astype(
        {**{c: "float64" for c in floats}, "step": "int64", "completed": "int64", "errors": "int64", "error_kinds": str}
    )


MAX_SUB_WINDOWS = 10
"""At most this many sub-windows per step in :func:`throughput_interval`."""


def throughput_interval(
    t_first_s: np.ndarray,
    t_end_s: np.ndarray,
    tokens: np.ndarray,
    window_start_s: float,
    window_end_s: float,
    correlation_s: float,
) -> tuple[float, float]:
    """Half-width of a step's 95 % throughput interval and the number of sub-windows it rests on.

    Batch means, written here because the field has no library for it on a token process: the
    window is cut into ``K = min(10, floor(W / max(correlation_s, 1 s)))`` equal sub-windows, each
    at least one request's time in service long (``correlation_s``: a batch's tokens are
    correlated over about one request's prefill and decode), the output tokens of each are counted (each request's spread over its decode,
    :func:`llm_locust.analysis.perrequest.metrics.prorated_tokens`'s rule), and the half-width is Student's
    ``t(0.975, K - 1) * sd(rates) / sqrt(K)`` in tokens/s. Spread tokens only give the spread of
    the sub-window rates; the interval is centred by the caller on ``output_tps_prorated``.

    Parameters
    ----------
    t_first_s, t_end_s, tokens : numpy.ndarray
        First token and end (Unix s) and output tokens of the successful requests (float64,
        shape (n,)); requests outside the window add nothing.
    window_start_s, window_end_s : float
        The steady window, Unix s.
    correlation_s : float
        The step's time in service per request, E2E p50 - TTFT p50, s (NaN: 1 s).

    Returns
    -------
    (half_width_tps, sub_windows) : (float, int)
        NaN and ``K`` when ``K < 3`` (the window holds fewer than three requests' lengths: no
        interval can be formed) or no token arrived.

    Examples
    --------
    >>> import numpy as np
    >>> f = np.arange(0.0, 10.0, 1.0); e = f + 1.0; tok = np.full(10, 10.0)
    >>> throughput_interval(f, e, tok, 0.0, 10.0, 1.0)  # 10 tokens/s in every second
    (0.0, 10)
    """
    from scipy.special import stdtrit

    length_s = window_end_s - window_start_s
    corr = correlation_s if np.isfinite(correlation_s) else 1.0
    k = int(min(MAX_SUB_WINDOWS, np.floor(length_s / max(corr, 1.0)))) if length_s > 0 else 0
    if k < 3:
        return float("nan"), k
    keep = (t_end_s >= window_start_s) & ((t_first_s < window_end_s) | (t_end_s < window_end_s))
    first, end, tok = t_first_s[keep], t_end_s[keep], np.nan_to_num(tokens[keep])
    edges = np.linspace(window_start_s, window_end_s, k + 1)
    counts = np.zeros(k)
    point = ~(end > first)  # one token, or no TTFT: all at the end (NaN first compares false)
    if point.any():
        at = np.searchsorted(edges, end[point], side="right") - 1
        inside = (at >= 0) & (at < k)
        np.add.at(counts, at[inside], tok[point][inside])
    f, e, t = first[~point], end[~point], tok[~point]
    if len(f):
        lo, hi = edges[:-1][None, :], edges[1:][None, :]
        overlap = np.clip(np.minimum(e[:, None], hi) - np.maximum(f[:, None], lo), 0.0, None)
        counts += (overlap * (t / (e - f))[:, None]).sum(axis=0)
    rates = counts / (length_s / k)
    if not rates.sum() > 0:
        return float("nan"), k
    half = float(stdtrit(k - 1, 0.975) * rates.std(ddof=1) / np.sqrt(k))
    return half, k


MEAN_COLUMNS: dict[str, str] = {
    "server_running": "running",
    "server_waiting": "waiting",
    "kv_usage_ratio": "kv_usage_ratio",
    "server_gen_tps": "gen_tps",
    "server_preemptions_per_s": "preemptions_per_s",
}
"""Step-table column -> normalised server series column (:mod:`llm_locust.analysis.server.series`)."""


def window_tokens_from_file(path: Path, windows: pd.DataFrame) -> WindowTokens | None:
    """Tokens that arrived in each window, read from ``requests.csv``'s per-event times in blocks
    (from ``requests.arrow`` when it matches the CSV: :func:`llm_locust.analysis.rundir.columnar.iter_request_frames`).

    The step analysis leaves ``token_times_us`` unread (:data:`llm_locust.analysis.rundir.reader.LAZY_REQUEST_COLUMNS`:
    about 60 % of the file); this pass reads it a few MB at a time and keeps only a sum per
    window and a flag per request, so memory does not grow with the events. A successful
    request's tokens are counted at the instants they arrived (:func:`llm_locust.analysis.perrequest.metrics.token_events`)
    when its span ``[t_start_s, t_start_s + e2e_ms / 1000]`` holds a window's start or end: only
    there can arrival and an even spread differ (a request inside one window, or between two,
    puts all its tokens in the same place either way), so only those requests' times are parsed
    (the parse was 2.8 s of 4.0 s for a million requests; the flag of the others stays False and
    :func:`step_table` spreads them, to the same sum).

    Parameters
    ----------
    path : Path
        ``requests.csv``.
    windows : pandas.DataFrame
        :func:`step_windows`' frame (``window_start_s``, ``window_end_s``, Unix s).

    Returns
    -------
    (tokens, timed) : tuple of numpy.ndarray, or None
        ``tokens`` float64 shape (n_windows,), tokens; ``timed`` bool, one per complete row.
        None when the file has no ``token_times_us`` column or a block the typed reader cannot
        read (the caller spreads every request's tokens over its decode instead).
    """
    from llm_locust.analysis.rundir.columnar import iter_request_frames
    from llm_locust.analysis.schema import REQUEST_SCHEMA

    if not path.is_file():
        return None
    names = {c.name for c in REQUEST_SCHEMA}
    columns = tuple(
        c
        for c in ("t_start_s", "e2e_ms", "error_kind", "output_tokens", "token_times_us", "event_tokens")
        if c in names
    )
    blocks = iter_request_frames(path, columns)
    if blocks is None:
        return None
    starts = windows["window_start_s"].to_numpy(float)
    ends = windows["window_end_s"].to_numpy(float)
    edges = np.unique(np.concatenate([starts, ends]))
    totals = np.zeros(len(windows))
    flags: list[np.ndarray] = []
    try:
        for frame in blocks:
            if "token_times_us" not in frame.columns:
                return None
            sent_s = frame["t_start_s"].to_numpy(float)
            done_s = sent_s + frame["e2e_ms"].to_numpy(float) / 1000.0  # NaN: kept, token_events decides
            crossing = np.searchsorted(edges, done_s, side="left") > np.searchsorted(edges, sent_s, side="right")
            crossing |= ~np.isfinite(done_s)
            ok = succeeded(frame["error_kind"]).to_numpy(bool) & crossing  # as step_table's ok_mask
            times_s, counts, timed_ok = token_events(
                frame["t_start_s"][ok],
                frame["output_tokens"][ok],
                frame["token_times_us"][ok],
                frame["event_tokens"][ok] if "event_tokens" in frame.columns else None,
                sort=False,
            )
            for k in range(len(windows)):
                totals[k] += counts[(times_s >= starts[k]) & (times_s < ends[k])].sum()
            timed = np.zeros(len(frame), bool)
            timed[ok] = timed_ok
            flags.append(timed)
    except (pa.ArrowException, ValueError):
        return None
    return totals, (np.concatenate(flags) if flags else np.zeros(0, bool))


def step_server_means(windows: pd.DataFrame, series: pd.DataFrame | None) -> pd.DataFrame:
    """Time-average of a server series over each step's steady window.

    Parameters
    ----------
    windows : pandas.DataFrame
        :func:`step_windows` output (``window_start_s``, ``window_end_s``: wall clock, Unix s).
    series : pandas.DataFrame or None
        A normalised server series (``t_s`` plus the values of :data:`MEAN_COLUMNS`; a row holds
        until the next, :func:`llm_locust.analysis.server.series.time_average`); None or empty -> NaN.

    Returns
    -------
    pandas.DataFrame
        One row per window (same order), columns of :data:`MEAN_COLUMNS`, float64; NaN where no
        data covers the window.
    """
    data = series if series is not None and len(series) > 0 else None
    rows = []
    for window in windows.itertuples(index=False):
        start, end = float(window.window_start_s), float(window.window_end_s)
        rows.append(
            {
                out: (time_average(data["t_s"], data[col], start, end) if data is not None else np.nan)
                for out, col in MEAN_COLUMNS.items()
            }
        )
    return pd.DataFrame(rows, columns=list(MEAN_COLUMNS), dtype="float64")


REPLICA_COLUMNS: tuple[str, ...] = ("server_running", "server_waiting", "kv_usage_ratio")
"""Step-table columns that each replica gets its own of (:func:`replica_step_means`)."""


def replica_column(column: str, name: str) -> str:
    """The step-table column of one replica's figure: ``server_running[a]``.

    >>> replica_column("server_waiting", "127.0.0.1:8001")
    'server_waiting[127.0.0.1:8001]'
    """
    return f"{column}[{name}]"


def replica_names(table: pd.DataFrame) -> list[str]:
    """The replicas a step table has columns for, in column order (``[]`` for one server).

    >>> replica_names(pd.DataFrame(columns=["server_running", "server_running[a]", "server_waiting[a]",
    ...                                     "server_running[b]"]))
    ['a', 'b']
    """
    prefix = "server_running["
    return [c[len(prefix) : -1] for c in table.columns if c.startswith(prefix) and c.endswith("]")]


def replica_step_means(windows: pd.DataFrame, replicas) -> pd.DataFrame:
    """Each replica's running, waiting and KV usage over each step's steady window.

    Parameters
    ----------
    windows : pandas.DataFrame
        :func:`step_windows` output.
    replicas : sequence of llm_locust.analysis.server.replicas.Replica
        Each with ``name`` and its own normalised ``series``.

    Returns
    -------
    pandas.DataFrame
        One row per window, float64 columns :func:`replica_column` of :data:`REPLICA_COLUMNS`
        per replica (requests, requests, 0-1; a KV column only for a replica that reports KV
        usage); NaN where its data does not cover the window. No columns without replicas.
    """
    out = pd.DataFrame(index=windows.index)
    for replica in replicas:
        means = step_server_means(windows, replica.series)
        for column in REPLICA_COLUMNS:
            if column == "kv_usage_ratio" and not replica.series["kv_usage_ratio"].notna().any():
                continue
            out[replica_column(column, replica.name)] = means[column].to_numpy("float64")
    return out
