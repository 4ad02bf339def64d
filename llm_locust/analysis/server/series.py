"""The one normalised server series, whatever it was read from (Prometheus samples or a log).

Schema (:data:`SERIES_COLUMNS`), one row per instant, sorted by ``t_s``:

``t_s``
    Wall clock, Unix s.
``source``
    Where the row comes from: ``"metrics"`` or ``"log"``.
``running``, ``waiting``
    Requests in the running batch and queued (float64).
``kv_usage_ratio``
    KV cache in use, 0-1.
``gen_tps``, ``prompt_tps``
    Generated and prompt tokens processed per second.
``preemptions_per_s``
    Preemptions (vLLM), retractions (SGLang) per second.

A row is a **step function**: its values hold over ``[t_s[k], t_s[k+1])`` (the last row until the
end of any window it is averaged over). NaN means *no data over that interval* - a missing log
line or a failed scrape is never read as zero. The builders here turn samples or intervals into
that form; :func:`time_average` integrates it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

SERIES_COLUMNS: tuple[str, ...] = (
    "t_s",
    "source",
    "running",
    "waiting",
    "kv_usage_ratio",
    "gen_tps",
    "prompt_tps",
    "preemptions_per_s",
)
"""Columns of a normalised server series, in order."""

VALUE_COLUMNS: tuple[str, ...] = SERIES_COLUMNS[2:]
"""The value columns (all float64)."""


def empty_series() -> pd.DataFrame:
    """A normalised series with no rows (and the right dtypes)."""
    frame = pd.DataFrame({c: pd.Series(dtype="float64") for c in SERIES_COLUMNS})
    frame["source"] = frame["source"].astype(str)
    return frame


def breakpoints_from_samples(
    t_s: np.ndarray, values: np.ndarray, max_hold_s: float | None
) -> tuple[np.ndarray, np.ndarray]:
    """Step-function breakpoints of point samples that each hold at most ``max_hold_s``.

    Parameters
    ----------
    t_s : numpy.ndarray
        Sample instants, Unix s, increasing.
    values : numpy.ndarray
        Sample values; NaN = this sample does not carry the quantity (it is skipped, the
        previous value keeps holding).
    max_hold_s : float or None
        A sample holds until the next one, but at most this long; past it there is no data
        (a NaN breakpoint is inserted). None = hold until the next sample.

    Returns
    -------
    (times, values) : tuple of numpy.ndarray
        Breakpoints: ``values[k]`` holds from ``times[k]`` until ``times[k+1]``.

    Examples
    --------
    >>> t, v = breakpoints_from_samples(np.array([0.0, 1.0, 10.0]), np.array([1.0, 2.0, 3.0]), 2.0)
    >>> t.tolist(), v.tolist()
    ([0.0, 1.0, 3.0, 10.0, 12.0], [1.0, 2.0, nan, 3.0, nan])
    """
    keep = np.isfinite(values)
    times, vals = np.asarray(t_s, float)[keep], np.asarray(values, float)[keep]
    if max_hold_s is None or len(times) == 0:
        return times, vals
    expiry = times + max_hold_s
    nxt = np.append(times[1:], np.inf)
    gap = nxt > expiry
    out_t = np.concatenate([times, expiry[gap]])
    out_v = np.concatenate([vals, np.full(int(gap.sum()), np.nan)])
    order = np.argsort(out_t, kind="stable")
    return out_t[order], out_v[order]


def breakpoints_from_intervals(
    starts_s: np.ndarray,
    ends_s: np.ndarray,
    weights: np.ndarray | None = None,
    *,
    valid_from_s: float,
    valid_to_s: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Step function ``f(t) = sum of weights of intervals [start, end) containing t``.

    Used where a log gives intervals rather than samples (a TGI request's queue and inference
    times, a llama.cpp slot from launch to release): the count is exact wherever the log covers.

    Parameters
    ----------
    starts_s, ends_s : numpy.ndarray
        Interval bounds, Unix s.
    weights : numpy.ndarray, optional
        Weight of each interval (default 1: a count; a rate in tokens/s gives tokens/s).
    valid_from_s : float
        Before this instant there is no data (NaN).
    valid_to_s : float, optional
        From this instant on there is no data (a NaN breakpoint).

    Returns
    -------
    (times, values) : tuple of numpy.ndarray

    Examples
    --------
    >>> t, v = breakpoints_from_intervals(np.array([1.0, 2.0]), np.array([3.0, 4.0]),
    ...                                   valid_from_s=0.0, valid_to_s=5.0)
    >>> t.tolist(), v.tolist()
    ([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [0.0, 1.0, 2.0, 1.0, 0.0, nan])
    """
    starts, ends = np.asarray(starts_s, float), np.asarray(ends_s, float)
    w = np.ones(len(starts)) if weights is None else np.asarray(weights, float)
    times = np.concatenate([[valid_from_s], starts, ends])
    deltas = np.concatenate([[0.0], w, -w])
    order = np.argsort(times, kind="stable")
    times, level = times[order], np.cumsum(deltas[order])
    last = np.append(times[1:] != times[:-1], True)  # one breakpoint per instant: its final level
    times, level = times[last], level[last]
    inside = times >= valid_from_s
    times, level = times[inside], np.round(level[inside], 9)
    if valid_to_s is not None:
        keep = times < valid_to_s
        times = np.append(times[keep], valid_to_s)
        level = np.append(level[keep], np.nan)
    return times, level


