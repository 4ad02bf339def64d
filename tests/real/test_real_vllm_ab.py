"""The batching A/B against a real vLLM (CPU build, random-weight model): ``--max-num-seqs 2`` vs
``8``, one server at a time, the second round compared with the first by ``diagnose --compare-to``.

Expected from the servers' configuration, not from this project's code: one request decodes at the
same speed under either ceiling, while at 4-8 users the ceiling of 2 holds the batch at 2 and the
ceiling of 8 lets it grow, so the single-request delta is within the noise and the concurrent one
is clear -> ``batching_or_scheduling``. The deltas are recomputed from ``requests.csv``; the change
is read from the servers' startup logs (no label given). The rounds are
``conftest.vllm_seqs_ab``'s.
"""

from __future__ import annotations

import json

import pytest

from tests.compare_recompute import single_decode_median, step_tps_prorated

pytestmark = [pytest.mark.slow, pytest.mark.real_server]


def test_max_num_seqs_ab_is_batching_or_scheduling(vllm_seqs_ab):
    result = json.loads(vllm_seqs_ab.compare_json.read_text())
    attribution = result["attribution"]
    a, b = vllm_seqs_ab.round_a, vllm_seqs_ab.round_b

    decode = attribution["single_request"]["decode_tps_ratio"]["value"]
    assert decode == pytest.approx(
        single_decode_median(b / "baseline") / single_decode_median(a / "baseline"), rel=1e-9
    )
    for step in attribution["concurrent"]["common_steps"]:
        users = step["users"]
        assert step["output_tps_prorated_ratio"]["value"] == pytest.approx(
            step_tps_prorated(b / "ladder", users) / step_tps_prorated(a / "ladder", users), rel=1e-9
        )
    # The concurrent gain is the batch ceiling's: the knee moves up with the ceiling and the
    # throughput there is clearly higher. On this shared 2-core CPU the single-request decode rate
    # of the two vLLM processes has differed by up to x1.46 with non-overlapping intervals
    # (measured in CI: 14.0 vs 20.4 tokens/s, while the knee ratio was 2.00), and the rules then
    # rightly say "mixed" (a compute difference too); the batching part is named either way.
    # On 3 Dec 2026 this vLLM batched less well on this machine (2 users gave x1.74 of one, its
    # running gauge 1.78 of 2) and a CI run's knee ratio was 1.49995, "mixed" with decode 0.88:
    # the bound is x1.4, its interval still clear of 1.2
    knee = attribution["concurrent"]["knee_output_tps_prorated_ratio"]
    assert knee["value"] >= 1.4 and knee["low"] > 1.2, attribution["evidence"]
    assert result["rounds"][1]["knee_users"] > result["rounds"][0]["knee_users"], result["rounds"]
    assert attribution["kind"] in ("batching_or_scheduling", "mixed"), attribution["evidence"]
    ceiling = attribution["batch_ceiling"]  # the startup logs' 2 and 8, or the running max under a queue
    assert (ceiling["baseline"], ceiling["round"], ceiling["moved"]) == (2, 8, True), ceiling
    if attribution["kind"] == "batching_or_scheduling":
        assert abs(decode - 1.0) < 0.25, attribution["evidence"]
    else:  # mixed: the knee ratio split into the decode ratio and the batching factor
        shares = attribution["shares"]
        assert shares["compute_factor"] == pytest.approx(decode, rel=1e-9)
        assert shares["compute_factor"] * shares["batching_factor"] == pytest.approx(knee["value"], rel=1e-9)
    assert "server.batch_ceiling (max_num_seqs): 2 -> 8" in result["rounds"][1]["change"]
    assert f"Attribution (round 2 vs round 1): {attribution['kind']}" in vllm_seqs_ab.stdout
