"""The attribution's rules on hand-checkable rounds (:mod:`tests.unit.analysis.compare.summary_factory`),
two of them a real quantization A/B and a static batcher's A/B that both read ``mixed`` before.

Every expected ratio is worked out here from the factory's numbers (medians by
:mod:`statistics`, throughput ratios by division), not read back from the code under test.
"""

from __future__ import annotations

import math
import statistics

import pytest

from llm_locust.analysis.compare.attribution import attribute
from tests.unit.analysis.compare.summary_factory import (
    NO_PREFIX_CACHE,
    PREFIX_CACHE,
    QUANT_F32,
    QUANT_Q4_0,
    STATIC_MAX1,
    STATIC_MAX8,
    est,
    summary,
)


def _decode_ratio(a: dict, b: dict) -> float:
    return statistics.median(b["decode"]) / statistics.median(a["decode"])


def test_real_quantization_ab_is_compute_cost_with_both_ratios():
    # llama.cpp f32 vs q4_0, 4 slots: x2.87 alone, x2.05 at the knee (4 users), same ceiling and knee
    result = attribute(summary("f32", **QUANT_F32), summary("q4_0", **QUANT_Q4_0))

    assert result.kind == "compute_cost", result.evidence
    single = _decode_ratio(QUANT_F32, QUANT_Q4_0)
    assert single == pytest.approx((167.16 + 167.34) / (58.05 + 58.40))  # even counts: mean of the middle two
    assert result.single_decode_ratio.value == pytest.approx(single, rel=1e-12)
    concurrent = 207.7 / 101.2
    assert result.knee_tps_ratio.value == pytest.approx(concurrent, rel=1e-12)
    # conservative interval of two estimates without replicates
    assert (result.knee_tps_ratio.low, result.knee_tps_ratio.high) == pytest.approx((206.1 / 106.8, 209.5 / 95.4))
    last = result.evidence[-1]
    assert f"x{single:.2f}" in last and f"x{concurrent:.2f}" in last, last
    assert "gains less from batching" in last, last
    # each round's batching gain: prorated tokens/s at the knee over the 1-user step
    assert f"x{207.7 / 169.3:.2f} after the change, x{101.2 / 58.4:.2f} before" in last, last
    assert not any("batching/scheduling another" in line for line in result.evidence)
    assert result.to_json()["batch_ceiling"]["moved"] is False
    assert result.to_json()["critical_concurrency"] == {
        "baseline": 4.0, "round": 4.0, "ladder_steps_apart": 0, "moved": False
    }  # fmt: skip


def test_static_batcher_ab_is_batching_or_scheduling_its_ttft_a_batch_timer():
    # max batch 8 vs 1, batch timer 200 ms: the lone request waits ~200 ms for its batch under 8,
    # none under 1; decode rates equal to 0.1 %
    result = attribute(summary("max8", **STATIC_MAX8), summary("max1", **STATIC_MAX1))

    assert result.kind == "batching_or_scheduling", result.evidence
    assert abs(result.single_decode_ratio.value - 1) < 0.01
    gap = statistics.median(STATIC_MAX8["ttft"]) - statistics.median(STATIC_MAX1["ttft"])
    fall = 225.0 - 44.0  # round max8's TTFT p50 alone, and at 8 users (full batches)
    assert fall >= gap / 2
    assert any(f"{fall:.0f} of the {gap:.0f} ms" in line for line in result.evidence), result.evidence
    assert result.ttft_wait is not None and result.ttft_wait.explained is True
    assert result.ceiling is not None and result.ceiling.moved and result.ceiling.binding
    assert result.knee is not None and result.knee.steps_apart == 4  # no knee (beyond 8) vs 1


