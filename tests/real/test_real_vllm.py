"""The main job against a real vLLM (CPU build, random-weight model, ``--max-num-seqs 2``).

Expected behaviour comes from the server's configuration, not from this project's code: with a
batch ceiling of 2, running ≈ min(c, 2), waiting leaves zero from c = 4 on, output throughput
rises from 1 to 2 and stops rising from 2 to 4 and 8. (Measured in CI on this 2-core machine:
19-22, 55-64, 42-45 and 51-57 output tokens/s and TTFT p50 of 73, 78, 2264 and 4263 ms at 1, 2,
4 and 8.) The run is the first round of the ``--max-num-seqs`` A/B (``conftest.vllm_seqs_ab``):
one vLLM start serves both this module and ``test_real_vllm_ab``.
"""

from __future__ import annotations

import csv
import json

import pytest

from llm_locust.analysis.pipeline import analyze_run
from tests.verdict_contract import assert_verdict_contract

pytestmark = [pytest.mark.slow, pytest.mark.real_server]

LADDER = [1, 2, 4, 8]
MAX_NUM_SEQS = 2


@pytest.fixture(scope="module")
def vllm_ladder_run(vllm_seqs_ab):
    """The ladder run directory of the ``--max-num-seqs 2`` round (two Locust workers)."""
    return vllm_seqs_ab.round_a / "ladder"


def test_critical_concurrency_is_the_batch_ceiling(vllm_ladder_run):
    result = analyze_run(vllm_ladder_run)
    table = result.table.set_index("target_users")

    assert result.critical.users == MAX_NUM_SEQS, "\n".join(result.critical.evidence)
    for c in LADDER:
        expected_running = min(c, MAX_NUM_SEQS)
        # the gauge misses each request's moments outside the engine (HTTP, tokenizing, the next
        # request not yet admitted), and a 1-Hz scrape can land on them in phase: two runs of
        # 3 Dec 2026 read 0.89 / 1.56 / 1.89 / 2.00 and 0.89 / 1.78 / 1.78 / 2.00 at 1 / 2 / 4 / 8
        # users with 1 / 2 / 4 / 8 in flight (every 4.0-s request ending just before a scrape).
        # Bounded so that a step without batching (1 at 2 users) or past the ceiling (> 2.4) fails
        assert 0.7 * expected_running <= table.loc[c, "server_running"] <= 1.2 * expected_running, table
        if c <= MAX_NUM_SEQS:
            assert table.loc[c, "server_waiting"] < 0.5, table
    assert table.loc[4, "server_waiting"] > 1.0, table
    assert table.loc[8, "server_waiting"] > 4.0, table
    # tokens generated in each window (the prorated figure the verdict judges on): batching is in
    # effect (2 users give more than 1) and the ceiling caps it (8 users, both at the ceiling with a
    # queue, give no more than 4). Not tighter: on this shared CPU one step can run ~30 % slower per
    # sequence than the next (seen in CI: 35, 41, 58, 50 tokens/s at 1, 2, 4, 8 users), which the
    # verdict must - and did - see through (a queue at a full batch). 1.25, not 1.15: on the
    # faster machine of 7 Dec 2026 (73, 120, 136, 157 tokens/s at 1, 2, 4, 8 users, run alone) 8
    # users gave x1.16 of 4 with the verdict right (scheduler_ceiling at 2); a ceiling that does not
    # cap gains far more per doubling while the batch grows (x1.66 from 1 to 2 there)
    tput = table["output_tps_prorated"]
    assert tput[2] / tput[1] >= 1.1, tput
    assert tput[8] / tput[4] < 1.25, tput
    assert table.loc[4, "ttft_p50_ms"] > 2 * table.loc[2, "ttft_p50_ms"], table
    assert result.paths.throughput_png.stat().st_size > 10_000
    assert result.verdict.bottleneck.value == "scheduler_ceiling", result.verdict.line
    assert result.verdict.critical_concurrency == MAX_NUM_SEQS
    assert result.verdict.table["valid"].all(), result.verdict.table["invalid_reason"].tolist()
    assert_verdict_contract(json.loads((vllm_ladder_run / "report" / "verdict.json").read_text()))


def test_every_request_recorded_once_and_ttft_on_first_content(vllm_ladder_run):
    with open(vllm_ladder_run / "requests.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    with open(vllm_ladder_run / "locust_stats.csv", newline="") as f:
        aggregated = [r for r in csv.DictReader(f) if r["Name"] == "Aggregated"][0]

    assert len(rows) == int(aggregated["Request Count"])
    assert len({r["request_id"] for r in rows}) == len(rows)
    assert len({r["worker_id"] for r in rows}) == 2
    ok = [r for r in rows if not r["error_kind"]]
    assert len(ok) == len(rows)
    for r in ok:
        # vLLM's role-only first chunk carries content "": it must be neither a token nor TTFT
        assert int(r["output_tokens"]) == 64
        # one token per event as a rule; vLLM V1 merges the deltas of a request whose stream
        # the API server has not yet taken (RequestOutputCollector), so a busy server sends
        # fewer, larger events: never more events than tokens, never a token counted twice
        assert 1 <= int(r["content_events"]) <= 64
        assert r["tokens_source"] == "usage"
        assert float(r["headers_ms"]) <= float(r["ttft_ms"]) < float(r["e2e_ms"])
    events = sum(int(r["content_events"]) for r in ok)
    assert events >= 0.9 * 64 * len(ok), events
