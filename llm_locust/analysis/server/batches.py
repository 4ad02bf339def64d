"""Batch evidence per ladder step: batch size as a distribution, batch wait, queue and its trend.

The step mean of ``running`` says how many sequences ran on average; it cannot tell a server
that batches 4 at a time from one that alternates 1 and 7, nor say how long batches waited to
fill. Servers that log each batch (SGLang's Prefill/Decode batch lines, in-house static
batchers read through a user format's ``[[log.batches]]``; see
:mod:`llm_locust.analysis.server.serverlog.batchlines`) give one row per batch, and :func:`batch_stats`
summarises them per step's steady window. Written here (not with a library) because it is a
join of batch lines onto the run's step windows, the part of measurement this package owns.

The batches frame (:data:`BATCH_COLUMNS`):

=================  =========  ===========================================================
column             dtype      meaning
=================  =========  ===========================================================
``t_s``            float64    when the batch line was written, Unix s
``phase``          str        ``batch`` (a user format's line: one whole batch), ``prefill``
                              or ``decode`` (SGLang's Prefill / Decode batch lines)
``batch_size``     float64    sequences in the batch
``batch_wait_ms``  float64    how long the batch waited to fill before it started, ms (NaN
                              when the server does not say)
``queue``          float64    requests left waiting when the batch started (NaN when not
                              said)
=================  =========  ===========================================================
"""

from __future__ import annotations

import numpy as np
import pandas as pd

BATCH_COLUMNS: tuple[str, ...] = ("t_s", "phase", "batch_size", "batch_wait_ms", "queue")
"""Columns of the batches frame (module docstring)."""

STAT_COLUMNS: tuple[str, ...] = (
    "step",
    "target_users",
    "n_batches",
    "batch_size_p50",
    "batch_size_max",
    "batch_size_mean",
    "batch_wait_ms_p50",
    "batch_wait_ms_max",
    "batch_wait_at_max_ratio",
    "queue_mean",
    "queue_slope_per_s",
)
"""Columns of :func:`batch_stats`' result."""

AT_MAX_FRACTION = 0.95
"""A batch "waited its configured maximum" when its wait is at least this fraction of it (a
timer fires a little late, never early, so the fraction only absorbs rounding in the log)."""


def empty_batches() -> pd.DataFrame:
    """A batches frame without rows, with the dtypes of :data:`BATCH_COLUMNS`."""
    return pd.DataFrame(
        {
            "t_s": pd.Series(dtype="float64"),
            "phase": pd.Series(dtype=str),
            "batch_size": pd.Series(dtype="float64"),
            "batch_wait_ms": pd.Series(dtype="float64"),
            "queue": pd.Series(dtype="float64"),
        }
    )


def _slope_per_s(t_s: np.ndarray, values: np.ndarray) -> float:
    """Least-squares slope of ``values`` against ``t_s`` (per s); NaN with fewer than 2 distinct
    instants."""
    ok = np.isfinite(t_s) & np.isfinite(values)
    t_s, values = t_s[ok], values[ok]
    if len(t_s) < 2 or np.ptp(t_s) == 0:
        return float("nan")
    t = t_s - t_s.mean()
    return float((t * (values - values.mean())).sum() / (t * t).sum())


def _nan_stat(values: np.ndarray, fn) -> float:
    values = values[np.isfinite(values)]
    return float(fn(values)) if len(values) else float("nan")