def series_from_breakpoints(columns: dict[str, tuple[np.ndarray, np.ndarray]], *, source: str) -> pd.DataFrame:
    """Assemble a normalised series from per-column breakpoints.

    Parameters
    ----------
    columns : dict
        ``{column: (times, values)}`` for some of :data:`VALUE_COLUMNS`; absent columns are NaN.
    source : str
        Value of the ``source`` column.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`SERIES_COLUMNS`, one row per distinct breakpoint instant; each column's
        value at ``t`` is its last breakpoint at or before ``t`` (NaN before its first).
    """
    unknown = set(columns) - set(VALUE_COLUMNS)
    if unknown:
        raise ValueError(f"unknown series columns {sorted(unknown)}; known {list(VALUE_COLUMNS)}")
    parts = [np.asarray(t, float) for t, _ in columns.values() if len(t)]
    if not parts:
        return empty_series()
    times = np.unique(np.concatenate(parts))
    out = {"t_s": times, "source": np.full(len(times), source, dtype=object)}
    for column in VALUE_COLUMNS:
        if column not in columns or not len(columns[column][0]):
            out[column] = np.full(len(times), np.nan)
            continue
        col_t, col_v = (np.asarray(a, float) for a in columns[column])
        index = np.searchsorted(col_t, times, side="right") - 1
        out[column] = np.where(index >= 0, col_v[np.clip(index, 0, None)], np.nan)
    frame = pd.DataFrame(out, columns=list(SERIES_COLUMNS))
    frame["source"] = frame["source"].astype(str)
    return frame


def time_average(t_s: pd.Series, values: pd.Series, window_start_s: float, window_end_s: float) -> float:
    """Time-average of a step-function series over a window.

    Each row holds from its ``t_s`` until the next row (the last one until the window end). A
    NaN row means no data over its interval: that interval is left out, as is the part of the
    window before the first row.

    Parameters
    ----------
    t_s : pandas.Series
        Row instants, Unix s, increasing.
    values : pandas.Series
        Row values (any unit; the result has the same unit).
    window_start_s, window_end_s : float
        The window, Unix s.

    Returns
    -------
    float
        NaN when the window is empty or no row with data covers any of it.

    Examples
    --------
    >>> t = pd.Series([0.0, 5.0]); v = pd.Series([2.0, 4.0])
    >>> time_average(t, v, 0.0, 10.0)
    3.0
    >>> time_average(pd.Series([0.0, 5.0]), pd.Series([2.0, float("nan")]), 0.0, 10.0)
    2.0
    """
    times, vals = t_s.to_numpy(float), values.to_numpy(float)
    if not window_end_s > window_start_s or len(times) == 0 or times[0] >= window_end_s:
        return float("nan")
    seg_start = np.clip(times, window_start_s, window_end_s)
    seg_end = np.clip(np.append(times[1:], window_end_s), window_start_s, window_end_s)
    lengths = seg_end - seg_start
    ok = np.isfinite(vals) & (lengths > 0)
    covered = lengths[ok].sum()
    return float((lengths[ok] * vals[ok]).sum() / covered) if covered > 0 else float("nan")


