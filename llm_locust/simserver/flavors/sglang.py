"""The SGLang flavour: SGLang scheduler log lines and ``sglang:`` metrics.

Formats copied from SGLang (2025 main): line prefix ``[%m-%d %H:%M:%S TP0] `` (``configure_logger``
in ``python/sglang/srt/utils/common.py``); ``Prefill batch, #new-seq: …`` when a step admits
requests and ``Decode batch, #running-req: …`` every interval while requests run (SGLang logs it
every ``decode_log_interval`` steps; ``scheduler_metrics_mixin.py``); the scheduler's startup
``max_total_num_tokens=…, chunked_prefill_size=…, max_prefill_tokens=…, max_running_requests=…,
context_len=…, available_cpu_mem=… GB``; metrics of ``python/sglang/srt/metrics/collector.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llm_locust.simserver.engine import StepPlan
from llm_locust.simserver.flavors.base import Flavor

LABELS = ("engine_type", "model_name", "pp_rank", "tp_rank")


def stamp(wall_s: float) -> str:
    """``[MM-DD HH:MM:SS TP0]`` in local time."""
    return f"[{time.strftime('%m-%d %H:%M:%S', time.localtime(wall_s))} TP0]"


class SglangCollector(Collector):
    """``sglang:`` gauges and counters read from the engine at scrape time."""

    def __init__(self, flavor: SglangFlavor) -> None:
        self.flavor = flavor

    def collect(self) -> Iterator[Metric]:
        engine, config = self.flavor.engine, self.flavor.config
        values = ["unified", config.model_name, "0", "0"]
        gauges = (
            ("sglang:num_running_reqs", "The number of running requests.", engine.num_running),
            ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", engine.num_waiting),
            ("sglang:token_usage", "The token usage.", engine.kv_usage_ratio),
            ("sglang:num_used_tokens", "The number of used tokens.", engine.kv_used_tokens),
            ("sglang:gen_throughput", "The generation throughput (token/s).", self.flavor.last_gen_tps),
            (
                "sglang:max_total_num_tokens",
                "Maximum total number of tokens in the KV cache pool.",
                config.kv_capacity_tokens,
            ),
        )
        for name, doc, value in gauges:
            family = GaugeMetricFamily(name, doc, labels=list(LABELS))
            family.add_metric(values, value)
            yield family
        counters = (
            ("sglang:prompt_tokens", "Number of prefill tokens processed.", engine.prompt_tokens_total),
            ("sglang:generation_tokens", "Number of generation tokens processed.", engine.generation_tokens_total),
            ("sglang:num_retracted_requests", "Total number of retracted requests.", engine.num_preemptions_total),
        )
        for name, doc, value in counters:
            counter = CounterMetricFamily(name, doc, labels=list(LABELS))
            counter.add_metric(values, value)
            yield counter


class SglangFlavor(Flavor):
    """SGLang: Prefill lines at admission, Decode lines every interval while busy."""

    name = "sglang"
    access_log = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.last_gen_tps = 0.0
        self._last: tuple[float | None, int] = (None, 0)  # (monotonic s, generation tokens) at the last interval

    def _line(self, wall_s: float, message: str) -> None:
        self.writer.write_line(f"{stamp(wall_s)} {message}")

    def startup(self, port: int) -> None:
        c, now = self.config, time.time()
        self._line(
            now,
            f"max_total_num_tokens={c.kv_capacity_tokens}, chunked_prefill_size="
            f"{c.max_num_batched_tokens}, max_prefill_tokens={c.max_num_batched_tokens},"
            f" max_running_requests={c.max_num_seqs}, context_len={c.max_model_len}, "
            "available_cpu_mem=12.00 GB",
        )
        self.writer.write_line(f"INFO:     Uvicorn running on http://{c.host}:{port} (Press CTRL+C to quit)")
        self._line(now, "The server is fired up and ready to roll!")

    def step_begun(self, plan: StepPlan, wall_s: float) -> None:
        if not plan.admitted:
            return
        engine = self.engine
        running_before = len(plan.batch) - len(plan.admitted)
        self._line(
            wall_s,
            f"Prefill batch, #new-seq: {len(plan.admitted)}, #new-token: "
            f"{plan.prefill_tokens}, #cached-token: {plan.cached_tokens}, token usage: "
            f"{engine.kv_usage_ratio:.2f}, #running-req: {running_before}, "
            f"#queue-req: {engine.num_waiting}, ",
        )

    def interval(self, now_mono: float) -> None:
        engine = self.engine
        last_t, last_tokens = self._last
        self._last = (now_mono, engine.generation_tokens_total)
        if last_t is None or now_mono <= last_t:
            return
        self.last_gen_tps = (engine.generation_tokens_total - last_tokens) / (now_mono - last_t)
        if engine.num_running == 0:
            return
        self._line(
            time.time(),
            f"Decode batch, #running-req: {engine.num_running}, #token: "
            f"{engine.kv_used_tokens}, token usage: {engine.kv_usage_ratio:.2f}, "
            f"cpu graph: False, gen throughput (token/s): "
            f"{self.last_gen_tps:.2f}, #queue-req: {engine.num_waiting}, ",
        )

    def collector(self) -> Collector:
        return SglangCollector(self)
