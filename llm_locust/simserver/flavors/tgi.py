"""The TGI flavour: Text Generation Inference's router log lines, ``tgi_`` metrics and ``/info``.

Formats copied from TGI (2.x-3.x): tracing-subscriber text lines ``2024-05-07T12:39:22.141566Z
 INFO target: file:line: message`` in UTC; the launcher's ``Args { … }`` (``launcher/src/main.rs``);
``Setting max batch total tokens to N`` and ``Connected``; one ``Success`` per request with the
request span's ``total_time``, ``validation_time``, ``queue_time``, ``inference_time`` and
``time_per_token`` as Rust ``Duration`` debug strings (``router/src/server.rs``); gauges
``tgi_batch_current_size``, ``tgi_queue_size``, ``tgi_batch_current_max_tokens`` and histograms
``tgi_request_generated_tokens``, ``tgi_request_input_length``; ``GET /info`` fields of
``router/src/lib.rs`` ``Info``.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator

from aiohttp import web
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from llm_locust.simserver.flavors.base import Flavor, RequestTimes

SERVER_RS = "router/src/server.rs"


def iso(wall_s: float) -> str:
    """``2024-05-07T12:39:22.141566Z`` (UTC)."""
    return dt.datetime.fromtimestamp(wall_s, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rust_duration(seconds: float) -> str:
    """A duration as Rust's ``{:?}`` prints it.

    >>> rust_duration(1.5), rust_duration(0.023), rust_duration(21e-6), rust_duration(5e-8)
    ('1.5s', '23ms', '21µs', '50ns')
    """
    nanos = max(0, round(seconds * 1e9))
    for unit, size in (("s", 10**9), ("ms", 10**6), ("µs", 10**3)):
        if nanos >= size:
            whole, frac = divmod(nanos, size)
            digits = f"{frac:0{len(str(size)) - 1}d}".rstrip("0")
            return f"{whole}.{digits}{unit}" if digits else f"{whole}{unit}"
    return f"{nanos}ns"


class TgiCollector(Collector):
    """TGI's router gauges and request histograms."""

    def __init__(self, flavor: TgiFlavor) -> None:
        self.flavor = flavor

    def collect(self) -> Iterator[Metric]:
        engine = self.flavor.engine
        for name, doc, value in (
            ("tgi_batch_current_size", "Current batch size", engine.num_running),
            ("tgi_queue_size", "Current queue size", engine.num_waiting),
            ("tgi_batch_current_max_tokens", "Current batch max tokens", engine.kv_used_tokens),
        ):
            family = GaugeMetricFamily(name, doc)
            family.add_metric([], value)
            yield family
        for name, doc, (count, total) in (
            ("tgi_request_generated_tokens", "Generated tokens per request", self.flavor.generated),
            ("tgi_request_input_length", "Input tokens per request", self.flavor.inputs),
        ):
            histogram = HistogramMetricFamily(name, doc)
            histogram.add_metric([], buckets=[("+Inf", count)], sum_value=total)
            yield histogram


class TgiFlavor(Flavor):
    """TGI: startup Args, one Success line per finished request, ``/info``."""

    name = "tgi"
    access_log = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.generated = (0, 0)  # (requests, tokens)
        self.inputs = (0, 0)

    def _line(self, wall_s: float, target: str, message: str, level: str = "INFO") -> None:
        self.writer.write_line(f"{iso(wall_s)}  {level} {target}: {message}")

    def startup(self, port: int) -> None:
        c, now = self.config, time.time()
        self._line(
            now,
            "text_generation_launcher",
            f'Args {{ model_id: "{c.model_name}", revision: None, sharded: None, '
            f"max_concurrent_requests: 128, max_best_of: 2, max_stop_sequences: 4, "
            f"max_input_tokens: None, max_total_tokens: Some({c.max_model_len}), "
            f"waiting_served_ratio: 0.3, max_batch_prefill_tokens: "
            f"Some({c.max_num_batched_tokens}), max_batch_total_tokens: "
            f"Some({c.kv_capacity_tokens}), max_waiting_tokens: 20, max_batch_size: "
            f'Some({c.max_num_seqs}), hostname: "{c.host}", port: {port}, '
            "json_output: false }",
        )
        self._line(
            now,
            "text_generation_router::server",
            f"{SERVER_RS}:1651: Setting max batch total tokens to {c.kv_capacity_tokens}",
        )
        self._line(now, "text_generation_router::server", f"{SERVER_RS}:1889: Connected")

    def step_ended(self, result, wall_s: float, finished: list[tuple[str, RequestTimes]]) -> None:
        for _request_id, t in finished:
            admitted = t.admitted_s if t.admitted_s is not None else t.submitted_s
            inference = max(0.0, wall_s - admitted)
            queue = max(0.0, admitted - t.submitted_s)
            per_token = inference / max(1, t.generated)
            count, total = self.generated
            self.generated = (count + 1, total + t.generated)
            count, total = self.inputs
            self.inputs = (count + 1, total + t.prompt_tokens)
            span = (
                f"generate_stream{{parameters=GenerateParameters {{ max_new_tokens: "
                f"Some({t.generated}), details: false }} "
                f'total_time="{rust_duration(wall_s - t.submitted_s)}" '
                f'validation_time="{rust_duration(1e-4)}" queue_time="{rust_duration(queue)}" '
                f'inference_time="{rust_duration(inference)}" '
                f'time_per_token="{rust_duration(per_token)}" seed="None"}}'
            )
            self._line(wall_s, f"{span}: text_generation_router::server", f"{SERVER_RS}:637: Success")

    def collector(self) -> Collector:
        return TgiCollector(self)

    def routes(self):
        return [("GET", "/info", self._info)]

    async def _info(self, request: web.Request) -> web.Response:
        c = self.config
        return web.json_response(
            {
                "model_id": c.model_name,
                "model_sha": None,
                "model_dtype": "torch.float16",
                "model_device_type": "cpu",
                "model_pipeline_tag": "text-generation",
                "max_concurrent_requests": 128,
                "max_best_of": 2,
                "max_stop_sequences": 4,
                "max_input_tokens": c.max_model_len - 1,
                "max_total_tokens": c.max_model_len,
                "waiting_served_ratio": 0.3,
                "max_batch_total_tokens": c.kv_capacity_tokens,
                "max_waiting_tokens": 20,
                "max_batch_size": c.max_num_seqs,
                "validation_workers": 2,
                "version": "3.0.0-sim",
                "sha": None,
                "docker_label": None,
            }
        )
