"""The ladder so far: finished steps' table, the critical concurrency and the bottleneck, with the
analysis' rules.

A step is *finished* for the live view when the shape has moved past it (``end_s`` set) and every
request completed before its end has reached the master (``end_s <= horizon_s``). The finished
steps go through the same pure functions as the post-run report —
:func:`llm_locust.analysis.perstep.table.step_windows`, :func:`llm_locust.analysis.perstep.table.step_table` and
:func:`llm_locust.analysis.verdict.rules` — so the live verdict is the report's verdict on
the steps run so far.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from llm_locust.analysis.loadaxis import RATE, LoadAxis, load_axis
from llm_locust.analysis.perstep.table import step_table, step_windows
from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.verdict import RULES, ClientSide, ServerSide, Verdict, diagnose
from llm_locust.analysis.verdict.knee import CriticalConcurrency
from llm_locust.jsonsafe import json_safe

STEP_COLUMNS: tuple[str, ...] = (
    "step",
    "target_users",
    "client_inflight",
    "server_running",
    "server_waiting",
    "kv_usage_ratio",
    "output_tps",
    "request_rps",
    "ttft_p50_ms",
    "ttft_p95_ms",
    "tpot_p50_ms",
    "e2e_p50_ms",
    "completed",
    "errors",
    "error_kinds",
)
"""Columns of the finished-steps table sent to the browser (a subset of
:data:`llm_locust.analysis.perstep.table.STEP_TABLE_COLUMNS`)."""

RATE_STEP_COLUMNS: tuple[str, ...] = (
    "target_rate_rps",
    "achieved_rate_rps",
    "send_lag_p50_ms",
    "send_lag_p99_ms",
    "unsent",
    "ttft_from_schedule_p50_ms",
)
"""Columns a request-rate run's finished steps add (:data:`llm_locust.analysis.perstep.rate.RATE_COLUMNS`): the
requested and the achieved rate, the send lag, the sends never made, TTFT from the schedule."""

LIVE_RULES = replace(RULES, min_window_e2e=0.0, min_completions=0)
"""The verdict's rules in the live tab: every rule but the steps-too-short judgement."""


def step_columns(rows: list[dict]) -> list[str]:
    """:data:`STEP_COLUMNS`, plus :data:`RATE_STEP_COLUMNS` when a row has an offered rate."""
    rate = any(row.get("target_rate_rps") is not None for row in rows)
    return list(STEP_COLUMNS) + (list(RATE_STEP_COLUMNS) if rate else [])


def axis_json(axis: LoadAxis) -> dict:
    """What the browser keys the steps by: ``{"column", "unit", "quantity"}`` (``target_users``,
    ``users``, ``concurrency``; or ``target_rate_rps``, ``req/s``, ``rate``)."""
    return {"column": axis.column, "unit": axis.unit, "quantity": axis.quantity}


def finished_steps(steps: list[dict], *, horizon_s: float) -> pd.DataFrame:
    """Steps of ``shape.describe()["steps"]`` that ended at or before ``horizon_s``.

    Returns
    -------
    pandas.DataFrame
        Columns ``step``, ``target_users``, ``start_s``, ``end_s`` (as :attr:`llm_locust.analysis.rundir.reader.Run.steps`),
        and ``target_rate_rps`` for a request-rate run's steps.
    """
    rows = [
        (int(s["index"]), float(s["users"]), float(s["start_s"]), float(s["end_s"]))
        for s in steps
        if s.get("end_s") is not None and float(s["end_s"]) <= horizon_s
    ]
    frame = pd.DataFrame(rows, columns=["step", "target_users", "start_s", "end_s"]).astype(
        {"step": "int64", "target_users": "float64", "start_s": "float64", "end_s": "float64"}
    )
    rates = {int(s["index"]): s["rate_rps"] for s in steps if s.get("rate_rps") is not None}
    if rates:  # a request-rate run: its steps are keyed by the offered rate (llm_locust.analysis.loadaxis)
        frame["target_rate_rps"] = [float(rates.get(i, float("nan"))) for i in frame["step"]]
    return frame