def batch_stats(
    batches: pd.DataFrame, step_windows: pd.DataFrame, *, batch_wait_max_ms: float | None = None
) -> pd.DataFrame:
    """Per step, the distribution of batch sizes, batch waits and the queue's level and trend.

    A batch belongs to the step whose steady window ``[window_start_s, window_end_s)`` holds its
    ``t_s``. Sizes come from the rows of phase ``batch`` and ``decode`` (whole batches); only
    when a window has none of those, from ``prefill`` rows (SGLang's Prefill lines, the
    requests admitted together). Waits and queue come from every row.

    Parameters
    ----------
    batches : pandas.DataFrame
        The batches frame (:data:`BATCH_COLUMNS`; module docstring).
    step_windows : pandas.DataFrame
        ``step``, ``target_users``, ``window_start_s``, ``window_end_s`` (Unix s), as
        :func:`llm_locust.analysis.perstep.table.step_windows` returns.
    batch_wait_max_ms : float, optional
        The server's configured longest batch wait, ms (``ServerConfig.batch_wait_max_ms``);
        without it ``batch_wait_at_max_ratio`` is NaN.

    Returns
    -------
    pandas.DataFrame
        One row per step window, :data:`STAT_COLUMNS`:

        - ``n_batches`` (int64): batch rows in the window;
        - ``batch_size_p50``, ``batch_size_max``, ``batch_size_mean``: median, largest and mean
          batch size, sequences;
        - ``batch_wait_ms_p50``, ``batch_wait_ms_max``: median and largest batch wait, ms;
        - ``batch_wait_at_max_ratio``: share of the batches with a logged wait whose wait is at
          least :data:`AT_MAX_FRACTION` of ``batch_wait_max_ms`` - near 1 means batches start
          because the timer fires, not because they filled: batches wait to fill (shorten the
          batch wait, or send more concurrent requests);
        - ``queue_mean``: mean of the logged queue lengths, requests; ``queue_slope_per_s``:
          their least-squares slope over time, requests/s (> 0: the queue grows within the
          step).

        Every statistic is NaN when the window has no value for it.

    Raises
    ------
    ValueError
        When a column of :data:`BATCH_COLUMNS` or of ``step_windows`` is missing.

    Examples
    --------
    >>> b = pd.DataFrame({"t_s": [1.0, 2.0, 3.0], "phase": ["batch"] * 3,
    ...                   "batch_size": [1.0, 3.0, 2.0], "batch_wait_ms": [250.0, 250.0, 40.0],
    ...                   "queue": [0.0, 1.0, 2.0]})
    >>> w = pd.DataFrame({"step": [0], "target_users": [4], "window_start_s": [0.0],
    ...                   "window_end_s": [10.0]})
    >>> row = batch_stats(b, w, batch_wait_max_ms=250.0).iloc[0]
    >>> [float(row[c]) for c in ("batch_size_p50", "batch_wait_ms_max", "queue_slope_per_s")]
    [2.0, 250.0, 1.0]
    >>> round(float(row["batch_wait_at_max_ratio"]), 3)
    0.667
    """
    missing = [c for c in BATCH_COLUMNS if c not in batches.columns]
    missing += [c for c in ("step", "target_users", "window_start_s", "window_end_s") if c not in step_windows.columns]
    if missing:
        raise ValueError(f"batch_stats: missing columns {missing}")
    t_all = batches["t_s"].to_numpy(float)
    rows = []
    for window in step_windows.itertuples(index=False):
        inside = (t_all >= window.window_start_s) & (t_all < window.window_end_s)
        part = batches[inside]
        whole = part[part["phase"].isin(["batch", "decode"])]
        sizes = (whole if len(whole) else part)["batch_size"].to_numpy(float)
        waits = part["batch_wait_ms"].to_numpy(float)
        queue = part["queue"].to_numpy(float)
        logged_waits = waits[np.isfinite(waits)]
        at_max = float("nan")
        if batch_wait_max_ms is not None and batch_wait_max_ms > 0 and len(logged_waits):
            at_max = float(np.mean(logged_waits >= AT_MAX_FRACTION * batch_wait_max_ms))
        rows.append(
            {
                "step": window.step,
                "target_users": window.target_users,
                "n_batches": len(part),
                "batch_size_p50": _nan_stat(sizes, np.median),
                "batch_size_max": _nan_stat(sizes, np.max),
                "batch_size_mean": _nan_stat(sizes, np.mean),
                "batch_wait_ms_p50": _nan_stat(waits, np.median),
                "batch_wait_ms_max": _nan_stat(waits, np.max),
                "batch_wait_at_max_ratio": at_max,
                "queue_mean": _nan_stat(queue, np.mean),
                "queue_slope_per_s": _slope_per_s(part["t_s"].to_numpy(float), queue),
            }
        )
    out = pd.DataFrame(rows, columns=list(STAT_COLUMNS))
    return out.astype({"n_batches": "int64"})
