"""The quantization A/B against real llama.cpp servers: f32 vs q4_0 of the same random-weight model
(``../shared/real-servers/llama-cpp``, ``QUANT=q4_0``; 4 slots, one thread each).

``llm-locust diagnose --host f32 --host-b q4_0`` must write a round table whose single-request and
concurrent deltas equal those recomputed here from the two rounds' ``requests.csv``, and an
attribution that follows its stated rules given those deltas. The direction is whatever was
measured: on this CPU build the smaller q4_0 weights decode faster (the real-servers README
measured 55 vs 253 tokens/s), so the decode-rate ratio q4_0 / f32 is above 1 here.

The rounds are ``conftest.llamacpp_quant_ab``'s (both servers with ``--no-repack``, see there).
"""

from __future__ import annotations

import json

import pytest

from tests.compare_recompute import single_decode_median, single_ttft_median, step_tps

pytestmark = [pytest.mark.slow, pytest.mark.real_server]

MIN_EFFECT, EXPLAINED_FACTOR = 0.10, 1.25  # the attribution's documented thresholds


def test_deltas_match_the_requests(llamacpp_quant_ab):
    result = json.loads(llamacpp_quant_ab.compare_json.read_text())
    attribution = result["attribution"]
    a, b = llamacpp_quant_ab.round_a, llamacpp_quant_ab.round_b

    decode = attribution["single_request"]["decode_tps_ratio"]["value"]
    assert decode == pytest.approx(
        single_decode_median(b / "baseline") / single_decode_median(a / "baseline"), rel=1e-9
    )
    ttft = attribution["single_request"]["ttft_ms_ratio"]["value"]
    assert ttft == pytest.approx(single_ttft_median(b / "baseline") / single_ttft_median(a / "baseline"), rel=1e-9)
    for step in attribution["concurrent"]["common_steps"]:
        users = step["users"]
        assert step["output_tps_ratio"]["value"] == pytest.approx(
            step_tps(b / "ladder", users) / step_tps(a / "ladder", users), rel=1e-9
        )
    knee_a, knee_b = result["rounds"][0]["knee_users"], result["rounds"][1]["knee_users"]
    assert attribution["concurrent"]["knee_output_tps_ratio"]["value"] == pytest.approx(
        step_tps(b / "ladder", knee_b) / step_tps(a / "ladder", knee_a), rel=1e-9
    )
    assert decode > 1.0  # measured on this CPU build: q4_0 decodes faster (module docstring)
    assert result["rounds"][1]["change"].startswith("label.quant: f32 -> q4_0")


def _clear(ratio: dict) -> bool:
    return (
        ratio["value"] is not None
        and ratio["low"] is not None
        and ratio["high"] is not None
        and (ratio["low"] > 1 or ratio["high"] < 1)
        and abs(ratio["value"] - 1) >= MIN_EFFECT
    )


def test_attribution_follows_its_rules(llamacpp_quant_ab):
    result = json.loads(llamacpp_quant_ab.compare_json.read_text())
    attribution = result["attribution"]
    single = attribution["single_request"]
    s_clear = _clear(single["decode_tps_ratio"]) or _clear(single["ttft_ms_ratio"])
    knee = attribution["concurrent"]["knee_output_tps_ratio"]
    c_clear = _clear(knee)
    decode = single["decode_tps_ratio"]["value"]
    explained = (knee["value"] - 1) * (decode - 1) > 0 and max(
        knee["value"] / decode, decode / knee["value"]
    ) <= EXPLAINED_FACTOR
    if "client" in (result["rounds"][0]["bottleneck"], result["rounds"][1]["bottleneck"]):
        expected = "client"
    elif not s_clear and not c_clear:
        expected = "no_difference"
    elif not s_clear:
        expected = "batching_or_scheduling"
    elif c_clear and explained:
        expected = "compute_cost"
    else:
        expected = "mixed"
    assert attribution["kind"] == expected, attribution["evidence"]
    assert s_clear  # a 4-5x decode-rate difference is far beyond this run length's noise
    assert f"Attribution (round 2 vs round 1): {expected}" in llamacpp_quant_ab.stdout
    assert (llamacpp_quant_ab.round_a.parent / "report" / "index.html").stat().st_size > 2000
