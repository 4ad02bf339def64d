"""The round table: one row per round, the columns of the playbooks' comparison table.

:func:`round_table` is pure (summaries in, a DataFrame out); rendering (console, markdown) is
:func:`format_round_table`.
"""

from __future__ import annotations

import math

import pandas as pd

from llm_locust.analysis.compare.rounds import RoundSummary
from llm_locust.analysis.loadaxis import RATE, USERS, LoadAxis
from llm_locust.analysis.verdict.knee import fmt_users


def rounds_axis(summaries: list[RoundSummary]) -> LoadAxis:
    """The load axis of the rounds' ladders (:data:`~llm_locust.analysis.loadaxis.RATE` when a round with
    ladder steps is a request-rate ladder, else :data:`~llm_locust.analysis.loadaxis.USERS`); rounds of
    different axes are refused before this (:func:`llm_locust.analysis.compare.changes.check_same_load_axis`)."""
    return RATE if any(s.axis is RATE and s.step_tps for s in summaries) else USERS


def common_steps(summaries: list[RoundSummary]) -> list[float]:
    """Load levels (target users, or offered requests/s) every round measured a throughput at,
    ascending."""
    sets = [set(s.step_tps) for s in summaries if s.step_tps]
    if not sets or len(sets) < len(summaries):
        return []
    return sorted(set.intersection(*sets))


def round_table(summaries: list[RoundSummary], changes: list[str]) -> pd.DataFrame:
    """One row per round, in the order given (the first is the baseline round).

    Columns: ``round``, ``change`` (vs the baseline round), ``achieved_inflight_max``
    (largest per-step mean in-flight, requests), ``successes``, ``failures``, ``server_running_mean``
    (largest per-step time-average), ``server_running_max``, ``server_waiting_mean``,
    ``server_waiting_max``, ``timeouts``, ``rejects``, ``failure_kinds`` (client, ``kind:n``),
    ``server_log_errors`` (``kind:n``), ``output_tps_c<N>`` for each common step (tokens/s),
    ``knee_users``, ``output_tps_knee``, ``ttft_p50_ms_knee``, ``ttft_p95_ms_knee``,
    ``decode_tps_p50_knee`` (at the knee step), ``single_ttft_ms``, ``single_decode_tps``
    (single-request medians), ``single_source``, ``critical_concurrency``, ``bottleneck``,
    ``gpu_memory_peak_mib``.

    Request-rate ladders (:func:`rounds_axis` is ``RATE``) are keyed by the offered rate instead:
    per common step ``output_tps_r<R>`` (tokens/s) and ``achieved_rate_rps_r<R>`` (requests/s
    sent in the step's window, :func:`llm_locust.analysis.perstep.rate.rate_columns`) beside the requested ``R``;
    ``knee_rate_rps`` and ``critical_rate_rps`` (requests/s) replace ``knee_users`` and
    ``critical_concurrency``, and the knee adds ``achieved_rate_rps_knee``,
    ``send_lag_p99_ms_knee`` and ``ttft_from_schedule_p50_ms_knee`` (ms).

    Parameters
    ----------
    summaries : list of RoundSummary
    changes : list of str
        One "what changed" cell per round ("baseline" for the first).
    """
    steps = common_steps(summaries)
    rate = rounds_axis(summaries) is RATE
    rows = []
    for summary, change in zip(summaries, changes):
        knee = summary.knee_users
        row = {
            "round": summary.name,
            "change": change,
            "achieved_inflight_max": summary.achieved_max,
            "successes": summary.successes,
            "failures": summary.failures,
            "server_running_mean": summary.running_mean,
            "server_running_max": summary.running_max,
            "server_waiting_mean": summary.waiting_mean,
            "server_waiting_max": summary.waiting_max,
            "timeouts": summary.timeouts,
            "rejects": summary.rejects,
            "failure_kinds": _kinds(summary.failure_kinds),
            "server_log_errors": _kinds(summary.server_log_errors),
        }
        for users in steps:
            if rate:
                row[f"output_tps_r{fmt_users(users)}"] = summary.step_tps[users].value
                row[f"achieved_rate_rps_r{fmt_users(users)}"] = summary.step_value(users, "achieved_rate_rps")
            else:
                row[f"output_tps_c{fmt_users(users)}"] = summary.step_tps[users].value
        knee_tps = summary.tps_at(knee)

        def at_knee(column: str, knee=knee, summary=summary) -> float:
            return summary.step_value(knee, column) if knee is not None else math.nan

        row.update(
            {
                ("knee_rate_rps" if rate else "knee_users"): math.nan if knee is None else knee,
                **(
                    {
                        "achieved_rate_rps_knee": at_knee("achieved_rate_rps"),
                        "send_lag_p99_ms_knee": at_knee("send_lag_p99_ms"),
                        "ttft_from_schedule_p50_ms_knee": at_knee("ttft_from_schedule_p50_ms"),
                    }
                    if rate
                    else {}
                ),
                "output_tps_knee": knee_tps.value if knee_tps is not None else math.nan,
                "ttft_p50_ms_knee": summary.step_value(knee, "ttft_p50_ms") if knee is not None else math.nan,
                "ttft_p95_ms_knee": summary.step_value(knee, "ttft_p95_ms") if knee is not None else math.nan,
                "decode_tps_p50_knee": summary.step_value(knee, "decode_tps_p50") if knee is not None else math.nan,
                "single_ttft_ms": summary.single_ttft_ms.value,
                "single_decode_tps": summary.single_decode_tps.value,
                "single_source": summary.single_source,
                ("critical_rate_rps" if rate else "critical_concurrency"): (
                    math.nan if summary.critical_users is None else summary.critical_users
                ),
                "bottleneck": summary.bottleneck,
                "gpu_memory_peak_mib": summary.gpu_memory_peak_mib,
            }
        )
        rows.append(row)
    return pd.DataFrame(rows)


