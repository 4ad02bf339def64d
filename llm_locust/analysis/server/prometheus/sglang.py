"""SGLang's Prometheus names (``python/sglang/srt/metrics/collector.py``,
``SchedulerMetricsCollector`` and ``TokenizerMetricsCollector``, sglang main of 2025).

``sglang:num_running_reqs`` / ``sglang:num_queue_reqs`` summed over label sets (one per
data-parallel rank), ``sglang:token_usage`` (0-1) averaged, the token counters and
``sglang:num_retracted_requests_total`` (SGLang's preemption) turned into rates; the
``sglang:gen_throughput`` gauge stands in when the generation counter is absent.
Configuration: ``sglang:max_total_num_tokens`` (KV pool size, tokens).

Prefix cache (the radix cache): ``sglang:cached_tokens_total`` / ``sglang:prompt_tokens_total``
(``TokenizerMetricsCollector``: both counted per finished request, the cached tokens a part of its
prompt tokens; summed over label sets such as ``cache_source``); without the cached-tokens counter,
the ``sglang:cache_hit_rate`` gauge (``SchedulerMetricsCollector``, 0-1, set at each stats log).
"""

from __future__ import annotations

import pandas as pd

from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.server.families import ServerFamily
from llm_locust.analysis.server.prometheus.mapping import (
    Combine,
    FamilyMapping,
    PrefixCacheSpec,
    SampleKind,
    SeriesSpec,
    latest_value,
)

SPECS: tuple[SeriesSpec, ...] = (
    SeriesSpec(column="running", metrics=("sglang:num_running_reqs",)),
    SeriesSpec(column="waiting", metrics=("sglang:num_queue_reqs",)),
    SeriesSpec(column="kv_usage_ratio", metrics=("sglang:token_usage",), combine=Combine.MEAN),
    SeriesSpec(column="gen_tps", metrics=("sglang:generation_tokens_total",), kind=SampleKind.COUNTER),
    SeriesSpec(column="prompt_tps", metrics=("sglang:prompt_tokens_total",), kind=SampleKind.COUNTER),
    SeriesSpec(column="preemptions_per_s", metrics=("sglang:num_retracted_requests_total",), kind=SampleKind.COUNTER),
    SeriesSpec(column="gen_tps", metrics=("sglang:gen_throughput",)),  # when no counter
)


def config(samples: pd.DataFrame) -> ServerConfig:
    """KV pool size from ``sglang:max_total_num_tokens``."""
    value = latest_value(samples, "sglang:max_total_num_tokens")
    return ServerConfig(engine=ServerFamily.SGLANG.value).with_value(
        "kv_capacity_tokens", None if value is None else int(value), "/metrics sglang:max_total_num_tokens"
    )


PREFIX_CACHE = PrefixCacheSpec(
    hits=("sglang:cached_tokens_total",), queries=("sglang:prompt_tokens_total",), gauge="sglang:cache_hit_rate"
)

MAPPING = FamilyMapping(
    family=ServerFamily.SGLANG, prefixes=("sglang:",), specs=SPECS, config=config, prefix_cache=PREFIX_CACHE
)
