"""The generic flavour: a server no built-in parser knows ("DeepInfer"), read by a user format.

Every interval while busy it logs ``2025-11-30 12:23:03.123 INFO scheduler: batch size=2,
wait=12.5ms, queue=3`` (the batch running, the mean queue wait of the requests admitted in the
interval, the requests queued), at startup ``… INFO config: max_batch_size=2, kv_tokens=65536``
(with static batching followed by ``, batching=static, max_batch_wait_ms=250``), with static
batching one line per batch as it starts, ``… INFO batcher: batch started size=4
wait=250.0ms queue=3`` (the batch's size, how long the free batcher held it open to fill, the
requests left waiting), ``… WARN request rejected: queue full`` per rejection (503), ``… WARN
request req-7 timed out in queue after 2000.3ms`` per request dropped by ``queue_timeout_ms``
(504), and exposes
``deepinfer_batch_size``, ``deepinfer_queue_size`` (gauges),
``deepinfer_generated_tokens_total`` (counter) and ``deepinfer_max_batch_size``. The format file
that reads it is :data:`FORMAT_TOML`.

It also speaks its own API, ``POST /generate`` (:mod:`llm_locust.simserver.generic_api`), whose
last line or body carries ``timings``: ``queue_ms`` (arrival -> admission), ``prefill_ms``
(admission -> first token), ``decode_ms`` (first token -> last), ms.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llm_locust.simserver.engine import StepPlan
from llm_locust.simserver.flavors.base import Flavor, RequestTimes

FORMAT_TOML = r"""# Reads the embedded server's generic flavour ("DeepInfer")
name = "deepinfer"

[log]
timestamp = '^(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)'
timestamp_format = "iso"

[[log.series]]
pattern = 'batch size=(?P<running>\d+), wait=[\d.]+ms, queue=(?P<waiting>\d+)'

[[log.batches]]
pattern = 'batch started size=(?P<batch_size>\d+) wait=(?P<batch_wait_ms>[\d.]+)ms queue=(?P<queue>\d+)'

[[log.config]]
pattern = 'max_batch_size=(?P<batch_ceiling>\d+), kv_tokens=(?P<kv_capacity_tokens>\d+)'
batch_ceiling_name = "max_batch_size"

[[log.config]]
pattern = 'max_batch_wait_ms=(?P<batch_wait_max_ms>[\d.]+)'

[[log.errors]]
kind = "queue_full"
pattern = 'request rejected: queue full'

[[log.errors]]
kind = "timeout"
pattern = 'timed out in queue'

[metrics]
running = "deepinfer_batch_size"
waiting = "deepinfer_queue_size"
gen_tps = { name = "deepinfer_generated_tokens_total", kind = "counter" }

[metrics.config]
batch_ceiling = "deepinfer_max_batch_size"
"""
"""A user format file that reads this flavour."""


def local_stamp(wall_s: float) -> str:
    """``YYYY-MM-DD HH:MM:SS.mmm`` in local time."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wall_s)) + f".{int(wall_s * 1000) % 1000:03d}"


class GenericCollector(Collector):
    """``deepinfer_`` metrics read from the engine at scrape time."""

    def __init__(self, flavor: GenericFlavor) -> None:
        self.flavor = flavor

    def collect(self) -> Iterator[Metric]:
        engine, config = self.flavor.engine, self.flavor.config
        for name, doc, value in (
            ("deepinfer_batch_size", "Sequences in the batch", engine.num_running),
            ("deepinfer_queue_size", "Requests queued", engine.num_waiting),
            ("deepinfer_max_batch_size", "Batch ceiling", config.max_num_seqs),
        ):
            family = GaugeMetricFamily(name, doc)
            family.add_metric([], value)
            yield family
        counter = CounterMetricFamily("deepinfer_generated_tokens", "Tokens generated")
        counter.add_metric([], engine.generation_tokens_total)
        yield counter


class GenericFlavor(Flavor):
    """ "DeepInfer": one ``batch size=…, wait=…ms, queue=…`` line per interval while busy."""

    name = "generic"
    access_log = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._waits: list[float] = []

    def _line(self, wall_s: float, message: str, level: str = "INFO") -> None:
        self.writer.write_line(f"{local_stamp(wall_s)} {level} {message}")

    def startup(self, port: int) -> None:
        c = self.config
        static = f", batching=static, max_batch_wait_ms={c.batch_wait_ms:g}" if c.batching == "static" else ""
        self._line(time.time(), f"config: max_batch_size={c.max_num_seqs}, kv_tokens={c.kv_capacity_tokens}{static}")
        self._line(time.time(), f"server: listening on http://{c.host}:{port}")

    def step_begun(self, plan: StepPlan, wall_s: float) -> None:
        if plan.batch_wait_ms is not None:
            self._line(
                wall_s,
                f"batcher: batch started size={len(plan.batch)} "
                f"wait={plan.batch_wait_ms:.1f}ms queue={self.engine.num_waiting}",
            )
        for request_id in plan.admitted:
            times = self.requests.get(request_id)
            if times is not None:
                self._waits.append(wall_s - times.submitted_s)

    def step_ended(self, result, wall_s: float, finished: list[tuple[str, RequestTimes]]) -> None:
        for request_id, t in finished:
            admitted = t.admitted_s if t.admitted_s is not None else t.submitted_s
            first = t.first_token_s if t.first_token_s is not None else wall_s
            self.finals[request_id] = {
                "timings": {
                    "queue_ms": 1000 * max(0.0, admitted - t.submitted_s),
                    "prefill_ms": 1000 * max(0.0, first - admitted),
                    "decode_ms": 1000 * max(0.0, wall_s - first),
                }
            }

    def rejected(self, request, wall_s: float) -> None:
        self._line(wall_s, "request rejected: queue full", level="WARN")

    def queue_timed_out(self, request, waited_ms: float, wall_s: float) -> None:
        self._line(wall_s, f"request {request.request_id} timed out in queue after {waited_ms:.1f}ms", level="WARN")

    def interval(self, now_mono: float) -> None:
        engine = self.engine
        waits, self._waits = self._waits, []
        if engine.num_running == 0 and not waits:
            return
        wait_ms = 1000 * sum(waits) / len(waits) if waits else 0.0
        self._line(
            time.time(), f"scheduler: batch size={engine.num_running}, wait={wait_ms:.1f}ms, queue={engine.num_waiting}"
        )

    def collector(self) -> Collector:
        return GenericCollector(self)