@pytest.mark.parametrize(
    ("prefill_b", "batch_wait_ms", "expected"),
    [
        # the servers' own prefill times equal: the 200 ms is spent before the prefill
        ([20.0] * 8, None, "batching_or_scheduling"),
        # the servers' prefill moved by the same 200 ms: prefill work, and the ceiling moved too
        ([220.0] * 8, None, "mixed"),
        # no server timings, a declared batch timer of 200 ms covers the difference
        (None, 200.0, "batching_or_scheduling"),
        # no server timings, a timer far too short to cover it: nothing says it is a wait
        (None, 20.0, "mixed"),
    ],
)
def test_a_ttft_only_difference_is_scheduling_when_it_is_a_wait(prefill_b, batch_wait_ms, expected):
    ttft_a = [24.0, 24.5, 23.5, 24.2, 23.8, 24.1, 24.0, 23.9]
    ttft_b = [t + 200.0 for t in ttft_a]
    flat = {1: (47.5, 47.1, 47.9), 2: (47.5, 47.1, 47.9), 4: (47.5, 47.1, 47.9), 8: (47.5, 47.1, 47.9)}
    rising = {1: (47.5, 47.1, 47.9), 2: (95.0, 94.0, 96.0), 4: (190.0, 188.0, 192.0), 8: (200.0, 198.0, 202.0)}
    a = summary(
        "max1", decode=STATIC_MAX1["decode"], ttft=ttft_a, prefill=[20.0] * 8, steps=flat,
        ttft_p50={1: 24.0, 2: 700.0, 4: 2000.0, 8: 4700.0}, critical=1.0, running_max=1.0, waiting_max=7.0, ceiling=1,
    )  # fmt: skip
    b = summary(
        "max8", decode=STATIC_MAX1["decode"], ttft=ttft_b, prefill=prefill_b, steps=rising,
        ttft_p50={1: 224.0, 2: 226.0, 4: 230.0, 8: 260.0}, critical=4.0, running_max=8.0, waiting_max=0.0, ceiling=8,
        batch_wait_max_ms=batch_wait_ms,
    )  # fmt: skip

    result = attribute(a, b)

    assert result.kind == expected, result.evidence
    if expected == "mixed":
        assert result.shares is not None
        assert result.shares["compute_factor"] == pytest.approx(_decode_ratio(STATIC_MAX1, STATIC_MAX1))


def test_mixed_gives_both_shares():
    # the quantized round with twice the slots: its knee moves 4 -> 16 (two steps) and the ceiling 4 -> 8
    steps = {1: (169.3, 168.7, 170.1), 2: (300.0, 297.0, 303.0), 4: (420.0, 415.0, 425.0), 8: (600.0, 590.0, 610.0),
             16: (610.0, 600.0, 620.0)}  # fmt: skip
    q4_8 = {**QUANT_Q4_0, "steps": steps, "ttft_p50": {1: 9.0, 2: 10.0, 4: 12.0, 8: 20.0, 16: 900.0},
            "critical": 16.0, "running_max": 8.0, "ceiling": 8}  # fmt: skip
    f32 = {
        **QUANT_F32,
        "steps": {**QUANT_F32["steps"], 16: (99.0, 93.0, 105.0)},
        "ttft_p50": {**QUANT_F32["ttft_p50"], 16: 6000.0},
    }

    result = attribute(summary("f32", **f32), summary("q4_0-8", **q4_8))

    assert result.kind == "mixed", result.evidence
    total = 610.0 / 101.2  # knee throughputs: 16 users vs 4
    compute = _decode_ratio(QUANT_F32, QUANT_Q4_0)
    batching = total / compute
    share = math.log(compute) / (math.log(compute) + abs(math.log(batching)))
    assert result.shares == pytest.approx(
        {"compute_factor": compute, "batching_factor": batching, "compute": share, "batching": 1 - share}
    )
    assert f"shares {share:.0%} compute, {1 - share:.0%} batching/scheduling" in result.evidence[-1]


@pytest.mark.parametrize(("critical_b", "expected"), [(8.0, "compute_cost"), (None, "mixed")])
def test_a_knee_within_one_ladder_step_is_the_same_knee(critical_b, expected):
    # 4 -> 8 is one step of the 1,2,4,8 ladder; 4 -> none found (beyond 8) is two
    result = attribute(summary("f32", **QUANT_F32), summary("q4_0", **{**QUANT_Q4_0, "critical": critical_b}))

    assert result.kind == expected, result.evidence
    assert result.knee is not None and result.knee.steps_apart == (1 if critical_b else 2)


