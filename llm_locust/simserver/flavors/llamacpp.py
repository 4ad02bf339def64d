"""The llama.cpp flavour: ``llama-server`` slot log lines, ``llamacpp:`` metrics and ``/props``.

Formats copied from llama.cpp (as vendored in llama-cpp-python 0.3.36, build b1-0c1e570, and
``shared/fixtures/llama-cpp-b1-0c1e570``): every line starts with the time since the server
started, ``"%d.%02d.%03d.%03d "`` (minutes, seconds, ms, µs; ``common/log.cpp``), then the level
letter; slot lines ``"slot %12.*s: id %2d | task %d | "`` + ``"processing task, is_child = 0"``
(``launch_slot_``), ``"prompt eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f
tokens per second)"`` and ``"       eval time = …"`` (``print_timing``), ``"stop processing:
n_tokens = %d, truncated = %d"`` (``release``); ``"srv  %12.*s: "`` + ``"initializing, n_slots =
%d, n_ctx_slot = %d, kv_unified = 'false'"`` at startup. Each running sequence holds one slot
(``--parallel`` = ``max_num_seqs``); requests beyond wait as deferred tasks (not logged at the
default verbosity). Metrics of ``tools/server/server-task.cpp``; ``/props`` ``total_slots``.

Each finished request's last chunk (the usage chunk, else the finish chunk; the body of a
non-streamed answer) carries llama.cpp's ``timings`` object (``server_slot_stats::to_json``):
``prompt_ms`` from the slot's admission to the first token, ``predicted_ms`` from the first
token to the last, ``predicted_n`` the tokens generated, ``predicted_per_second`` =
``(predicted_n - 1) / predicted_ms`` (the first token is free); the same values as the
``print_timing`` lines. The wait for a slot is in neither, as in llama.cpp.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from aiohttp import web
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llm_locust.simserver.engine import StepPlan
from llm_locust.simserver.flavors.base import Flavor, RequestTimes


def relative_stamp(seconds: float) -> str:
    """``M.SS.mmm.uuu`` since the server started.

    >>> relative_stamp(130.049123)
    '2.10.049.123'
    """
    micros = max(0, int(round(seconds * 1e6)))
    return f"{micros // 60_000_000}.{micros // 1_000_000 % 60:02d}.{micros // 1000 % 1000:03d}.{micros % 1000:03d}"


def llamacpp_timings_object(prompt_ms: float, prompt_n: int, predicted_ms: float, predicted_n: int) -> dict:
    """llama.cpp's ``timings`` (``server_slot_stats::to_json``; ``cache_n`` 0: no prompt cache).

    >>> llamacpp_timings_object(100.0, 20, 300.0, 4)["predicted_per_second"]
    10.0
    """
    steps = max(0, predicted_n - 1)
    return {
        "cache_n": 0,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": 1000 * prompt_n / prompt_ms if prompt_ms > 0 else 0.0,
        "predicted_n": predicted_n,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / steps if steps else 0.0,
        "predicted_per_second": 1000 * steps / predicted_ms if predicted_ms > 0 else 0.0,
    }


class LlamaCppCollector(Collector):
    """``llamacpp:`` metrics (no labels) read from the engine at scrape time."""

    def __init__(self, flavor: LlamaCppFlavor) -> None:
        self.flavor = flavor

    def collect(self) -> Iterator[Metric]:
        engine = self.flavor.engine
        for name, doc, value in (
            ("llamacpp:prompt_tokens", "Number of prompt tokens processed.", engine.prompt_tokens_total),
            ("llamacpp:tokens_predicted", "Number of generation tokens processed.", engine.generation_tokens_total),
            ("llamacpp:n_decode", "Total number of llama_decode() calls", self.flavor.steps),
        ):
            family = CounterMetricFamily(name, doc)
            family.add_metric([], value)
            yield family
        for name, doc, value in (
            ("llamacpp:requests_processing", "Number of requests processing.", engine.num_running),
            ("llamacpp:requests_deferred", "Number of requests deferred.", engine.num_waiting),
        ):
            gauge = GaugeMetricFamily(name, doc)
            gauge.add_metric([], value)
            yield gauge


class LlamaCppFlavor(Flavor):
    """llama.cpp: slot launch / print_timing / release lines, relative stamps, ``/props``."""

    name = "llamacpp"
    access_log = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.steps = 0
        self._slots: dict[str, int] = {}

    def _line(self, message: str, level: str = "I") -> None:
        stamp = relative_stamp(time.monotonic() - self.started_mono)
        self.writer.write_line(f"{stamp} {level} {message}")

    def _slot_line(self, func: str, times: RequestTimes, message: str) -> None:
        self._line(f"slot {func[:12]:>12}: id {times.slot:2d} | task {times.task} | {message}")

    def startup(self, port: int) -> None:
        c = self.config
        self._line("srv  llama_server: initializing ...")
        self._line(f"srv    load_model: loading model '/models/{c.model_name}.gguf'")
        self._line(
            f"srv    load_model: initializing, n_slots = {c.max_num_seqs}, n_ctx_slot = "
            f"{c.max_model_len}, kv_unified = 'false'"
        )
        self._line("srv  llama_server: model loaded")
        self._line(f"srv  llama_server: listening on http://{c.host}:{port}")

    def step_begun(self, plan: StepPlan, wall_s: float) -> None:
        self.steps += 1
        for request_id in plan.preempted:
            times = self.requests.get(request_id)
            if times is not None and self._slots.pop(request_id, None) is not None:
                self._slot_line(
                    "release",
                    times,
                    f"stop processing: n_tokens = {times.prompt_tokens + times.generated}, truncated = 0",
                )
        for request_id in plan.admitted:
            times = self.requests.get(request_id)
            if times is None:
                continue
            used = set(self._slots.values())
            times.slot = next(k for k in range(self.config.max_num_seqs + 1) if k not in used)
            self._slots[request_id] = times.slot
            self._slot_line("launch_slot_with_task", times, "processing task, is_child = 0")

    def step_ended(self, result, wall_s: float, finished: list[tuple[str, RequestTimes]]) -> None:
        for request_id, t in finished:
            admitted = t.admitted_s if t.admitted_s is not None else t.submitted_s
            first = t.first_token_s if t.first_token_s is not None else wall_s
            prompt_ms, eval_ms = 1000 * max(0.0, first - admitted), 1000 * max(0.0, wall_s - first)
            n_prompt, n_eval = t.prompt_tokens, max(1, t.generated)
            self.finals[request_id] = {"timings": llamacpp_timings_object(prompt_ms, n_prompt, eval_ms, t.generated)}
            self._slot_line(
                "print_timing",
                t,
                (
                    f"prompt eval time = {prompt_ms:10.2f} ms / {n_prompt:5d} tokens "
                    f"({prompt_ms / n_prompt:8.2f} ms per token, "
                    f"{1000 * n_prompt / max(prompt_ms, 1e-6):8.2f} tokens per second)"
                ),
            )
            self._slot_line(
                "print_timing",
                t,
                (
                    f"       eval time = {eval_ms:10.2f} ms / {n_eval:5d} tokens "
                    f"({eval_ms / n_eval:8.2f} ms per token, "
                    f"{1000 * n_eval / max(eval_ms, 1e-6):8.2f} tokens per second)"
                ),
            )
            self._slot_line(
                "print_timing", t, f"      total time = {prompt_ms + eval_ms:10.2f} ms / {n_prompt + n_eval:5d} tokens"
            )
            self._slot_line("release", t, f"stop processing: n_tokens = {n_prompt + t.generated - 1}, truncated = 0")
            self._slots.pop(request_id, None)

    def aborted(self, request_id: str, times: RequestTimes, wall_s: float) -> None:
        if self._slots.pop(request_id, None) is not None:
            self._line(f"srv          stop: cancel task, id_task = {times.task}", level="W")
            self._slot_line(
                "release", times, f"stop processing: n_tokens = {times.prompt_tokens + times.generated}, truncated = 0"
            )

    def collector(self) -> Collector:
        return LlamaCppCollector(self)

    def routes(self):
        return [("GET", "/props", self._props)]

    async def _props(self, request: web.Request) -> web.Response:
        c = self.config
        return web.json_response(
            {
                "default_generation_settings": {"n_ctx": c.max_model_len, "params": {}},
                "total_slots": c.max_num_seqs,
                "model_alias": c.model_name,
                "model_path": f"/models/{c.model_name}.gguf",
                "build_info": "b1-sim",
                "endpoint_slots": True,
                "endpoint_props": False,
                "endpoint_metrics": True,
            }
        )