def _kinds(counts: dict[str, int]) -> str:
    return " ".join(f"{k}:{n}" for k, n in counts.items())


HEADERS: dict[str, tuple[str, str]] = {
    "round": ("round", "{}"),
    "change": ("change", "{}"),
    "achieved_inflight_max": ("in-flight", "{:.2f}"),
    "successes": ("ok", "{:.0f}"),
    "failures": ("failed", "{:.0f}"),
    "server_running_mean": ("running mean", "{:.2f}"),
    "server_running_max": ("running max", "{:.0f}"),
    "server_waiting_mean": ("waiting mean", "{:.2f}"),
    "server_waiting_max": ("waiting max", "{:.0f}"),
    "timeouts": ("timeouts", "{:.0f}"),
    "rejects": ("rejects", "{:.0f}"),
    "failure_kinds": ("failures by kind", "{}"),
    "server_log_errors": ("server log errors", "{}"),
    "knee_users": ("knee users", "{:g}"),
    "knee_rate_rps": ("knee req/s", "{:g}"),
    "achieved_rate_rps_knee": ("sent req/s @knee", "{:.2f}"),
    "send_lag_p99_ms_knee": ("send lag p99 ms @knee", "{:.1f}"),
    "ttft_from_schedule_p50_ms_knee": ("TTFT p50 from sched @knee", "{:.0f}"),
    "output_tps_knee": ("tok/s @knee", "{:.1f}"),
    "ttft_p50_ms_knee": ("TTFT p50 @knee", "{:.0f}"),
    "ttft_p95_ms_knee": ("TTFT p95 @knee", "{:.0f}"),
    "decode_tps_p50_knee": ("decode p50 @knee", "{:.1f}"),
    "single_ttft_ms": ("1-req TTFT ms", "{:.1f}"),
    "single_decode_tps": ("1-req decode tok/s", "{:.1f}"),
    "single_source": ("1-req from", "{}"),
    "critical_concurrency": ("critical", "{:g}"),
    "critical_rate_rps": ("critical req/s", "{:g}"),
    "bottleneck": ("bottleneck", "{}"),
    "gpu_memory_peak_mib": ("GPU MiB peak", "{:.0f}"),
}
"""(header, format) of each round-table column; ``output_tps_c<N>`` columns read ``tok/s @N``,
``output_tps_r<R>`` ``tok/s @R req/s`` and ``achieved_rate_rps_r<R>`` ``sent req/s @R req/s``."""


def _header(column: str) -> tuple[str, str]:
    if column in HEADERS:
        return HEADERS[column]
    if column.startswith("achieved_rate_rps_r"):
        return f"sent req/s @{column.removeprefix('achieved_rate_rps_r')} req/s", "{:.2f}"
    if column.startswith("output_tps_r"):
        return f"tok/s @{column.removeprefix('output_tps_r')} req/s", "{:.1f}"
    return f"tok/s @{column.removeprefix('output_tps_c')}", "{:.1f}"


NO_KNEE_NOTE = " (top step, no knee)"
"""Appended to a round's knee cell when the round found no critical load: its knee figures are
read at its highest measured step, where throughput was still rising."""


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and not math.isfinite(value)) or value == ""


def table_cells(table: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Headers and formatted cells ("-" for missing) of a round table, one list per round.

    A knee cell (``knee_users``, ``knee_rate_rps``) of a round without a critical load carries
    :data:`NO_KNEE_NOTE`: the number alone would read as a knee found there.
    """
    headers: list[str] = []
    rows: list[list[str]] = [[] for _ in range(len(table))]
    critical_column = next((c for c in ("critical_concurrency", "critical_rate_rps") if c in table.columns), None)
    for column in table.columns:
        header, fmt = _header(column)
        headers.append(header)
        for i, value in enumerate(table[column]):
            cell = "-" if _missing(value) else fmt.format(value)
            if column in ("knee_users", "knee_rate_rps") and cell != "-" and critical_column is not None:
                if _missing(table[critical_column].iloc[i]):
                    cell += NO_KNEE_NOTE
            rows[i].append(cell)
    return headers, rows


def format_round_table(table: pd.DataFrame) -> str:
    """The table transposed for the console (one column per round: rounds are few, columns many)."""
    headers, rows = table_cells(table)
    width = max(len(h) for h in headers)
    lines = []
    for i, header in enumerate(headers):
        cells = [r[i] if len(r[i]) <= 90 else r[i][:87] + "..." for r in rows]
        lines.append(f"{header:<{width}}  " + "  |  ".join(cells))
    return "\n".join(lines)


def markdown_round_table(table: pd.DataFrame) -> str:
    """The table as markdown, transposed like :func:`format_round_table` (one column per round)."""
    headers, rows = table_cells(table)
    out = ["| | " + " | ".join(f"round {i + 1}" for i in range(len(rows))) + " |", "|---|" + "---|" * len(rows)]
    for i, header in enumerate(headers):
        out.append(f"| {header} | " + " | ".join(r[i].replace("|", "\\|") for r in rows) + " |")
    return "\n".join(out)
