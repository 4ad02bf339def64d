"""The prefix-cache hit ratio per window, read by the Prometheus mapping of each family.

The vLLM figures come from two real scrapes (``data/README.md``): the expected ratio is worked
out by hand from the numbers in them and matches what vLLM's own stats line printed then.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from llm_locust.analysis.server.prometheus import metrics_config, prefix_cache_steps
from llm_locust.master.scraper import samples_to_rows

DATA = Path(__file__).parent / "data"
SOURCE = "http://127.0.0.1:8077/metrics"
WINDOW = pd.DataFrame({"window_start_s": [0.0], "window_end_s": [10.0]})


def scrapes(*texts: tuple[float, str], source: str = SOURCE) -> pd.DataFrame:
    rows = [row for t_s, text in texts for row in samples_to_rows(text, t_s=t_s, source=source)]
    return pd.DataFrame(rows, columns=["t_s", "source", "metric", "labels", "value"])


def test_vllm_hit_ratio_from_two_real_scrapes_equals_vllms_own_counters_and_log():
    before = (DATA / "vllm_cpu_0.32_prefix_before.txt").read_text()
    after = (DATA / "vllm_cpu_0.32_prefix_after.txt").read_text()

    result = prefix_cache_steps(scrapes((0.0, before), (5.0, after)), WINDOW)

    # 4 prompts of 487 + 491 + 487 + 490 = 1955 tokens sharing their first 300 words: the 3 after
    # the first each found 3 whole 128-token blocks cached, 3 x 384 = 1152 (vLLM logged 58.9 %)
    assert result["prefix_cache_queried_tokens"].iloc[0] == 487 + 491 + 487 + 490
    assert result["prefix_cache_hit_ratio"].iloc[0] == pytest.approx(3 * 3 * 128 / 1955)
    assert round(result["prefix_cache_hit_ratio"].iloc[0] * 100, 1) == 58.9
    assert metrics_config(scrapes((5.0, after))).prefix_caching is True


def test_vllm_without_prefix_caching_looks_nothing_up_which_is_a_ratio_of_zero():
    before = (DATA / "vllm_cpu_0.32_no_prefix_caching_before.txt").read_text()
    after = (DATA / "vllm_cpu_0.32_no_prefix_caching_after.txt").read_text()
    samples = scrapes((0.0, before), (5.0, after))

    result = prefix_cache_steps(samples, WINDOW)

    # 1955 prompt tokens prefilled, none looked up: none came from a cache
    assert result["prefix_cache_queried_tokens"].iloc[0] == 0
    assert result["prefix_cache_hit_ratio"].iloc[0] == 0.0
    assert metrics_config(samples).prefix_caching is False
    idle = prefix_cache_steps(scrapes((0.0, before), (5.0, before)), WINDOW)  # no prompt at all
    assert idle["prefix_cache_hit_ratio"].isna().all()


def test_the_window_reads_the_last_scrape_at_or_before_each_end():
    before = (DATA / "vllm_cpu_0.32_prefix_before.txt").read_text()
    after = (DATA / "vllm_cpu_0.32_prefix_after.txt").read_text()
    samples = scrapes((0.0, before), (5.0, after))
    windows = pd.DataFrame({"window_start_s": [0.0, 5.0, -5.0], "window_end_s": [4.9, 10.0, 10.0]})

    result = prefix_cache_steps(samples, windows)

    # [0, 4.9): one scrape, nothing looked up; [5, 10): after the load; [-5, ...): no scrape before it
    assert result["prefix_cache_queried_tokens"].tolist()[:2] == [0.0, 0.0]
    assert result["prefix_cache_hit_ratio"].isna().all()


def test_llamacpp_counts_cached_tokens_outside_its_prompt_tokens():
    first = "llamacpp:prompt_tokens_total 169\nllamacpp:prompt_tokens_cached_total 3255\n"
    second = "llamacpp:prompt_tokens_total 269\nllamacpp:prompt_tokens_cached_total 3555\n"

    result = prefix_cache_steps(scrapes((0.0, first), (5.0, second)), WINDOW)

    # 100 tokens processed + 300 reused = 400 looked up ("excluding cached tokens")
    assert result["prefix_cache_queried_tokens"].iloc[0] == 400
    assert result["prefix_cache_hit_ratio"].iloc[0] == pytest.approx(300 / 400)


def test_sglang_counters_summed_over_cache_sources_else_its_gauge_time_averaged():
    labels = 'model_name="m",cache_source'
    first = (
        'sglang:prompt_tokens_total{model_name="m"} 1000\n'
        f'sglang:cached_tokens_total{{{labels}="device"}} 100\nsglang:cached_tokens_total{{{labels}="host"}} 0\n'
    )
    second = (
        'sglang:prompt_tokens_total{model_name="m"} 3000\n'
        f'sglang:cached_tokens_total{{{labels}="device"}} 900\nsglang:cached_tokens_total{{{labels}="host"}} 200\n'
    )
    result = prefix_cache_steps(scrapes((0.0, first), (5.0, second)), WINDOW)
    assert result["prefix_cache_hit_ratio"].iloc[0] == pytest.approx((800 + 200) / 2000)

    gauge = scrapes(
        (0.0, 'sglang:cache_hit_rate{model_name="m"} 0.2\n'), (4.0, 'sglang:cache_hit_rate{model_name="m"} 0.7\n')
    )
    result = prefix_cache_steps(gauge, WINDOW)
    assert result["prefix_cache_hit_ratio"].iloc[0] == pytest.approx((0.2 * 4 + 0.7 * 6) / 10)
    assert math.isnan(result["prefix_cache_queried_tokens"].iloc[0])


def test_a_counter_that_went_down_or_a_family_without_counters_gives_no_figure():
    up = 'vllm:prefix_cache_queries_total{engine="0"} 500\nvllm:prefix_cache_hits_total{engine="0"} 100\n'
    restarted = 'vllm:prefix_cache_queries_total{engine="0"} 20\nvllm:prefix_cache_hits_total{engine="0"} 0\n'
    assert prefix_cache_steps(scrapes((0.0, up), (5.0, restarted)), WINDOW)["prefix_cache_hit_ratio"].isna().all()

    tgi = scrapes((0.0, "tgi_queue_size 1\n"), (5.0, "tgi_queue_size 2\n"))
    assert prefix_cache_steps(tgi, WINDOW).isna().all().all()
    assert prefix_cache_steps(None, WINDOW).isna().all().all()


def test_two_replicas_pool_their_counters():
    one = (
        'vllm:prefix_cache_queries_total{engine="0"} 0\nvllm:prefix_cache_hits_total{engine="0"} 0\n',
        'vllm:prefix_cache_queries_total{engine="0"} 1000\nvllm:prefix_cache_hits_total{engine="0"} 0\n',
    )
    two = (
        'vllm:prefix_cache_queries_total{engine="0"} 0\nvllm:prefix_cache_hits_total{engine="0"} 0\n',
        'vllm:prefix_cache_queries_total{engine="0"} 1000\nvllm:prefix_cache_hits_total{engine="0"} 500\n',
    )
    samples = pd.concat(
        [scrapes((0.0, one[0]), (5.0, one[1]), source="http://a/metrics"),
         scrapes((0.0, two[0]), (5.0, two[1]), source="http://b/metrics")]
    )  # fmt: skip
    assert prefix_cache_steps(samples, WINDOW)["prefix_cache_hit_ratio"].iloc[0] == pytest.approx(500 / 2000)
