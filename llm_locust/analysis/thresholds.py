"""Pass/fail thresholds on a run's own numbers: ``--fail-on EXPR`` (repeatable).

Each expression states a **failing** condition; the run fails its thresholds when any holds.
The grammar (whitespace allowed between the parts)::

    expression := metric [ "@" where ] operator value
    where      := USERS          a ladder step, by its target users (e.g. 8)
                | "knee"         the critical concurrency's step (default for step metrics)
    operator   := ">" | ">=" | "<" | "<=" | "==" | "!="
    value      := a number in the metric's unit | a bottleneck kind (``bottleneck`` only)

Metrics (:data:`METRICS`):

- step metrics, read from the step table (``report/steps.csv``, steady windows):
  ``ttft_p50_ms``, ``ttft_p95_ms``, ``tpot_p50_ms``, ``e2e_p50_ms``, ``output_tps``,
  ``output_tps_prorated``, ``request_rps``, ``decode_tps_p50``; at ``@USERS`` or, by default,
  at the **knee**: the step of the critical concurrency, else (not reached, or the client was the
  limit) the highest usable step (valid, not dominated by failures) - the most load the server
  took in its stride;
- ``error_rate``: failed / finished requests of the whole run (``requests.csv``; ``interrupted``
  requests, stopped by the test itself, are in neither), or of one step's window with ``@``;
- ``critical_concurrency`` (users; no ``@``): not reached within a ladder topping at T users means
  it is at least T, so ``critical_concurrency<8`` holds only when T < 8 and cannot be told then;
- ``bottleneck`` (no ``@``; ``==`` or ``!=`` a kind of :class:`llm_locust.analysis.verdict.BottleneckKind`).

A threshold whose number was not measured (no verdict, no knee, no successful request at the
step, the critical concurrency unknown) **fails**: the run cannot show it passes, and the text
says why. Malformed expressions (unknown metric, operator or kind, no number, ``@`` where none
is allowed) raise :class:`ThresholdError` when parsed, and an ``@USERS`` the ladder does not have
when checked against it (:func:`check_steps`): both before any load is sent.

Why own code: it is the field's vocabulary (the step table's columns), a few lines of parsing.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd

from llm_locust.analysis.loadaxis import RATE, load_axis
from llm_locust.analysis.verdict.types import BottleneckKind

EXIT_THRESHOLD_FAILED = 3
"""Exit code of a run that was measured and analysed, but failed a ``--fail-on`` threshold."""

KIND_NAMES: tuple[str, ...] = tuple(kind.value for kind in BottleneckKind)
"""Values ``bottleneck`` may be compared with."""

STEP_METRICS: dict[str, str] = {
    "ttft_p50_ms": "ms",
    "ttft_p95_ms": "ms",
    "tpot_p50_ms": "ms",
    "e2e_p50_ms": "ms",
    "output_tps": "tokens/s",
    "output_tps_prorated": "tokens/s",
    "request_rps": "requests/s",
    "decode_tps_p50": "tokens/s",
    "error_rate": "ratio",
}
"""Metrics that take ``@USERS`` / ``@knee`` (step-table columns; ``error_rate`` is
``failed_share`` there), with their units."""

RUN_METRICS: dict[str, str] = {"critical_concurrency": "users", "bottleneck": "kind"}
"""Metrics of the whole run (no ``@``), with their units."""

METRICS: tuple[str, ...] = (*STEP_METRICS, *RUN_METRICS)
"""Every metric name an expression may use."""

OPERATORS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq,
             "!=": operator.ne}  # fmt: skip
"""Comparison operators, by their spelling."""

_EXPRESSION = re.compile(
    r"^\s*(?P<metric>[A-Za-z_][A-Za-z0-9_]*)\s*(?:@\s*(?P<where>[^\s<>=!]+)\s*)?"
    r"(?P<op>>=|<=|==|!=|>|<|=)?\s*(?P<value>.*?)\s*$"
)


THRESHOLD_HELP = (
    "Fail the run (exit 3) when this condition holds, checked on its own numbers after the analysis; "
    "repeatable. METRIC[@USERS|@knee] OP VALUE, OP one of > >= < <= == !=, e.g. error_rate>0.01, "
    "ttft_p95_ms>2000 (at the knee), output_tps@8<500, critical_concurrency<8, bottleneck!=none. Metrics: "
    + ", ".join(METRICS)
)
"""``--help`` text of ``--fail-on``."""


class ThresholdError(ValueError):
    """A ``--fail-on`` expression that cannot be checked: malformed, or naming a missing step."""


@dataclass(frozen=True, kw_only=True)
class Threshold:
    """One parsed expression (:func:`parse_threshold`).

    Attributes
    ----------
    expression : str
        As given.
    metric : str
    where : int or str or None
        Target users of a step, ``"knee"``, or None (a run metric; a step metric then means the knee).
    op : str
        One of :data:`OPERATORS`.
    limit : float or str
        The number (the metric's unit), or a kind name for ``bottleneck``.
    """

    expression: str
    metric: str
    where: int | str | None
    op: str
    limit: float | str

    @property
    def at(self) -> str:
        """Where it is read, in words: ``"at 8 users"``, ``"at the knee"``, ``"over the run"``."""
        if self.metric in RUN_METRICS or (self.metric == "error_rate" and self.where is None):
            return "over the run"
        return "at the knee" if self.where in (None, "knee") else f"at {self.where} users"


def parse_threshold(text: str) -> Threshold:
    """Parse one expression (module docstring).

    Raises
    ------
    ThresholdError
        Unknown metric (the known ones are listed), missing or unknown operator, a value that is
        not a number (not a kind, for ``bottleneck``), ``@`` on a run metric or with something
        other than whole users or ``knee``.

    >>> parse_threshold("output_tps@8<500")
    Threshold(expression='output_tps@8<500', metric='output_tps', where=8, op='<', limit=500.0)
    >>> parse_threshold("bottleneck != none").limit
    'none'
    """
    match = _EXPRESSION.match(text or "")
    if not match:
        raise ThresholdError(f"--fail-on {text!r}: expected METRIC[@USERS|@knee] OPERATOR VALUE, e.g. ttft_p95_ms>2000")
    metric, where_text, op, value = match["metric"], match["where"], match["op"], match["value"]
    if metric not in METRICS:
        raise ThresholdError(f"--fail-on {text!r}: unknown metric {metric!r}; known: {', '.join(METRICS)}")
    if op is None or op == "=" or op not in OPERATORS or not value or value[0] in "<>=!":
        raise ThresholdError(
            f"--fail-on {text!r}: expected one operator of {' '.join(OPERATORS)} between {metric} and a value"
        )
    where: int | str | None = None
    if where_text is not None:
        if metric in RUN_METRICS:
            raise ThresholdError(f"--fail-on {text!r}: {metric} is a figure of the whole run, it takes no @")
        if where_text == "knee":
            where = "knee"
        elif where_text.isdigit() and int(where_text) >= 1:
            where = int(where_text)
        else:
            raise ThresholdError(f"--fail-on {text!r}: @ takes a ladder step's users (e.g. @8) or @knee")
    if metric == "bottleneck":
        if op not in ("==", "!="):
            raise ThresholdError(f"--fail-on {text!r}: bottleneck is compared with == or != only")
        if value not in KIND_NAMES:
            raise ThresholdError(
                f"--fail-on {text!r}: unknown bottleneck kind {value!r}; known: {', '.join(KIND_NAMES)}"
            )
        return Threshold(expression=text, metric=metric, where=None, op=op, limit=value)
    try:
        limit = float(value)
    except ValueError:
        raise ThresholdError(
            f"--fail-on {text!r}: {value!r} is not a number ({metric} is in {_unit(metric)})"
        ) from None
    if not math.isfinite(limit):
        raise ThresholdError(f"--fail-on {text!r}: the value must be a finite number")
    return Threshold(expression=text, metric=metric, where=where, op=op, limit=limit)


def parse_thresholds(texts: Iterable[str] | None) -> tuple[Threshold, ...]:
    """:func:`parse_threshold` of each (none for None)."""
    return tuple(parse_threshold(text) for text in texts or ())


def check_steps(thresholds: Sequence[Threshold], ladder: Sequence[float] | None) -> None:
    """Refuse an ``@USERS`` that is no step of ``ladder`` (target users; None: the run has no ladder).

    Raises
    ------
    ThresholdError
    """
    steps = {float(u) for u in ladder or ()}
    for t in thresholds:
        if isinstance(t.where, int) and float(t.where) not in steps:
            have = ", ".join(f"{u:g}" for u in sorted(steps)) if steps else "none (no ladder)"
            raise ThresholdError(f"--fail-on {t.expression!r}: no ladder step has {t.where} users; the steps: {have}")


@dataclass(frozen=True, kw_only=True)
class ThresholdCheck:
    """One threshold checked on a run.

    Attributes
    ----------
    threshold : Threshold
    value : float or str or None
        The run's number (a kind name for ``bottleneck``); None when not measured.
    failed : bool
        The failing condition holds, or the value was not measured.
    text : str
        ``FAILED ttft_p95_ms>2000: ttft_p95_ms at the knee (8 users) is 2450 ms`` or ``passed ...``.
    """

    threshold: Threshold
    value: float | str | None
    failed: bool
    text: str

    def to_json(self) -> dict:
        """``{expression, metric, where, operator, limit, value, unit, failed, text}`` (NaN -> null)."""
        t = self.threshold
        return {
            "expression": t.expression,
            "metric": t.metric,
            "where": t.where if t.where is not None else ("run" if t.at == "over the run" else "knee"),
            "operator": t.op,
            "limit": t.limit,
            "value": self.value,
            "unit": _unit(t.metric),
            "failed": self.failed,
            "text": self.text,
        }


def check_table_steps(thresholds: Sequence[Threshold], steps: pd.DataFrame) -> None:
    """:func:`check_steps` against a run's steps (``target_users``; empty: no ladder); in a
    request-rate ladder (:func:`llm_locust.analysis.loadaxis.load_axis` is ``RATE``: steps in requests/s,
    ``target_users`` only the pool of users) every ``@USERS`` is refused.

    Raises
    ------
    ThresholdError
        As :func:`check_steps`, or an ``@USERS`` in a request-rate ladder.
    """
    if len(steps) and load_axis(steps) is RATE:
        for t in thresholds:
            if isinstance(t.where, int):
                raise ThresholdError(
                    f"--fail-on {t.expression!r}: @{t.where} names a step's users, and this request-rate "
                    "ladder's steps are requests/s: use @knee, or no @ for the run"
                )
        return
    check_steps(thresholds, steps["target_users"].dropna().tolist() if len(steps) else None)


def evaluate(
    thresholds: Sequence[Threshold],
    *,
    table: pd.DataFrame,
    requests: pd.DataFrame,
    critical_users: float | None,
    bottleneck: str | None,
) -> tuple[ThresholdCheck, ...]:
    """Check each threshold on a run's numbers.

    Parameters
    ----------
    table : pandas.DataFrame
        Step table (the verdict's when there is one: ``target_users``, the columns of
        :data:`STEP_METRICS`, ``failed_share``, ``valid``, ``failures_dominate``).
    requests : pandas.DataFrame
        ``requests.csv`` rows (``error_kind``), for the run's ``error_rate``.
    critical_users : float or None
        The verdict's critical load on the table's axis (:func:`llm_locust.analysis.loadaxis.load_axis`):
        its critical concurrency, or in a request-rate ladder its critical rate (requests/s),
        where ``@knee`` is read. A rate ladder's steps are no users: an ``@USERS`` threshold is
        refused there and ``critical_concurrency`` cannot be checked.
    bottleneck : str or None
        The verdict's primary kind; None without a verdict.

    Raises
    ------
    ThresholdError
        An ``@USERS`` that is no step of the table (:func:`check_steps`), or any ``@USERS`` in a
        request-rate ladder.
    """
    check_table_steps(thresholds, table)
    return tuple(_check(t, table, requests, critical_users, bottleneck) for t in thresholds)


def _check(t: Threshold, table, requests, critical_users, bottleneck) -> ThresholdCheck:
    value: float | str | None
    where, why = "", ""
    if t.metric == "bottleneck":
        value, why = bottleneck, "" if bottleneck is not None else "there is no verdict"
    elif t.metric == "critical_concurrency" and len(table) and load_axis(table) is RATE:
        value, why = None, "a request-rate ladder has a critical rate (critical_rate_rps), no critical concurrency"
    elif t.metric == "critical_concurrency" and critical_users is None:
        return _critical_not_reached(t, table, bottleneck)
    elif t.metric == "critical_concurrency":
        value = float(critical_users)
    elif t.metric == "error_rate" and t.where is None:
        kinds = requests["error_kind"].astype(str)
        kinds = kinds[kinds != "interrupted"]
        value = float((kinds != "").mean()) if len(kinds) else None
        why = "" if value is not None else "no request finished"
    else:
        row, where, why = _step(t, table, critical_users)
        column = "failed_share" if t.metric == "error_rate" else t.metric
        value = None
        if row is not None:
            number = float(row[column]) if column in row.index else math.nan
            value = number if math.isfinite(number) else None
            why = "" if value is not None else f"{t.metric} was not measured there (no successful request)"
    if value is None:
        failed, said = True, f"cannot be checked: {why}"
    elif isinstance(value, str) or isinstance(t.limit, str):
        failed, said = bool(OPERATORS[t.op](value, t.limit)), f"is {value}"
    else:
        failed, said = bool(OPERATORS[t.op](value, t.limit)), f"is {_fmt(value)} {_unit(t.metric)}"
    text = f"{'FAILED' if failed else 'passed'} {t.expression}: {t.metric} {t.at}{where} {said}"
    return ThresholdCheck(threshold=t, value=value, failed=failed, text=text)


def _step(t: Threshold, table: pd.DataFrame, critical_users: float | None) -> tuple[pd.Series | None, str, str]:
    """The step row a step metric is read at, `` (N users)`` (`` (R req/s)`` in a request-rate
    ladder) for the knee, and why there is none."""
    axis = load_axis(table)
    users = table[axis.column].astype(float)
    if isinstance(t.where, int):
        row = table[users == float(t.where)].iloc[0]
        note = "" if bool(row.get("valid", True)) else f" (an invalid step: {row.get('invalid_reason', '')})"
        return row, note, ""
    if critical_users is not None and (users == float(critical_users)).any():
        row = table[users == float(critical_users)].iloc[0]
        return row, f" ({axis.fmt(critical_users)})", ""
    usable = table
    if "valid" in table.columns:
        usable = table[table["valid"].astype(bool) & ~table.get("failures_dominate", False)]
    if usable.empty or not usable[axis.column].notna().any():
        return None, "", f"no knee: no critical {axis.quantity} and no usable ladder step"
    row = usable.loc[usable[axis.column].astype(float).idxmax()]
    return row, f" (no critical {axis.quantity}: the highest usable step, {axis.fmt(row[axis.column])})", ""


def _critical_not_reached(t: Threshold, table: pd.DataFrame, bottleneck: str | None) -> ThresholdCheck:
    """``critical_concurrency`` without a value: unknown (no verdict, the client was the limit),
    or not reached within a ladder topping at T users, so some x >= T (module docstring): the
    condition is decided when it holds for every such x or for none."""
    top = float(table["target_users"].max()) if len(table) else math.nan
    why = ""
    if bottleneck is None:
        why = "there is no verdict"
    elif bottleneck == "client":
        why = "the load client was the limit, so the server's critical concurrency is unknown"
    elif not math.isfinite(top):
        why = "no ladder"
    if why:
        return ThresholdCheck(threshold=t, value=None, failed=True, text=f"FAILED {t.expression}: {t.metric} "
                              f"{t.at} cannot be checked: {why}")  # fmt: skip
    limit = float(t.limit)
    points = [x for x in (top, limit - 0.5, limit, limit + 0.5, max(top, limit) + 1e6) if x >= top]
    holds = [bool(OPERATORS[t.op](x, limit)) for x in points]
    said = f"is at least {top:g} users (not reached within the ladder)"
    if all(holds) or not any(holds):
        failed = all(holds)
        return ThresholdCheck(threshold=t, value=top, failed=failed,
                              text=f"{'FAILED' if failed else 'passed'} {t.expression}: {t.metric} {t.at} {said}")  # fmt: skip
    return ThresholdCheck(threshold=t, value=None, failed=True, text=f"FAILED {t.expression}: {t.metric} {t.at} "
                          f"cannot be checked: it {said}; a longer ladder would tell")  # fmt: skip


def _unit(metric: str) -> str:
    return STEP_METRICS.get(metric) or RUN_METRICS.get(metric, "")


def _fmt(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 100 else f"{value:.0f}"


def summary_lines(checks: Sequence[ThresholdCheck]) -> list[str]:
    """Console lines: ``Thresholds: N of M failed (exit 3)`` then one line per check, failed first."""
    if not checks:
        return []
    failed = [c for c in checks if c.failed]
    head = (
        f"Thresholds: {len(failed)} of {len(checks)} failed (exit {EXIT_THRESHOLD_FAILED})"
        if failed
        else f"Thresholds: all {len(checks)} passed"
    )
    return [head, *[f"  {c.text}" for c in (*failed, *[c for c in checks if not c.failed])]]
