"""Prefix caching end to end against the embedded server, the mirror of
``tests/real/test_real_vllm_prefix.py``: one shared-prefix workload against an embedded server
with ``--no-enable-prefix-caching`` and against one with ``--enable-prefix-caching`` (both
started once for the module), then ``llm-locust compare`` of the two (~45 s in all on 2 cores).

Expected values come from the inputs and the server's own counters, not from this project's
analysis: every prompt is ``--input-tokens`` long and starts with the same ``base + K`` tokens
(``--shared-prefix-tokens K``; ``base`` = the calibrated start, template included), and a vLLM
prefix cache reuses only the whole KV blocks of that common start, so every request after the
first finds ``(base + K) // block * block`` of its tokens cached. K is chosen so that the
count holds wherever the template's own tokens sit (``K + 1 .. K + base`` floor to one block).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pandas as pd
import pytest

from tests.compare_recompute import step_requests
from tests.e2e.conftest import embedded_server
from tests.prefix_rounds import PrefixRounds, Round, compare_rounds, prefix_round, round_steps, round_verdict

pytestmark = pytest.mark.slow

INPUT_TOKENS = 512
SHARED_PREFIX_TOKENS = 448
BLOCK_TOKENS = 16
# 1 ms of prefill per prompt token against a 20 ms decode step: the prefill is most of the TTFT
SERVER_FLAGS = ["--prefill-ms-per-token", "1", "--block-size", str(BLOCK_TOKENS)]


RUN_ARGS = [
    "--timeout-s", "60", "--ladder", "1,2", "--dwell-s", "6", "--warmup-s", "1", "--max-tokens", "8",
    "--input-tokens", str(INPUT_TOKENS), "--shared-prefix-tokens", str(SHARED_PREFIX_TOKENS),
]  # fmt: skip


def _round(url: str, run_dir: Path) -> Round:
    return prefix_round(url, run_dir, RUN_ARGS, timeout_s=180)


@pytest.fixture(scope="module")
def rounds(tmp_path_factory) -> PrefixRounds:
    tmp = tmp_path_factory.mktemp("sim-prefix")
    with embedded_server(tmp_path_factory, max_num_seqs=8, extra=[*SERVER_FLAGS, "--no-enable-prefix-caching"]) as url:
        off = _round(url, tmp / "no-caching")
    with embedded_server(tmp_path_factory, max_num_seqs=8, extra=[*SERVER_FLAGS, "--enable-prefix-caching"]) as url:
        on = _round(url, tmp / "caching")
    return compare_rounds(off, on, tmp / "compare", timeout_s=120)


def test_hit_ratio_per_step_is_the_share_of_whole_blocks_the_prompts_share(rounds):
    on = rounds.on
    requests = pd.read_csv(on.run_dir / "requests.csv")
    assert (requests["prompt_tokens"] == INPUT_TOKENS).all()
    base = json.loads((on.run_dir / "run.json").read_text())["workload"]["input_calibration"]["base_tokens"]
    expected = (base + SHARED_PREFIX_TOKENS) // BLOCK_TOKENS * BLOCK_TOKENS / INPUT_TOKENS  # 448 / 512
    assert expected == pytest.approx(SHARED_PREFIX_TOKENS / INPUT_TOKENS, abs=BLOCK_TOKENS / INPUT_TOKENS)
    steps = round_steps(on)
    assert len(steps) == 2
    for ratio in steps["prefix_cache_hit_ratio"]:
        assert ratio == pytest.approx(expected, abs=0.005), steps.T
    # the server's own figure over the whole run: all requests (the first request and the
    # calibration probes before the load included) looked up their prompt tokens
    queries, hits = on.delta["vllm:prefix_cache_queries_total"], on.delta["vllm:prefix_cache_hits_total"]
    assert queries == on.delta["vllm:prompt_tokens_total"] >= requests["prompt_tokens"].sum()
    assert hits <= expected * queries
    assert (steps["prefix_cache_queried_tokens"] <= queries).all()

    off = rounds.off
    assert off.delta["vllm:prompt_tokens_total"] > 0 and off.delta["vllm:prefix_cache_queries_total"] == 0, off.delta
    assert off.delta["vllm:prefix_cache_hits_total"] == 0
    assert (round_steps(off)["prefix_cache_hit_ratio"] == 0).all() and (
        round_steps(off)["prefix_cache_queried_tokens"] == 0
    ).all()


def test_the_prefix_cache_note_and_its_recommendation_only_without_caching(rounds):
    def rule(r: Round) -> dict:
        return next(e for e in round_verdict(r)["evidence"] if e["rule"] == "prefix_cache_unused")

    off, on = rule(rounds.off), rule(rounds.on)
    assert off["holds"] and not on["holds"], (off, on)
    assert off["values"]["prefix_caching_configured"] == 0  # vllm:cache_config_info enable_prefix_caching
    assert off["values"]["shared_prefix_tokens"] == SHARED_PREFIX_TOKENS
    flags = [r["flag"] for r in round_verdict(rounds.off)["recommendations"] if r["because"] == "prefix_cache_unused"]
    assert flags == ["--enable-prefix-caching"]
    assert not [r for r in round_verdict(rounds.on)["recommendations"] if r["because"] == "prefix_cache_unused"]
    assert "evidence [prefix_cache_unused]" in rounds.off.stdout and "[--enable-prefix-caching]" in rounds.off.stdout
    assert "prefix_cache_unused" in (rounds.off.run_dir / "report" / "summary.md").read_text()
    assert "prefix_cache_unused" not in rounds.on.stdout


def test_compare_attributes_the_ttft_difference_to_the_prefix_cache(rounds):
    attribution = json.loads(rounds.compare_json.read_text())["attribution"]
    ttft = attribution["single_request"]["ttft_ms_ratio"]["value"]
    one_user = [statistics.median(float(r["ttft_ms"]) for r in step_requests(x.run_dir, 1)[0])
                for x in (rounds.off, rounds.on)]  # fmt: skip
    assert ttft == pytest.approx(one_user[1] / one_user[0], rel=1e-9)
    # prefill 512 ms -> 64 ms beside a ~21 ms step: the TTFT falls to well under half
    assert ttft < 0.5, attribution["evidence"]
    # the embedded server's decode is the same with or without the cache: the attribution is one kind
    assert attribution["kind"] == "prefix_cache", attribution["evidence"]
    assert "Attribution (round 2 vs round 1): prefix_cache" in rounds.compare_stdout
    hits = attribution["prefix_cache_hit_ratio"]
    assert hits["baseline"] == 0 and hits["round"] == pytest.approx(
        round_steps(rounds.on)["prefix_cache_hit_ratio"].mean(), abs=0.01
    )
