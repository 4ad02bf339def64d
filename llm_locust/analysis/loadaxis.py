"""The step key of a ladder: target concurrency (users) or offered request rate (requests/s).

A concurrency ladder's steps are keyed by ``target_users``; a request-rate ladder's
(``--shape rate``) by ``target_rate_rps`` (its ``target_users`` is the constant pool of users
that sent the schedule, no load level). The per-step table, the critical-load rule
(:mod:`llm_locust.analysis.verdict.knee`), the verdict's rules and the report read the key through the
:class:`LoadAxis` of the table (:func:`load_axis`), so one rule judges both ladders: throughput
per doubling of the load, the server's queue, TTFT growth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd


def fmt_number(value: float | None) -> str:
    """A load level as text: ``4`` rather than ``4.0``, ``2.5`` as is; ``-`` for None/NaN.

    >>> fmt_number(4.0), fmt_number(2.5), fmt_number(None)
    ('4', '2.5', '-')
    """
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:g}"


@dataclass(frozen=True)
class LoadAxis:
    """What a ladder's steps are keyed by.

    Attributes
    ----------
    column : str
        Step-table column of the load level.
    unit : str
        Unit as printed after a value (``users``, ``req/s``).
    symbol : str
        Short name in evidence lines (``c``, ``rate``).
    quantity : str
        The critical value's name (``concurrency``, ``rate``).
    value_key : str
        Key of the load level in an evidence's ``values`` (``users``, ``rate_rps``).
    value_unit : str
        Its unit in the evidence's ``units`` (``users``, ``requests/s``).
    """

    column: str
    unit: str
    symbol: str
    quantity: str
    value_key: str
    value_unit: str

    def fmt(self, value: float | None) -> str:
        """``"16 users"``, ``"2.5 req/s"``; ``"-"`` for None/NaN."""
        text = fmt_number(value)
        return text if text == "-" else f"{text} {self.unit}"


USERS = LoadAxis("target_users", "users", "c", "concurrency", "users", "users")
"""A concurrency ladder's steps."""
RATE = LoadAxis("target_rate_rps", "req/s", "rate", "rate", "rate_rps", "requests/s")
"""A request-rate ladder's steps."""


def load_axis(table: pd.DataFrame) -> LoadAxis:
    """:data:`RATE` when ``table`` has a ``target_rate_rps`` column with a value, else :data:`USERS`.

    >>> load_axis(pd.DataFrame({"target_users": [1.0]})).unit
    'users'
    >>> load_axis(pd.DataFrame({"target_users": [8.0], "target_rate_rps": [2.0]})).unit
    'req/s'
    """
    if RATE.column in table.columns and table[RATE.column].notna().any():
        return RATE
    return USERS


def planned_levels(shape: dict) -> tuple[float, ...]:
    """The ladder a run planned, from run.json's ``shape``: ``ladder`` (users) or ``rates``
    (requests/s); ``()`` for any other shape or an unreadable list.

    >>> planned_levels({"kind": "ladder", "ladder": [1, 2, 4]})
    (1.0, 2.0, 4.0)
    >>> planned_levels({"kind": "rate", "rates": [0.5, 1]}), planned_levels({"kind": "baseline"})
    ((0.5, 1.0), ())
    """
    key = {"ladder": "ladder", "rate": "rates"}.get(str(shape.get("kind")))
    levels = shape.get(key) if key else None
    try:
        return tuple(float(u) for u in levels) if isinstance(levels, list) else ()
    except (TypeError, ValueError):
        return ()
