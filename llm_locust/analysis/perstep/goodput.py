"""Goodput: how much of each step's output met every service-level objective (``--slo``).

``--slo "ttft_ms<=500,tpot_ms<=50"`` (on ``llm-locust run``, recorded in ``run.json`` ``slo``, and
on ``llm-locust analyze``) names per-request limits; :data:`SLO_METRICS` are the metrics it may
use, each with the direction that is good (``<=`` for times, ``>=`` for the decode rate).

Definitions, per step over its steady window ``W`` s (a request belongs to the window its
completion ``t_end_s`` falls in, as in :func:`llm_locust.analysis.perstep.table.step_table`):

- a request *meets the SLOs* when it succeeded and every named metric satisfies its limit; a
  metric the request does not have (NaN: a non-streamed answer has no TTFT, a one-token answer
  no TPOT) does not satisfy it: not measured is not met.
- ``slo_met_share`` = requests meeting the SLOs / requests completed in the window (failures
  included); NaN when none completed.
- ``goodput_tps`` = output tokens of the requests meeting the SLOs / W (tokens/s, larger is
  better); ``goodput_rps`` = those requests / W. NaN when none completed.
- the *knee by goodput* (:func:`goodput_knee`) is the load level (target users, or offered
  requests/s in a rate ladder) of the step with the highest ``goodput_tps`` (the lowest such
  level on a tie): beyond it more load may add throughput, but fewer requests meet the SLOs.

Why own code: the SLO grammar is one comparison per metric, and the per-step sums follow the
step table's own window rule.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from llm_locust.analysis.perrequest.metrics import with_request_metrics

SLO_METRICS: dict[str, str] = {
    "ttft_ms": "<=",
    "first_answer_ms": "<=",
    "tpot_ms": "<=",
    "e2e_ms": "<=",
    "decode_tps": ">=",
}
"""Metric -> the comparison an SLO on it must use (per-request columns of
:func:`llm_locust.analysis.perrequest.metrics.with_request_metrics`)."""

GOODPUT_COLUMNS: tuple[str, ...] = ("slo_met_share", "goodput_tps", "goodput_rps")
"""Step-table columns :func:`goodput_table` adds."""

_PART = re.compile(r"^\s*([a-z_][a-z0-9_]*)\s*(<=|>=)\s*([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?)\s*$")


@dataclass(frozen=True)
class Slo:
    """One objective: ``metric op limit`` (``op`` is ``<=`` or ``>=``)."""

    metric: str
    op: str
    limit: float

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.limit:g}"


def parse_slo(text: str) -> tuple[Slo, ...]:
    """Parse ``"ttft_ms<=500,tpot_ms<=50"``.

    Raises
    ------
    ValueError
        An empty text, a part that is not ``metric<=number`` / ``metric>=number``, an unknown
        metric, the wrong direction for a metric, or a metric named twice; the message quotes
        the part.

    >>> [str(s) for s in parse_slo("ttft_ms<=500, tpot_ms<=50")]
    ['ttft_ms<=500', 'tpot_ms<=50']
    """
    parts = [part for part in text.split(",") if part.strip()]
    if not parts:
        raise ValueError(f'--slo: no objective in {text!r} (e.g. "ttft_ms<=500,tpot_ms<=50")')
    slos: list[Slo] = []
    for part in parts:
        match = _PART.match(part)
        if not match:
            raise ValueError(f"--slo: {part.strip()!r} is not METRIC<=NUMBER or METRIC>=NUMBER")
        metric, op, limit = match.group(1), match.group(2), float(match.group(3))
        if metric not in SLO_METRICS:
            raise ValueError(f"--slo: unknown metric {metric!r}; known: {', '.join(SLO_METRICS)}")
        if op != SLO_METRICS[metric]:
            raise ValueError(f"--slo: {metric} takes {SLO_METRICS[metric]} (a limit on the good side), got {op}")
        if any(s.metric == metric for s in slos):
            raise ValueError(f"--slo: {metric} named twice")
        slos.append(Slo(metric, op, limit))
    return tuple(slos)


def meets_slos(requests: pd.DataFrame, slos: tuple[Slo, ...]) -> pd.Series:
    """Whether each request succeeded and met every objective (NaN metric: not met).

    Parameters
    ----------
    requests : pandas.DataFrame
        Output of :func:`llm_locust.analysis.perrequest.metrics.with_request_metrics` (``ok`` and the metric columns).

    Returns
    -------
    pandas.Series of bool, same index.
    """
    met = requests["ok"].astype(bool).copy()
    for slo in slos:
        values = requests[slo.metric].astype("float64")
        met &= (values <= slo.limit) if slo.op == "<=" else (values >= slo.limit)  # NaN compares False
    return met


def goodput_table(requests: pd.DataFrame, windows: pd.DataFrame, slos: tuple[Slo, ...]) -> pd.DataFrame:
    """Per step: :data:`GOODPUT_COLUMNS` (module docstring), indexed like ``windows``.

    Parameters
    ----------
    requests : pandas.DataFrame
        ``requests.csv`` rows (:attr:`llm_locust.analysis.rundir.reader.Run.requests`).
    windows : pandas.DataFrame
        :func:`llm_locust.analysis.perstep.table.step_windows` output (``window_start_s``, ``window_end_s``).
    slos : tuple of Slo

    Returns
    -------
    pandas.DataFrame
        float64 columns ``slo_met_share`` (0-1), ``goodput_tps`` (tokens/s), ``goodput_rps``
        (requests/s).
    """
    reqs = with_request_metrics(requests)
    reqs["met"] = meets_slos(reqs, slos)
    rows = []
    for window in windows.itertuples(index=False):
        start_s, end_s = float(window.window_start_s), float(window.window_end_s)
        length_s = end_s - start_s
        done = reqs[(reqs["t_end_s"] >= start_s) & (reqs["t_end_s"] < end_s)]
        met = done[done["met"]]
        if len(done) == 0 or length_s <= 0:
            rows.append((np.nan, np.nan, np.nan))
            continue
        rows.append((len(met) / len(done), float(met["output_tokens"].sum()) / length_s, len(met) / length_s))
    return pd.DataFrame(rows, columns=list(GOODPUT_COLUMNS), index=windows.index, dtype="float64")


def goodput_knee(table: pd.DataFrame, column: str = "target_users") -> float | None:
    """The load level (``column``: ``target_users``, or ``target_rate_rps`` in a rate ladder) of
    the step with the highest ``goodput_tps`` (lowest on a tie); None when no step has a goodput
    above 0.

    >>> goodput_knee(pd.DataFrame({"target_users": [1, 2, 4, 8], "goodput_tps": [10, 19, 19, 5]}))
    2.0
    """
    goodput = table["goodput_tps"].astype("float64")
    if goodput.isna().all() or not goodput.max() > 0:
        return None
    best = goodput.max()
    users = table.loc[goodput == best, column].astype("float64")
    value = float(users.min())
    return None if math.isnan(value) else value
