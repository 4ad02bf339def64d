"""Multi-turn sessions (``--session-turns``): turns per session per step, and TTFT by turn index.

Inputs: ``requests.csv``'s ``session_id`` and ``turn`` (1..K, 0 outside sessions; absent in older
run directories, loaded as ""/0), with ``ttft_ms``, ``prompt_tokens``, ``error_kind``.

- Per step (requests completed in the steady window, as :func:`llm_locust.analysis.perstep.table.step_table`):
  ``sessions``, the distinct sessions with a turn completed in the window, and
  ``turns_per_session_mean``, those turns (successes and failures) / ``sessions``. NaN without
  sessions.
- Over the run, per turn index (:func:`turn_table`): requests, failures, mean prompt tokens (the
  server's count: it grows with the history) and TTFT p50/p95 of the successes, ms.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from llm_locust.analysis.perrequest.metrics import end_time_s, quantile, succeeded

SESSION_COLUMNS: tuple[str, ...] = ("sessions", "turns_per_session_mean")
"""Step-table columns :func:`session_table` adds."""


def _in_sessions(requests: pd.DataFrame) -> pd.DataFrame:
    if "turn" not in requests.columns or "session_id" not in requests.columns:
        return requests.iloc[0:0]
    return requests[requests["turn"].fillna(0).to_numpy(float) > 0]


def session_table(requests: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """Per step: :data:`SESSION_COLUMNS` (module docstring), indexed like ``windows``.

    >>> r = pd.DataFrame({"t_start_s": [0.0, 1.0, 2.0], "e2e_ms": [500.0, 500.0, 500.0],
    ...                   "session_id": ["a", "a", "b"], "turn": [1.0, 2.0, 1.0], "error_kind": ["", "", ""]})
    >>> session_table(r, pd.DataFrame({"window_start_s": [0.0], "window_end_s": [5.0]})).iloc[0].tolist()
    [2.0, 1.5]
    """
    turns = _in_sessions(requests)
    t_end = end_time_s(turns).to_numpy(float)
    rows = []
    for window in windows.itertuples(index=False):
        inside = (t_end >= float(window.window_start_s)) & (t_end < float(window.window_end_s))
        count = int(turns["session_id"][inside].nunique()) if inside.any() else 0
        rows.append((float(count), float(inside.sum()) / count if count else np.nan))
    return pd.DataFrame(rows, columns=list(SESSION_COLUMNS), index=windows.index, dtype="float64")


def turn_table(requests: pd.DataFrame) -> pd.DataFrame:
    """Per turn index over the run: ``turn``, ``requests``, ``failed``, ``prompt_tokens_mean``,
    ``ttft_p50_ms``, ``ttft_p95_ms`` (successes); empty without sessions.

    >>> r = pd.DataFrame({"session_id": ["a", "a", "b", "b"], "turn": [1.0, 2.0, 1.0, 2.0],
    ...                   "error_kind": ["", "", "", "http_5xx"], "prompt_tokens": [10.0, 40.0, 12.0, 50.0],
    ...                   "ttft_ms": [20.0, 30.0, 22.0, float("nan")]})
    >>> turn_table(r)[["turn", "requests", "failed", "prompt_tokens_mean", "ttft_p50_ms"]].values.tolist()
    [[1.0, 2.0, 0.0, 11.0, 21.0], [2.0, 2.0, 1.0, 45.0, 30.0]]
    """
    turns = _in_sessions(requests)
    columns = ["turn", "requests", "failed", "prompt_tokens_mean", "ttft_p50_ms", "ttft_p95_ms"]
    if turns.empty:
        return pd.DataFrame(columns=columns)
    ok = succeeded(turns["error_kind"])
    rows = []
    for turn, group in turns.groupby(turns["turn"].astype(int), sort=True):
        good = group[ok[group.index]]
        rows.append(
            {
                "turn": int(turn),
                "requests": len(group),
                "failed": int((~ok[group.index]).sum()),
                "prompt_tokens_mean": float(group["prompt_tokens"].mean()),
                "ttft_p50_ms": quantile(good["ttft_ms"], 0.50),
                "ttft_p95_ms": quantile(good["ttft_ms"], 0.95),
            }
        )
    return pd.DataFrame(rows, columns=columns)


def sessions_markdown(requests: pd.DataFrame) -> list[str]:
    """The ``## Sessions`` section of ``summary.md`` (TTFT by turn index), [] without sessions."""
    table = turn_table(requests)
    if table.empty:
        return []
    turns = _in_sessions(requests)
    ended_by_failure = turns[~succeeded(turns["error_kind"])]
    kinds = ended_by_failure["error_kind"].value_counts()
    lines = [
        "## Sessions",
        "",
        f"{turns['session_id'].nunique()} sessions, {len(turns)} turns; each turn sends the whole history "
        "(the earlier user messages and the server's answers), so prompts grow turn by turn. "
        + (
            "Sessions ended by a failed turn: " + ", ".join(f"{n} {kind}" for kind, n in kinds.items()) + "."
            if len(kinds)
            else "No session ended by a failure."
        ),
        "",
        "| turn | requests | failed | prompt tokens mean | TTFT p50 ms | TTFT p95 ms |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for row in table.itertuples(index=False):
        prompt = "-" if pd.isna(row.prompt_tokens_mean) else f"{row.prompt_tokens_mean:.1f}"
        p50 = "-" if pd.isna(row.ttft_p50_ms) else f"{row.ttft_p50_ms:.0f}"
        p95 = "-" if pd.isna(row.ttft_p95_ms) else f"{row.ttft_p95_ms:.0f}"
        lines.append(f"| {row.turn} | {row.requests} | {row.failed} | {prompt} | {p50} | {p95} |")
    return [*lines, ""]
