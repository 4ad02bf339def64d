"""What the metrics do not show (llm_locust/analysis/verdict/inferred.py), on step tables built by hand."""

import math

import pytest

from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.verdict import BottleneckKind
from tests.unit.analysis.verdict.test_verdict_rules import ev, judge, table

K = BottleneckKind

# the real vLLM run of tests/real/test_real_verdict.py (KV of 5 blocks, max_num_seqs 8) without
# its KV gauge: what a server that reports no KV usage leaves the verdict
NO_KV_GAUGE = dict(
    users=[1, 2, 4, 8],
    tput=[40.8, 68.6, 126.0, 128.0],
    ttft=[75, 90, 124, 1606],
    running=[1.0, 1.81, 3.48, 3.56],
    waiting=[0, 0, 0, 4.0],
)


def vllm_kv(tokens):
    return ServerConfig(
        engine="vllm",
        batch_ceiling=8,
        batch_ceiling_name="max_num_seqs",
        kv_capacity_tokens=tokens,
        sources={"kv_capacity_tokens": "server.log line 87"},
    )


def test_kv_pressure_by_token_arithmetic_is_a_secondary():
    verdict = judge(table(**NO_KV_GAUGE), vllm_kv(640), request_tokens=110.0)
    e = ev(verdict, "kv_tokens")
    assert e.holds, e.text
    assert e.values["fits_requests"] == pytest.approx(640 / 110)  # 5.82 < 0.9 x 8
    assert e.values["server_running"] == 3.56 and e.values["users"] == 8
    assert "holds 5.8 requests of 110 tokens" in e.text and "server.log line 87" in e.text
    # no KV gauge: the primary cannot be kv_cache by its own rule, and says what tells it apart
    assert verdict.bottleneck is K.UNDETERMINED and K.KV_CACHE in verdict.candidates
    assert K.KV_CACHE in verdict.secondary
    assert "kv_tokens" in {r.because for r in verdict.recommendations}  # more KV memory, on this evidence


def test_token_arithmetic_that_fits_the_ceiling_or_a_reported_gauge_does_not_hold():
    roomy = judge(table(**NO_KV_GAUGE), vllm_kv(32768), request_tokens=110.0)  # 298 requests fit
    assert not ev(roomy, "kv_tokens").holds and K.KV_CACHE not in roomy.secondary
    gauge = judge(table(**NO_KV_GAUGE, kv=[0.25, 0.45, 0.87, 0.89]), vllm_kv(640), request_tokens=110.0)
    assert not ev(gauge, "kv_tokens").holds  # the server's own gauge decides (rule kv_cache)
    assert gauge.bottleneck is K.KV_CACHE


def test_llamacpp_per_slot_context_holds_one_request_a_slot():
    config = ServerConfig(engine="llamacpp", batch_ceiling=4, batch_ceiling_name="n_slots", max_model_len=1024)
    tab = table(users=[1, 2, 4, 8], tput=[40, 70, 107, 107], running=[1, 2, 4, 4], waiting=[0, 0, 0, 4])
    e = ev(judge(tab, config, request_tokens=96.0), "kv_tokens")
    assert not e.holds and e.values["fits_requests"] == 4.0  # 96 <= 1024: every slot holds its request


def test_compute_beside_a_ceiling_from_tpot_growth():
    # real llama.cpp, slow model, one thread (TPOT p50 28.4, 50.9, 57.9 ms at 1, 2, 4 running),
    # here with 4 slots: the ceiling holds at 8 users, and each doubling of the batch cost
    # (57.9 / 28.4) ** (1 / 2) = 1.43 in TPOT
    config = ServerConfig(engine="llamacpp", batch_ceiling=4, batch_ceiling_name="n_slots")
    tab = table(
        users=[1, 2, 4, 8],
        tput=[31.8, 37.1, 63.7, 64.0],
        ttft=[50, 52, 55, 900],
        running=[1, 2, 4, 4],
        waiting=[0, 0, 0, 4],
        tpot=[28.4, 50.9, 57.9, 58.0],
    )
    verdict = judge(tab, config)
    assert verdict.bottleneck is K.SCHEDULER_CEILING and verdict.critical_concurrency == 4
    e = ev(verdict, "compute_beside_ceiling")
    assert e.holds and e.values["tpot_growth_per_doubling"] == pytest.approx(math.sqrt(57.9 / 28.4))
    assert f"at most x{2 / math.sqrt(57.9 / 28.4):.2f} per doubling" in e.text
    assert K.COMPUTE in verdict.secondary
    assert "compute_beside_ceiling" in {r.because for r in verdict.recommendations}
    # a memory-bound batch (TPOT 20 -> 22 ms from 1 to 4 running) leaves compute out
    flat = judge(tab.assign(tpot_p50_ms=[20.0, 21.0, 22.0, 22.0]), config)
    assert not ev(flat, "compute_beside_ceiling").holds and K.COMPUTE not in flat.secondary
