"""Per-step figures of a request-rate (open-loop) run: offered vs achieved rate, send lag, and
latency counted from the schedule.

A rate run's steps carry ``target_rate_rps`` (:attr:`llm_locust.analysis.rundir.reader.Run.steps`) and its
requests ``scheduled_s`` (the send time fixed before the run, master clock, Unix s). Each step
``[step_start_s, window_end_s)`` of length ``D`` plans ``round(target_rate_rps * D)`` sends over
all workers (``llm_locust.client.schedule``: the count is exact, constant or Poisson); a send
that no user was free to make before the step's users were stopped has no record, so
``unsent = planned_sends - recorded_sends`` (recorded: rows whose ``scheduled_s`` falls in the
step). The other figures use the step's steady window ``[W0, W1)`` of length ``W`` like
:func:`llm_locust.analysis.perstep.table.step_table`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from llm_locust.analysis.perrequest.metrics import quantile as _quantile

RATE_COLUMNS: tuple[str, ...] = (
    "target_rate_rps",
    "achieved_rate_rps",
    "planned_sends",
    "unsent",
    "send_lag_p50_ms",
    "send_lag_p99_ms",
    "interarrival_cv",
    "ttft_from_schedule_p50_ms",
    "ttft_from_schedule_p95_ms",
    "e2e_from_schedule_p50_ms",
)
"""Columns :func:`rate_columns` adds to the step table, in order (all NaN in a closed loop)."""


def rate_columns(requests: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """The rate figures of every step.

    Definitions (window ``[W0, W1)``, ``W = W1 - W0`` s):

    - ``target_rate_rps``: the offered rate, requests/s over all workers (from the steps).
    - ``achieved_rate_rps``: requests *sent* (``t_start_s``) in the window / W, requests/s,
      whatever their outcome; NaN when ``W = 0``.
    - ``planned_sends``, ``unsent``: module docstring (whole step, not the window).
    - ``send_lag_p50_ms``, ``send_lag_p99_ms``: percentiles (linear interpolation) of
      ``t_start_s - scheduled_s`` over the requests sent in the window, ms.
    - ``interarrival_cv``: standard deviation / mean of the gaps between consecutive sends in
      the window (all workers merged, sorted by ``t_start_s``): 0 for evenly spaced sends, 1 for
      Poisson; NaN with fewer than 3 sends.
    - ``ttft_from_schedule_p50_ms``, ``ttft_from_schedule_p95_ms``, ``e2e_from_schedule_p50_ms``:
      percentiles over the successful requests completed in the window (the population of
      ``ttft_p50_ms``), counted from the scheduled send (:func:`llm_locust.analysis.perrequest.metrics.from_schedule`).

    Parameters
    ----------
    requests : pandas.DataFrame
        :func:`llm_locust.analysis.perrequest.metrics.with_request_metrics` output (``ok``, ``t_end_s``,
        ``send_lag_ms``, ``ttft_from_schedule_ms``, ``e2e_from_schedule_ms``); ``scheduled_s``
        optional.
    windows : pandas.DataFrame
        :func:`llm_locust.analysis.perstep.table.step_windows` output; ``target_rate_rps`` and ``step_start_s``
        when the run is a rate run (else every column is NaN).

    Returns
    -------
    pandas.DataFrame
        One row per window (same order), columns :data:`RATE_COLUMNS`, float64.
    """
    if "target_rate_rps" not in windows.columns:
        return pd.DataFrame(np.nan, index=range(len(windows)), columns=list(RATE_COLUMNS), dtype="float64")
    sent_s = requests["t_start_s"].to_numpy(float)
    if "scheduled_s" in requests.columns:
        scheduled_s = requests["scheduled_s"].to_numpy(float)
    else:
        scheduled_s = np.full(len(requests), np.nan)
    rows = []
    for window in windows.itertuples(index=False):
        start_s, end_s = float(window.window_start_s), float(window.window_end_s)
        length_s = max(0.0, end_s - start_s)
        rate = float(window.target_rate_rps)
        step_s = max(0.0, end_s - float(window.step_start_s))
        planned = float(round(rate * step_s)) if np.isfinite(rate) and np.isfinite(step_s) else np.nan
        recorded = int(((scheduled_s >= window.step_start_s) & (scheduled_s < end_s)).sum())
        in_window = (sent_s >= start_s) & (sent_s < end_s)
        sent = requests[in_window]
        done = requests[requests["ok"] & (requests["t_end_s"] >= start_s) & (requests["t_end_s"] < end_s)]
        rows.append(
            {
                "target_rate_rps": rate,
                "achieved_rate_rps": len(sent) / length_s if length_s > 0 else np.nan,
                "planned_sends": planned,
                "unsent": planned - recorded,
                "send_lag_p50_ms": _quantile(sent["send_lag_ms"], 0.50),
                "send_lag_p99_ms": _quantile(sent["send_lag_ms"], 0.99),
                "interarrival_cv": interarrival_cv(sent["t_start_s"]),
                "ttft_from_schedule_p50_ms": _quantile(done["ttft_from_schedule_ms"], 0.50),
                "ttft_from_schedule_p95_ms": _quantile(done["ttft_from_schedule_ms"], 0.95),
                "e2e_from_schedule_p50_ms": _quantile(done["e2e_from_schedule_ms"], 0.50),
            }
        )
    return pd.DataFrame(rows, columns=list(RATE_COLUMNS), dtype="float64")


def interarrival_cv(send_s: pd.Series) -> float:
    """Coefficient of variation (population standard deviation / mean) of the gaps between
    consecutive send times; NaN with fewer than 3 sends or a zero mean gap.

    >>> interarrival_cv(pd.Series([0.0, 1.0, 2.0, 3.0]))
    0.0
    """
    times = np.sort(send_s.dropna().to_numpy(float))
    if len(times) < 3:
        return float("nan")
    gaps = np.diff(times)
    mean = gaps.mean()
    return float(gaps.std() / mean) if mean > 0 else float("nan")
