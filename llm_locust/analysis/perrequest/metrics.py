"""Per-request derived metrics and the client in-flight count, computed from ``requests.csv`` rows.

Every function takes the requests frame of :class:`llm_locust.analysis.rundir.reader.Run` (columns
``t_start_s`` wall clock Unix s; ``ttft_ms``, ``e2e_ms`` ms from ``t_start_s``;
``output_tokens``; ``error_kind`` "" for a success) and returns new objects; inputs are never
modified.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def end_time_s(requests: pd.DataFrame) -> pd.Series:
    """Wall-clock instant each request completed (or failed).

    ``t_end_s = t_start_s + e2e_ms / 1000``. When ``e2e_ms`` was not measured the request is
    placed at ``t_start_s`` (zero duration), so failures without a duration still count.

    Parameters
    ----------
    requests : pandas.DataFrame
        Columns ``t_start_s`` (Unix s) and ``e2e_ms`` (ms, NaN if not measured).

    Returns
    -------
    pandas.Series
        float64, Unix s, same index as ``requests``.
    """
    return requests["t_start_s"] + requests["e2e_ms"].fillna(0.0) / 1000.0


def tpot_ms(requests: pd.DataFrame) -> pd.Series:
    """Time per output token after the first, ms (smaller is better).

    ``TPOT = (e2e_ms - ttft_ms) / (output_tokens - 1)``; NaN when ``output_tokens < 2`` or either
    time is missing (the metric does not apply).

    Parameters
    ----------
    requests : pandas.DataFrame
        Columns ``ttft_ms``, ``e2e_ms`` (ms) and ``output_tokens``.

    Returns
    -------
    pandas.Series
        float64, ms.

    Examples
    --------
    >>> frame = pd.DataFrame({"ttft_ms": [370.0, 50.0], "e2e_ms": [1000.0, 60.0],
    ...                       "output_tokens": [64.0, 1.0]})
    >>> tpot_ms(frame).tolist()
    [10.0, nan]
    """
    decode_tokens = requests["output_tokens"] - 1.0
    tpot = (requests["e2e_ms"] - requests["ttft_ms"]) / decode_tokens.where(decode_tokens >= 1)
    return tpot.astype("float64")


def succeeded(error_kind: pd.Series) -> pd.Series:
    """Whether each request succeeded: no ``error_kind`` (bool, same index). The one rule, for the
    loaded requests (:func:`with_request_metrics`' ``ok``) and for blocks read apart from them."""
    return error_kind.astype(str) == ""


def with_request_metrics(requests: pd.DataFrame) -> pd.DataFrame:
    """Copy of ``requests`` with derived per-request columns added.

    Added columns: ``ok`` (bool, ``error_kind == ""``), ``t_end_s`` (:func:`end_time_s`, Unix s),
    ``tpot_ms`` (:func:`tpot_ms`, ms), ``decode_tps`` (``1000 / tpot_ms``, tokens/s per request,
    larger is better; NaN where TPOT is NaN or not positive), and the latencies counted from the
    scheduled send (:func:`from_schedule`: ``send_lag_ms``, ``ttft_from_schedule_ms``,
    ``e2e_from_schedule_ms``; NaN without ``scheduled_s``).

    Parameters
    ----------
    requests : pandas.DataFrame
        Rows of ``requests.csv`` as loaded by :func:`llm_locust.analysis.rundir.reader.load_run`.

    Returns
    -------
    pandas.DataFrame
    """
    out = requests.copy(deep=False)  # copy-on-write: the new columns never reach ``requests``
    out["ok"] = succeeded(out["error_kind"])
    out["t_end_s"] = end_time_s(requests)
    out["tpot_ms"] = tpot_ms(requests)
    out["decode_tps"] = decode_tps(out["tpot_ms"])
    for column, values in from_schedule(requests).items():
        out[column] = values
    return out


def from_schedule(requests: pd.DataFrame) -> pd.DataFrame:
    """Send lag and latencies counted from the scheduled send (request-rate runs), ms.

    ``send_lag_ms = (t_start_s - scheduled_s) * 1000`` (how late the send left: no user was
    free at its time; smaller is better), ``ttft_from_schedule_ms = send_lag_ms + ttft_ms`` and
    ``e2e_from_schedule_ms = send_lag_ms + e2e_ms``: what a user of an open system arriving at
    the scheduled time would see, so a client that falls behind cannot hide the server's
    slowness in sends it delayed (coordinated omission). NaN where ``scheduled_s`` is NaN or
    absent (a closed loop: each send waits for the previous request by design).

    Parameters
    ----------
    requests : pandas.DataFrame
        Columns ``t_start_s`` (Unix s), ``ttft_ms``, ``e2e_ms`` (ms) and, optionally,
        ``scheduled_s`` (Unix s).

    Returns
    -------
    pandas.DataFrame
        Columns ``send_lag_ms``, ``ttft_from_schedule_ms``, ``e2e_from_schedule_ms``, float64,
        same index.

    Examples
    --------
    >>> frame = pd.DataFrame({"t_start_s": [10.002, 5.0], "scheduled_s": [10.0, float("nan")],
    ...                       "ttft_ms": [50.0, 40.0], "e2e_ms": [500.0, 400.0]})
    >>> from_schedule(frame).round(3).to_dict("list")
    {'send_lag_ms': [2.0, nan], 'ttft_from_schedule_ms': [52.0, nan], 'e2e_from_schedule_ms': [502.0, nan]}
    """
    if "scheduled_s" in requests.columns:
        scheduled = requests["scheduled_s"].astype("float64")
    else:
        scheduled = pd.Series(np.nan, index=requests.index, dtype="float64")
    lag_ms = (requests["t_start_s"] - scheduled) * 1000.0
    return pd.DataFrame(
        {
            "send_lag_ms": lag_ms,
            "ttft_from_schedule_ms": lag_ms + requests["ttft_ms"],
            "e2e_from_schedule_ms": lag_ms + requests["e2e_ms"],
        },
        index=requests.index,
        dtype="float64",
    )


def quantile(values: pd.Series, q: float) -> float:
    """Quantile ``q`` (linear interpolation) of the non-NaN values; NaN when there are none.

    >>> quantile(pd.Series([1.0, 3.0, float("nan")]), 0.5)
    2.0
    """
    values = values.dropna()
    return float(values.quantile(q)) if len(values) else float("nan")


def decode_tps(tpot: pd.Series) -> pd.Series:
    """Decode rate of each request, tokens/s per request (larger is better): ``1000 / tpot_ms``.

    NaN where TPOT is NaN or not positive (the rate does not apply).

    >>> decode_tps(pd.Series([10.0, 0.0, float("nan")])).tolist()
    [100.0, nan, nan]
    """
    return (1000.0 / tpot.where(tpot > 0)).astype("float64")


def mean_inflight(t_start_s: pd.Series, t_end_s: pd.Series, window_start_s: float, window_end_s: float) -> float:
    """Time-average number of requests in flight over a window (achieved client concurrency).

    Exact integration: the integral of the in-flight count over ``[window_start_s,
    window_end_s]`` equals the sum of each request's overlap with the window, so the average is
    ``sum(max(0, min(end, W1) - max(start, W0))) / (W1 - W0)``.

    Parameters
    ----------
    t_start_s, t_end_s : pandas.Series
        Interval of each request, wall clock Unix s.
    window_start_s, window_end_s : float
        The window, Unix s.

    Returns
    -------
    float
        Requests; NaN when the window is empty (``window_end_s <= window_start_s``).

    Examples
    --------
    >>> mean_inflight(pd.Series([0.0, 2.0, 5.0]), pd.Series([4.0, 6.0, 15.0]), 0.0, 10.0)
    1.3
    """
    length_s = window_end_s - window_start_s
    if not length_s > 0:
        return float("nan")
    overlap = np.minimum(t_end_s.to_numpy(float), window_end_s) - np.maximum(t_start_s.to_numpy(float), window_start_s)
    return float(np.clip(overlap, 0.0, None).sum() / length_s)


def prorated_tokens(
    t_first_s: pd.Series, t_end_s: pd.Series, tokens: pd.Series, window_start_s: float, window_end_s: float
) -> float:
    """Output tokens generated inside a window, each request's tokens spread over its decode.

    Each request's ``tokens`` are spread uniformly over ``[t_first_s, t_end_s]`` (first token to
    end) and the density is integrated over the window - exact, no sampling:
    ``sum(tokens * overlap([t_first, t_end], [W0, W1]) / (t_end - t_first))``. A request with
    ``t_end <= t_first`` (one token, or no TTFT) puts all its tokens at ``t_end``, counted when
    ``W0 <= t_end < W1``; a missing ``t_first`` (NaN) is treated the same way.

    Parameters
    ----------
    t_first_s, t_end_s : pandas.Series
        First token and end of each request, wall clock Unix s.
    tokens : pandas.Series
        Output tokens of each request (NaN counts as 0).
    window_start_s, window_end_s : float
        The window ``[W0, W1)``, Unix s.

    Returns
    -------
    float
        Tokens (divide by ``W1 - W0`` for tokens/s).

    Examples
    --------
    >>> prorated_tokens(pd.Series([0.0, 8.0]), pd.Series([20.0, 12.0]), pd.Series([100.0, 40.0]),
    ...                 10.0, 20.0)
    70.0
    """
    first = t_first_s.to_numpy(float)
    end = t_end_s.to_numpy(float)
    count = np.nan_to_num(tokens.to_numpy(float), nan=0.0)
    length = end - first
    spread = np.isfinite(length) & (length > 0)
    overlap = np.clip(np.minimum(end, window_end_s) - np.maximum(first, window_start_s), 0.0, None)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(
            spread, overlap / np.where(spread, length, 1.0), (end >= window_start_s) & (end < window_end_s)
        )
    return float(np.sum(count * share))


def token_events(
    t_start_s: pd.Series,
    output_tokens: pd.Series,
    token_times_us: pd.Series,
    event_tokens: pd.Series | None = None,
    *,
    sort: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """When each request's output tokens arrived, from its recorded token events.

    A request is *timed* when ``token_times_us`` holds at least one event and ``output_tokens``
    is a number above 0. Event ``i`` arrived at ``t_start_s + token_times_us[i] / 1e6`` and
    carries ``event_tokens[i]`` tokens when that cell has one count per event, else (as
    :func:`llm_locust.analysis.perrequest.itl.request_itl` reads it) the first event one token and the others
    ``(N - 1) / (m - 1)`` each (``N`` with one event). Each timed request's counts are then
    scaled to sum to its ``output_tokens`` ``N``, so it adds exactly ``N`` tokens, as
    :func:`prorated_tokens` does. A cell that is no list of numbers leaves its request untimed.

    Parameters
    ----------
    t_start_s : pandas.Series
        Send instant of each request, wall clock Unix s, length n.
    output_tokens : pandas.Series
        ``N`` of each request, tokens (NaN: untimed), length n.
    token_times_us, event_tokens : pandas.Series of str
        As in ``requests.csv`` (space-separated µs from the send / tokens per event; "" or None
        for none), length n; ``event_tokens`` None: counts unknown.
    sort : bool, default True
        Order the events by arrival (as :func:`tokens_between` needs); False leaves them in
        request order.

    Returns
    -------
    (times_s, tokens, timed) : tuple of numpy.ndarray
        ``times_s`` float64 event arrival instants, Unix s, increasing (with ``sort``); ``tokens`` float64
        tokens each event carried, same length; ``timed`` bool, shape (n,).

    Examples
    --------
    >>> times, tokens, timed = token_events(pd.Series([100.0, 200.0]), pd.Series([5.0, 3.0]),
    ...                                     pd.Series(["1000000 2000000 3000000", ""]))
    >>> times.tolist(), tokens.tolist(), timed.tolist()
    ([101.0, 102.0, 103.0], [1.0, 2.0, 2.0], [True, False])
    """
    n = len(t_start_s)
    starts = t_start_s.to_numpy(float)
    total = output_tokens.to_numpy(float)
    event_us, m = _split(token_times_us)  # a cell that is no list of numbers: that row untimed
    carried_given, k = _split(event_tokens if event_tokens is not None else pd.Series([""] * n, dtype=object))
    ok_row = (m > 0) & np.isfinite(total) & (total > 0) & np.isfinite(starts)
    # plain rows (the usual stream): one token an event, as many events as output tokens
    plain = ok_row & (k == 0) & (m == total)
    if plain.all():
        times, tokens, timed = np.repeat(starts, m) + event_us / 1e6, np.ones(len(event_us)), plain
    else:
        from llm_locust.analysis.perrequest.itlpool import tokens_per_event

        rows = np.repeat(np.arange(n), m)
        carried = tokens_per_event(total, m, carried_given, k)
        carried = np.where(np.isfinite(carried) & (carried >= 0), carried, np.nan)
        row_sum = np.bincount(rows, weights=np.nan_to_num(carried, nan=0.0), minlength=n)
        bad = np.bincount(rows, weights=~np.isfinite(carried) | ~np.isfinite(event_us), minlength=n) > 0
        timed = ok_row & (row_sum > 0) & ~bad
        keep = timed[rows]
        scale = np.divide(total, row_sum, out=np.zeros(n), where=timed)
        times = starts[rows][keep] + event_us[keep] / 1e6
        tokens = carried[keep] * scale[rows][keep]
    if not sort:
        return times, tokens, timed
    order = np.argsort(times, kind="stable")
    return times[order], tokens[order], timed


def _split(cells: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Every row's numbers end to end (float64) and how many each row has (int64): in bulk
    (:func:`llm_locust.analysis.perrequest.itlpool.split_numbers`), else row by row (:func:`_split_rows`)."""
    from llm_locust.analysis.perrequest.itlpool import split_numbers

    parsed = split_numbers(cells)
    if parsed is None:
        return _split_rows(cells.tolist())
    return np.asarray(parsed[0], float), parsed[1]


def _split_rows(cells: list) -> tuple[np.ndarray, np.ndarray]:
    """:func:`llm_locust.analysis.perrequest.itlpool.split_numbers` row by row: a cell that is no list of numbers
    counts as empty."""
    from llm_locust.analysis.perrequest.itl import _numbers

    values: list[np.ndarray] = []
    counts = np.zeros(len(cells), np.int64)
    for i, cell in enumerate(cells):
        try:
            numbers = _numbers(cell)
        except (ValueError, TypeError):
            continue
        values.append(numbers)
        counts[i] = len(numbers)
    return (np.concatenate(values) if values else np.zeros(0)), counts


def tokens_between(times_s: np.ndarray, tokens: np.ndarray, window_start_s: float, window_end_s: float) -> float:
    """Tokens of the events of :func:`token_events` that arrived in ``[W0, W1)``.

    Parameters
    ----------
    times_s, tokens : numpy.ndarray
        :func:`token_events`' first two arrays (``times_s`` increasing), same length.
    window_start_s, window_end_s : float
        The window, Unix s.

    Returns
    -------
    float
        Tokens.

    >>> tokens_between(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 4.0]), 2.0, 3.0)
    2.0
    """
    lo, hi = np.searchsorted(times_s, [window_start_s, window_end_s], side="left")
    return float(tokens[lo:hi].sum())


def inflight_series(t_start_s: pd.Series, t_end_s: pd.Series) -> pd.DataFrame:
    """Number of requests in flight as a step function of wall time.

    Each request counts from ``t_start_s`` (inclusive) to ``t_end_s`` (exclusive). Row *k* gives
    the count holding on ``[t_s[k], t_s[k+1])``; simultaneous events are merged.

    Parameters
    ----------
    t_start_s, t_end_s : pandas.Series
        Interval of each request, wall clock Unix s.

    Returns
    -------
    pandas.DataFrame
        Columns ``t_s`` (float64, Unix s, increasing) and ``inflight`` (int64, requests). Empty
        when there are no requests.

    Examples
    --------
    >>> inflight_series(pd.Series([0.0, 2.0]), pd.Series([4.0, 6.0]))["inflight"].tolist()
    [1, 2, 1, 0]
    """
    times = np.concatenate([t_start_s.to_numpy(float), t_end_s.to_numpy(float)])
    deltas = np.concatenate([np.ones(len(t_start_s), np.int64), -np.ones(len(t_end_s), np.int64)])
    known = ~np.isnan(times)
    times, deltas = times[known], deltas[known]
    order = np.argsort(times, kind="stable")  # numpy, not a groupby: a million requests in ~100 MB
    times, deltas = times[order], deltas[order]
    del order
    firsts = np.flatnonzero(np.concatenate([[True], times[1:] != times[:-1]])) if len(times) else np.zeros(0, int)
    return pd.DataFrame(
        {
            "t_s": times[firsts],
            "inflight": np.cumsum(np.add.reduceat(deltas, firsts) if len(firsts) else np.zeros(0, np.int64)),
        }
    )


MAX_INFLIGHT_BINS = 100_000
"""Most bins :func:`inflight_binned` makes; a longer span gets wider bins (a corrupt duration,
e.g. ``e2e_ms`` of 1e12, must not exhaust memory)."""


def inflight_binned(inflight: pd.DataFrame, bin_s: float = 1.0) -> pd.DataFrame:
    """Time-average of the in-flight step series over consecutive bins (for plotting).

    The raw series drops for an instant each time a request ends and the next starts, which
    draws as a comb; the bin average shows the achieved concurrency. The integral of the step
    function is piecewise linear between events, so each bin's average is exact:
    ``(I(t + bin_s) - I(t)) / bin_s`` with ``I`` interpolated between events.

    Parameters
    ----------
    inflight : pandas.DataFrame
        :func:`inflight_series` output (``t_s``, ``inflight``).
    bin_s : float, default 1.0
        Bin length, s (> 0); widened to ``span / MAX_INFLIGHT_BINS`` when the series spans more
        than :data:`MAX_INFLIGHT_BINS` bins.

    Returns
    -------
    pandas.DataFrame
        ``t_s`` (bin start, Unix s) and ``inflight`` (float, mean requests in flight in the bin);
        empty when ``inflight`` is.

    Raises
    ------
    ValueError
        ``bin_s`` is not positive.

    Examples
    --------
    >>> series = inflight_series(pd.Series([0.0, 0.5]), pd.Series([2.0, 1.0]))
    >>> inflight_binned(series, 1.0)["inflight"].tolist()
    [1.5, 1.0]
    """
    if not bin_s > 0:
        raise ValueError(f"bin_s must be > 0, got {bin_s}")
    if inflight.empty:
        return pd.DataFrame({"t_s": pd.Series(dtype=float), "inflight": pd.Series(dtype=float)})
    t = inflight["t_s"].to_numpy(float)
    counts = inflight["inflight"].to_numpy(float)
    bin_s = max(bin_s, (t[-1] - t[0]) / MAX_INFLIGHT_BINS)
    integral = np.concatenate([[0.0], np.cumsum(counts[:-1] * np.diff(t))])
    edges = np.arange(t[0], t[-1] + bin_s, bin_s)
    if len(edges) < 2:
        edges = np.array([t[0], t[0] + bin_s])
    averaged = np.diff(np.interp(edges, t, integral)) / bin_s
    return pd.DataFrame({"t_s": edges[:-1], "inflight": averaged})
