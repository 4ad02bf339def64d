"""``summary.md`` sections and printed lines for goodput (:mod:`llm_locust.analysis.perstep.goodput`), the
server-side TTFT split (:mod:`llm_locust.analysis.perrequest.servertime`) and multi-token chunks
(:mod:`llm_locust.analysis.perrequest.chunks`), from the step table's columns."""

from __future__ import annotations

import pandas as pd

from llm_locust.analysis.loadaxis import USERS, LoadAxis, fmt_number, load_axis
from llm_locust.analysis.perrequest.chunks import multi_token_line


def _cell(value: float, fmt: str) -> str:
    return "-" if pd.isna(value) else fmt.format(value)


def goodput_line(
    slos: tuple, goodput_knee_users: float | None, throughput_knee_users: float | None, axis: LoadAxis = USERS
) -> str:
    """``Knee by goodput (SLO …): N users; knee by throughput: M users`` (``req/s`` in a rate
    ladder; "" without SLOs)."""
    if not slos:
        return ""
    slo_text = ",".join(str(s) for s in slos)
    goodput = "none (no request met the SLOs)" if goodput_knee_users is None else axis.fmt(goodput_knee_users)
    throughput = "not found" if throughput_knee_users is None else axis.fmt(throughput_knee_users)
    return f"Knee by goodput (SLO {slo_text}): {goodput}; knee by throughput (critical concurrency): {throughput}"


def goodput_markdown(table: pd.DataFrame, slos: tuple, goodput_knee_users, throughput_knee_users) -> list[str]:
    """The ``## Goodput`` section: per step output and goodput tokens/s, the share meeting the SLOs."""
    if not slos or "goodput_tps" not in table.columns:
        return []
    axis = load_axis(table)
    lines = [
        "## Goodput",
        "",
        f"**{goodput_line(slos, goodput_knee_users, throughput_knee_users, axis)}**",
        "",
        "A request meets the SLOs when it succeeded and every named metric is within its limit (a "
        "metric it does not have, e.g. TTFT of a non-streamed answer, is not met). Goodput: output "
        "tokens of those requests completed in the window / window length (`llm_locust/analysis/perstep/goodput.py`).",
        "",
        f"| {axis.unit} | out tok/s | goodput tok/s | goodput req/s | met SLOs |",
        "|---:|---:|---:|---:|---:|",
    ]
    for row in table.to_dict("records"):
        lines.append(
            f"| {fmt_number(row[axis.column])} | {_cell(row['output_tps'], '{:.1f}')} | "
            f"{_cell(row['goodput_tps'], '{:.1f}')} | {_cell(row['goodput_rps'], '{:.2f}')} | "
            f"{_cell(row['slo_met_share'], '{:.0%}')} |"
        )
    return [*lines, ""]


def server_timings_markdown(table: pd.DataFrame) -> list[str]:
    """The ``## TTFT: server vs outside`` section, when the server sent per-request timings."""
    if "server_timed" not in table.columns or not (table["server_timed"] > 0).any():
        return []
    axis = load_axis(table)
    lines = [
        "## TTFT: server vs outside",
        "",
        "From the timings the server sent with each answer (requests.csv `server_*`): the server's "
        "queue and prefill vs the rest of TTFT (network, client, and the server's work outside its "
        "timings; where the server reports no queue time, as llama.cpp, the wait for a slot is in "
        "the outside part). Means over the requests with timings, so the parts add up to the TTFT "
        "mean; `E2E outside`: each request's E2E minus all its server time, the measured "
        "network and overhead (`llm_locust/analysis/perrequest/servertime.py`).",
        "",
        f"| {axis.unit} | timed | TTFT mean ms | server queue ms | server prefill ms | outside ms | E2E outside ms |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in table.to_dict("records"):
        lines.append(
            f"| {fmt_number(row[axis.column])} | {row['server_timed']:.0f} | "
            f"{_cell(row['ttft_timed_mean_ms'], '{:.1f}')} | {_cell(row['ttft_server_queue_ms'], '{:.1f}')} | "
            f"{_cell(row['ttft_server_prefill_ms'], '{:.1f}')} | {_cell(row['ttft_outside_ms'], '{:.1f}')} | "
            f"{_cell(row['e2e_outside_ms'], '{:.1f}')} |"
        )
    return [*lines, ""]


def chunks_markdown(table: pd.DataFrame) -> list[str]:
    """The ``## Tokens per chunk`` section, when the chunks carried several tokens
    (:func:`llm_locust.analysis.perrequest.chunks.multi_token_line`): per step tokens per chunk, ITL per token and
    per chunk."""
    flag = multi_token_line(table)
    if not flag:
        return []
    axis = load_axis(table)
    lines = [
        "## Tokens per chunk",
        "",
        f"**{flag}.**",
        "",
        "Tokens per chunk: output tokens / token events of the requests completed in the window. "
        "Per-token ITL divides each gap by the tokens its chunk carried (known per chunk when the "
        "server says, e.g. vLLM's `--continuous-usage true`; else the first chunk counts one token "
        "and the others share the rest evenly); inter-chunk latency is the raw gap "
        "(`llm_locust/analysis/perrequest/chunks.py`, `llm_locust/analysis/perrequest/itl.py`).",
        "",
        f"| {axis.unit} | tokens/chunk | multi-token requests | ITL p50 ms | ITL p99 ms | chunk gap p50 ms | chunk gap p99 ms |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in table.to_dict("records"):
        lines.append(
            f"| {fmt_number(row[axis.column])} | {_cell(row['tokens_per_chunk_mean'], '{:.2f}')} | "
            f"{_cell(row['multi_token_chunk_share'], '{:.0%}')} | {_cell(row['itl_p50_ms'], '{:.1f}')} | "
            f"{_cell(row['itl_p99_ms'], '{:.1f}')} | {_cell(row['chunk_gap_p50_ms'], '{:.1f}')} | "
            f"{_cell(row['chunk_gap_p99_ms'], '{:.1f}')} |"
        )
    return [*lines, ""]
