"""llama.cpp ``llama-server``'s Prometheus names (``tools/server/server-task.cpp``, the
``/metrics`` handler; checked against llama-server b1-0c1e570's ``/metrics`` in
``shared/fixtures/llama-cpp-b1-0c1e570``).

Running is ``llamacpp:requests_processing`` (busy slots), waiting ``llamacpp:requests_deferred``
(tasks deferred for want of a free slot); ``llamacpp:tokens_predicted_total`` and
``llamacpp:prompt_tokens_total`` are turned into rates; ``llamacpp:kv_cache_usage_ratio`` (older
builds only) is the KV usage. The slot count is not a metric: it comes from ``GET /props``
(``total_slots``) or the startup log (``n_slots``).

Prefix cache (each slot's prompt cache): ``llamacpp:prompt_tokens_cached_total`` ("Number of
prompt tokens reused from the cache") over all prompt tokens, which are
``llamacpp:prompt_tokens_total`` ("excluding cached tokens") + the cached ones
(``server_task_result_metrics::to_metrics``).
"""

from __future__ import annotations

from llm_locust.analysis.server.families import ServerFamily
from llm_locust.analysis.server.prometheus.mapping import (
    Combine,
    FamilyMapping,
    PrefixCacheSpec,
    SampleKind,
    SeriesSpec,
)

SPECS: tuple[SeriesSpec, ...] = (
    SeriesSpec(column="running", metrics=("llamacpp:requests_processing",)),
    SeriesSpec(column="waiting", metrics=("llamacpp:requests_deferred",)),
    SeriesSpec(column="kv_usage_ratio", metrics=("llamacpp:kv_cache_usage_ratio",), combine=Combine.MEAN),
    SeriesSpec(column="gen_tps", metrics=("llamacpp:tokens_predicted_total",), kind=SampleKind.COUNTER),
    SeriesSpec(column="prompt_tps", metrics=("llamacpp:prompt_tokens_total",), kind=SampleKind.COUNTER),
)

PREFIX_CACHE = PrefixCacheSpec(
    hits=("llamacpp:prompt_tokens_cached_total",),
    queries=("llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total"),
)

MAPPING = FamilyMapping(family=ServerFamily.LLAMACPP, prefixes=("llamacpp:",), specs=SPECS, prefix_cache=PREFIX_CACHE)
