"""The ladder so far: finished steps' table and the critical concurrency, with the analysis' rule.

A step is *finished* for the live view when the shape has moved past it (``end_s`` set) and every
request completed before its end has reached the master (``end_s <= horizon_s``). The finished
steps go through the same pure functions as the post-run report —
:func:`analysis.steps.step_windows`, :func:`analysis.steps.step_table` and
:func:`analysis.knee.find_critical_concurrency` — so the live verdict is the report's verdict on
the steps run so far.
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.knee import CriticalConcurrency, find_critical_concurrency, fmt_users
from analysis.steps import step_table, step_windows

STEP_COLUMNS: tuple[str, ...] = (
    "step", "target_users", "client_inflight", "server_running", "server_waiting", "kv_usage_ratio",
    "output_tps", "request_rps", "ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms", "e2e_p50_ms", "completed",
    "errors", "error_kinds",
)
"""Columns of the finished-steps table sent to the browser (a subset of
:data:`analysis.steps.STEP_TABLE_COLUMNS`)."""


def finished_steps(steps: list[dict], *, horizon_s: float) -> pd.DataFrame:
    """Steps of ``shape.describe()["steps"]`` that ended at or before ``horizon_s``.

    Returns
    -------
    pandas.DataFrame
        Columns ``step``, ``target_users``, ``start_s``, ``end_s`` (as :attr:`analysis.rundir.Run.steps`).
    """
    rows = [(int(s["index"]), float(s["users"]), float(s["start_s"]), float(s["end_s"]))
            for s in steps if s.get("end_s") is not None and float(s["end_s"]) <= horizon_s]
    return pd.DataFrame(rows, columns=["step", "target_users", "start_s", "end_s"]).astype(
        {"step": "int64", "target_users": "float64", "start_s": "float64", "end_s": "float64"})


def current_step(description: dict | None, *, now_s: float) -> dict | None:
    """The step running now: ``{"index", "users", "start_s", "elapsed_s", "of"}``, None if none."""
    steps = (description or {}).get("steps") or []
    if not steps or steps[-1].get("end_s") is not None:
        return None
    step = steps[-1]
    planned = (description or {}).get("ladder")
    return {"index": int(step["index"]), "users": step["users"], "start_s": float(step["start_s"]),
            "elapsed_s": max(0.0, now_s - float(step["start_s"])),
            "of": len(planned) if planned else None}


def analyze_finished(requests: pd.DataFrame, server: pd.DataFrame, steps: pd.DataFrame,
                     warmup_s: float) -> tuple[pd.DataFrame, CriticalConcurrency]:
    """Per-step table and critical concurrency of the finished steps.

    Parameters
    ----------
    requests : pandas.DataFrame
        Request records with ``t_start_s``, ``ttft_ms``, ``e2e_ms``, ``output_tokens``, ``error_kind``.
    server : pandas.DataFrame
        Normalised server samples (:data:`analysis.server.SERIES_COLUMNS`), may be empty.
    steps : pandas.DataFrame
        Output of :func:`finished_steps`.
    warmup_s : float
        Seconds left out at the start of each step.
    """
    table = step_table(requests, step_windows(steps, warmup_s), server if not server.empty else None)
    return table, find_critical_concurrency(table)


def critical_json(critical: CriticalConcurrency | None, *, finished: int) -> dict:
    """The verdict so far, for the browser."""
    if critical is None:
        return {"finished_steps": finished, "users": None, "saturated_users": None,
                "text": "needs two finished steps", "evidence": []}
    text = critical.text
    if critical.users is None and critical.highest_tested_users is not None:
        text = f"not reached yet (highest finished step: {fmt_users(critical.highest_tested_users)} users)"
    return {"finished_steps": finished, "users": critical.users, "saturated_users": critical.saturated_users,
            "text": text, "evidence": list(critical.evidence)}


def table_json(table: pd.DataFrame) -> list[dict]:
    """The finished-steps table as JSON rows (NaN -> None)."""
    rows = []
    for record in table[list(STEP_COLUMNS)].to_dict("records"):
        rows.append({k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()})
    return rows