def test_a_ceiling_change_no_round_reached_is_no_cause():
    # q4_0 round configured with 16 slots, but its ladder never queued and f32's 4 was reached: binding;
    # the other way round (the lower ceiling 16 vs 32, running peaked at 8): not binding
    never = {**QUANT_Q4_0, "ceiling": 32, "waiting_max": 0.0, "running_max": 8.0}
    low = {**QUANT_F32, "ceiling": 16, "waiting_max": 0.0, "running_max": 8.0}

    result = attribute(summary("a", **low), summary("b", **never))

    assert result.ceiling is not None and result.ceiling.moved and not result.ceiling.binding
    assert result.kind == "compute_cost", result.evidence
    assert "cannot have set these numbers" in result.ceiling.text


def test_the_same_round_twice_is_no_difference():
    result = attribute(summary("a", **QUANT_F32), summary("b", **QUANT_F32))

    assert result.kind == "no_difference", result.evidence
    assert result.single_decode_ratio.value == 1.0


def test_a_decode_difference_within_the_rounds_repeat_is_not_compute():
    # round b's own two single-request measurements differ by x1.10: a x1.05 difference between
    # rounds is within it; with the knee two steps up the change is batching's
    b = {**QUANT_F32, "decode": [x * 1.05 for x in QUANT_F32["decode"]], "critical": None}
    result = attribute(summary("a", **QUANT_F32), summary("b", **b, repeat_decode=est(1.10, 1.08, 1.12)))

    assert result.kind == "batching_or_scheduling", result.evidence


def test_real_prefix_caching_ab_is_the_prefix_cache():
    result = attribute(summary("off", **NO_PREFIX_CACHE), summary("on", **PREFIX_CACHE))

    assert result.kind == "prefix_cache", result.evidence
    # the medians of 22 and 15 requests: (107.1 + 107.5) / 2 and 334.5
    assert result.single_ttft_ratio.value == pytest.approx(107.3 / 334.5)
    assert not result.single_decode_ratio.excludes_one
    assert result.prefix_cache_hit_ratios == {"baseline": 0.0, "round": 0.75}
    assert "hit 0.0% of the prompt tokens in round off and 75.0% in round on" in result.evidence[-1]
    assert "the concurrent throughput at the knee moved with it" in result.evidence[-1]


@pytest.mark.parametrize(
    ("hit_a", "hit_b", "ttft_b"),
    [
        (0.75, 0.75, PREFIX_CACHE["ttft"]),  # the same hit ratio: something else cut the prefill
        (None, None, PREFIX_CACHE["ttft"]),  # no counters read
        (0.75, 0.0, PREFIX_CACHE["ttft"]),  # fewer hits yet a shorter TTFT: not the cache
    ],
)
def test_a_ttft_change_the_hit_ratios_do_not_explain_is_the_prefill_cost(hit_a, hit_b, ttft_b):
    a = {**NO_PREFIX_CACHE, "prefix_hit": hit_a}
    b = {**PREFIX_CACHE, "prefix_hit": hit_b, "ttft": ttft_b}

    result = attribute(summary("a", **a), summary("b", **b))

    assert result.kind == "compute_cost", result.evidence
    assert "the change's prefill cost is the cause" in result.evidence[-1]


def test_a_prefix_cache_ab_whose_decode_rate_moved_too_says_both():
    # the same A/B with the caching round's decode rates 60 % higher (this shared CPU's noise
    # between two vLLM processes can do that): no longer only the cache
    faster = {**PREFIX_CACHE, "decode": [1.6 * d for d in PREFIX_CACHE["decode"]]}

    result = attribute(summary("off", **NO_PREFIX_CACHE), summary("on", **faster))

    assert result.single_decode_ratio.excludes_one and result.kind in ("compute_cost", "mixed"), result.evidence
    assert "follows the server's prefix-cache hit ratio (0.0% in round off, 75.0% in round on)" in result.evidence[-1]
    assert "which a prefix cache does not do" in result.evidence[-1]