def covered_s(t_s: pd.Series, has_data: pd.Series, window_start_s: float, window_end_s: float) -> float:
    """Seconds of the window a step-function series has data over (rows as in
    :func:`time_average`: each holds until the next, the last until the window end).

    Parameters
    ----------
    t_s : pandas.Series
        Row instants, Unix s, increasing.
    has_data : pandas.Series of bool
        Per row, whether it carries data (e.g. ``running`` or ``waiting`` not NaN).
    window_start_s, window_end_s : float

    Returns
    -------
    float
        Between 0 and the window length, s.

    >>> covered_s(pd.Series([0.0, 5.0, 7.0]), pd.Series([True, False, True]), 2.0, 10.0)
    6.0
    """
    times, ok = t_s.to_numpy(float), has_data.to_numpy(bool)
    if not window_end_s > window_start_s or len(times) == 0:
        return 0.0
    seg_start = np.clip(times, window_start_s, window_end_s)
    seg_end = np.clip(np.append(times[1:], window_end_s), window_start_s, window_end_s)
    return float((seg_end - seg_start)[ok].sum())


def highest(
    t_s: pd.Series,
    values: pd.Series,
    window_start_s: float = -np.inf,
    window_end_s: float = np.inf,
    *,
    min_hold_s: float = 0.0,
) -> float:
    """Highest value holding for at least ``min_hold_s`` within the window (NaN when none).

    ``min_hold_s`` ignores blips shorter than the stamps' precision (two requests' intervals
    rebuilt from a log touching by a microsecond).

    >>> highest(pd.Series([0.0, 5.0, 9.0]), pd.Series([2.0, 4.0, 1.0]), 6.0, 10.0)
    4.0
    >>> highest(pd.Series([0.0, 5.0, 5.001]), pd.Series([2.0, 4.0, 1.0]), min_hold_s=0.05)
    2.0
    """
    times, vals = t_s.to_numpy(float), values.to_numpy(float)
    if len(times) == 0:
        return float("nan")
    ends = np.append(times[1:], np.inf)
    held = np.minimum(ends, window_end_s) - np.maximum(times, window_start_s)
    overlap = (times < window_end_s) & (ends > window_start_s) & np.isfinite(vals) & (held >= min_hold_s)
    return float(vals[overlap].max()) if overlap.any() else float("nan")


def hold_limit_s(times: np.ndarray, *, factor: float = 3.0, floor_s: float = 1.0) -> float | None:
    """How long a sample holds: ``factor`` x the median gap between samples (log lines, scrapes).

    Past it the source is silent for longer than its own rhythm explains, and there is no data
    (a missing line or a failed scrape is never read as zero). None with fewer than two
    samples.

    >>> hold_limit_s(np.array([0.0, 2.0, 4.0, 6.0]))
    6.0
    """
    finite = np.sort(np.asarray(times, float)[np.isfinite(times)])
    if len(finite) < 2:
        return None
    gaps = np.diff(finite)
    gaps = gaps[gaps > 0]
    return max(floor_s, factor * float(np.median(gaps))) if len(gaps) else None


def limit_holds(series: pd.DataFrame, max_hold_s: float | None) -> pd.DataFrame:
    """Copy of ``series`` where no row holds longer than ``max_hold_s``: a row followed by a
    longer gap (and the last row) gets an all-NaN row ``max_hold_s`` after it - a source that
    went silent has no data there, it does not repeat its last value.

    >>> s = series_from_breakpoints({"running": (np.array([0.0, 1.0, 9.0]),
    ...                                          np.array([1.0, 2.0, 3.0]))}, source="metrics")
    >>> limit_holds(s, 2.0)[["t_s", "running"]].values.tolist()
    [[0.0, 1.0], [1.0, 2.0], [3.0, nan], [9.0, 3.0], [11.0, nan]]
    """
    if max_hold_s is None or series.empty:
        return series
    times = series["t_s"].to_numpy(float)
    gaps = np.append(np.diff(times), np.inf)
    expire = times[gaps > max_hold_s] + max_hold_s
    if not len(expire):
        return series
    blanks = pd.DataFrame({c: np.full(len(expire), np.nan) for c in VALUE_COLUMNS})
    blanks.insert(0, "source", series["source"].iloc[0] if len(series) else "")
    blanks.insert(0, "t_s", expire)
    out = pd.concat([series, blanks[list(SERIES_COLUMNS)]], ignore_index=True)
    return out.sort_values("t_s", kind="stable").reset_index(drop=True)
