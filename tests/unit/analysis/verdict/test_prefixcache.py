"""The note on a shared-prefix workload whose prefix cache hit nothing, and what it recommends."""

from __future__ import annotations

import math

import pandas as pd

from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.verdict import RULES
from llm_locust.analysis.verdict.prefixcache import SharedPrefix, prefix_cache_recommendations, prefix_cache_unused

SHARED = SharedPrefix.from_workload({"input_tokens": 256, "shared_prefix_tokens": 192, "max_tokens": 16})


def steps(ratios, queried=(5120.0, 10240.0)) -> pd.DataFrame:
    return pd.DataFrame({"target_users": [1.0, 2.0], "prefix_cache_hit_ratio": ratios,
                         "prefix_cache_queried_tokens": list(queried)})  # fmt: skip


def test_shared_prefix_is_known_from_the_workload_only():
    assert SHARED == SharedPrefix(shared_prefix_tokens=192, input_tokens=256, session_turns=0)
    assert SharedPrefix.from_workload({"session_turns": 4}).session_turns == 4
    assert SharedPrefix.from_workload({"input_tokens": 256, "shared_prefix_tokens": 0}) is None
    assert SharedPrefix.from_workload({"session_turns": 1}) is None
    assert SharedPrefix.from_workload(None) is None


def test_holds_when_every_step_hits_next_to_nothing_and_recommends_the_vllm_flag():
    config = ServerConfig(engine="vllm", prefix_caching=False, sources={"prefix_caching": "server.log line 18"})
    ev = prefix_cache_unused(steps([0.003, 0.0]), SHARED, config, replicas=1, rules=RULES)

    assert ev.holds
    assert ev.values["prefix_cache_hit_ratio_max"] == 0.003
    assert ev.values["prefix_cache_queried_tokens"] == 5120 + 10240
    assert "their first 192 of 256 tokens" in ev.text and "0.3%" in ev.text
    assert "prefix caching is off (server.log line 18)" in ev.text
    (rec,) = prefix_cache_recommendations(ev, "vllm")
    assert rec.flag == "--enable-prefix-caching" and rec.because == "prefix_cache_unused"


def test_a_server_that_looked_nothing_up_says_so():
    # vLLM --no-enable-prefix-caching counts no queries: the mapping gives ratio 0 with 0 looked up
    config = ServerConfig(engine="vllm", prefix_caching=False)
    ev = prefix_cache_unused(steps([0.0, 0.0], queried=(0.0, 0.0)), SHARED, config, replicas=1, rules=RULES)
    assert ev.holds and "looked up none of its prompt tokens in a prefix cache" in ev.text


def test_several_replicas_add_session_affinity_and_a_cache_on_by_config_is_not_asked_for_again():
    config = ServerConfig(engine="vllm", prefix_caching=True)
    ev = prefix_cache_unused(steps([0.01, 0.02]), SHARED, config, replicas=2, rules=RULES)

    assert ev.holds and "2 replicas serve" in ev.text and "only whole blocks are reused" in ev.text
    (rec,) = prefix_cache_recommendations(ev, "vllm")
    assert "session affinity" in rec.flag


def test_does_not_hold_with_hits_without_counters_or_without_a_shared_prefix():
    config = ServerConfig(engine="vllm")
    hits = prefix_cache_unused(steps([0.0, 0.49]), SHARED, config, replicas=1, rules=RULES)
    assert not hits.holds and hits.values["prefix_cache_hit_ratio_max"] == 0.49
    blind = prefix_cache_unused(steps([math.nan, math.nan]), SHARED, config, replicas=1, rules=RULES)
    assert not blind.holds and "no prefix-cache counters" in blind.text
    distinct = prefix_cache_unused(steps([0.0, 0.0]), None, config, replicas=1, rules=RULES)
    assert not distinct.holds
    assert prefix_cache_recommendations(distinct, "vllm") == ()
