"""Helpers for the server-log tests: logs from lines, stamps, window averages."""

from __future__ import annotations

import datetime as dt

import numpy as np

from llm_locust.analysis.server.series import time_average
from llm_locust.analysis.server.serverlog import LogClock, LogText, parse_server_log

UTC = dt.UTC


def unix(*args, tz=UTC) -> float:
    """Unix s of ``datetime(*args, tzinfo=tz)``."""
    return dt.datetime(*args, tzinfo=tz).timestamp()


def parse(lines: list[str], *, arrival_s=None, reference_s: float | None = None, tz: str = "UTC", **kwargs):
    """Parse ``lines`` (joined with newlines) as one log."""
    log = LogText.from_text(
        "\n".join(lines) + "\n", arrival_s=None if arrival_s is None else np.asarray(arrival_s, float)
    )
    return parse_server_log(log, clock=LogClock(reference_s=reference_s, tz=tz), **kwargs)


def mean(series, column: str, start_s: float, end_s: float) -> float:
    """Time average of one series column over ``[start_s, end_s)``."""
    return time_average(series["t_s"], series[column], start_s, end_s)


def value_at(series, column: str, t_s: float) -> float:
    """Value of the step function at ``t_s`` (NaN before the first row)."""
    index = np.searchsorted(series["t_s"].to_numpy(float), t_s, side="right") - 1
    return float("nan") if index < 0 else float(series[column].iloc[index])