def current_step(description: dict | None, *, now_s: float) -> dict | None:
    """The step running now: ``{"index", "users", "rate_rps", "start_s", "elapsed_s", "of"}``
    (``rate_rps`` None outside a request-rate run), None if none."""
    steps = (description or {}).get("steps") or []
    if not steps or steps[-1].get("end_s") is not None:
        return None
    step = steps[-1]
    planned = (description or {}).get("ladder") or (description or {}).get("rates")
    return {
        "index": int(step["index"]),
        "users": step["users"],
        "rate_rps": step.get("rate_rps"),
        "start_s": float(step["start_s"]),
        "elapsed_s": max(0.0, now_s - float(step["start_s"])),
        "of": len(planned) if planned else None,
    }


def analyze_finished(
    requests: pd.DataFrame, server: pd.DataFrame, steps: pd.DataFrame, warmup_s: float
) -> tuple[pd.DataFrame, CriticalConcurrency, Verdict]:
    """Per-step table, critical concurrency and bottleneck of the finished steps.

    The bottleneck is :func:`llm_locust.analysis.verdict.rules` on what the master has live: the
    requests and the scraped server series (no server log, configuration or ``client_load.csv``
    yet: those rules say "cannot tell" until the post-run analysis reads them).

    Parameters
    ----------
    requests : pandas.DataFrame
        Request records with ``t_start_s``, ``ttft_ms``, ``e2e_ms``, ``output_tokens``, ``error_kind``.
    server : pandas.DataFrame
        Normalised server samples (``t_s`` and :data:`llm_locust.analysis.server.series.VALUE_COLUMNS`), may be empty.
    steps : pandas.DataFrame
        Output of :func:`finished_steps`.
    warmup_s : float
        Seconds left out at the start of each step.
    """
    table = step_table(requests, step_windows(steps, warmup_s), server if not server.empty else None)
    # the tab shows the reading so far, step by step: whether the steps were long enough to
    # decide is the report's judgement (rule steps_too_short), made once the ladder is done
    verdict = diagnose(table, ServerSide(), ServerConfig(), ClientSide(), rules=LIVE_RULES)
    return verdict.table, verdict.critical, verdict


def bottleneck_json(verdict: Verdict | None) -> dict:
    """The bottleneck so far, for the browser: ``{"kind", "text", "secondary"}``."""
    if verdict is None:
        return {"kind": None, "text": "needs two finished steps", "secondary": []}
    return {
        "kind": verdict.bottleneck.value,
        "text": verdict.headline,
        "secondary": [k.value for k in verdict.secondary],
    }


def critical_json(critical: CriticalConcurrency | None, *, finished: int) -> dict:
    """The verdict so far, for the browser: ``users`` and ``saturated_users`` are load levels on
    the critical value's axis (target users, or requests/s in a request-rate run)."""
    if critical is None:
        return {
            "finished_steps": finished,
            "users": None,
            "saturated_users": None,
            "text": "needs two finished steps",
            "evidence": [],
        }
    text = critical.text
    if critical.users is None and critical.highest_tested_users is not None:
        text = f"not reached yet (highest finished step: {critical.axis.fmt(critical.highest_tested_users)})"
    return {
        "finished_steps": finished,
        "users": critical.users,
        "saturated_users": critical.saturated_users,
        "text": text,
        "evidence": list(critical.evidence),
    }


def table_json(table: pd.DataFrame) -> list[dict]:
    """The finished-steps table as JSON rows (NaN -> None): :data:`STEP_COLUMNS`, and
    :data:`RATE_STEP_COLUMNS` in a request-rate run (:func:`llm_locust.analysis.loadaxis.load_axis`)."""
    columns = list(STEP_COLUMNS) + (list(RATE_STEP_COLUMNS) if load_axis(table) is RATE else [])
    rows = []
    for record in table[columns].to_dict("records"):
        rows.append(json_safe(record))
    return rows
