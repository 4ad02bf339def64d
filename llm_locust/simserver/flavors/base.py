"""What every engine flavour of the embedded server shares: request timing, hooks, defaults.

A flavour decides how the embedded server *looks*: its log lines (startup, periodic, per step,
per request), its ``/metrics`` names and any extra route (``/props``, ``/info``). The scheduler
is the same :class:`~llm_locust.simserver.engine.BatchEngine` whatever the flavour, so every
flavour has the same critical concurrency (its ``max_num_seqs``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from llm_locust.simserver.config import SimConfig
from llm_locust.simserver.engine import BatchEngine, SimRequest, StepPlan, StepResult
from llm_locust.simserver.log import LogWriter

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(slots=True)
class RequestTimes:
    """Wall-clock instants (Unix s) of one request inside the engine."""

    prompt_tokens: int
    submitted_s: float
    admitted_s: float | None = None
    first_token_s: float | None = None
    finished_s: float | None = None
    generated: int = 0
    slot: int = -1
    task: int = -1


class Flavor:
    """Base flavour: no lines, no metrics, no routes; tracks every request's timing.

    Parameters
    ----------
    config : SimConfig
    engine : BatchEngine
    writer : LogWriter
    started_s : float
        Wall clock of the server start, Unix s.
    """

    name = "base"
    access_log = False
    """Whether the uvicorn-style access line is written for every response."""

    def __init__(self, *, config: SimConfig, engine: BatchEngine, writer: LogWriter, started_s: float) -> None:
        self.config = config
        self.engine = engine
        self.writer = writer
        self.started_s = started_s
        self.started_mono = time.monotonic()
        self.requests: dict[str, RequestTimes] = {}
        self.tasks = 0
        self.finals: dict[str, dict] = {}
        """Extra top-level fields of a finished request's last chunk (or body), by request id,
        until the handler takes them (:meth:`final_fields`)."""

    # -- engine events (EngineListener) --------------------------------------------------
    def on_submit(self, request: SimRequest, wall_s: float) -> None:
        self.tasks += 1
        self.requests[request.request_id] = RequestTimes(
            prompt_tokens=request.prompt_tokens, submitted_s=wall_s, task=self.tasks
        )

    def on_step_begin(self, plan: StepPlan, wall_s: float) -> None:
        for request_id in plan.admitted:
            times = self.requests.get(request_id)
            if times is not None and times.admitted_s is None:
                times.admitted_s = wall_s
        self.step_begun(plan, wall_s)

    def on_step_end(self, result: StepResult, wall_s: float) -> None:
        finished = []
        for output in result.outputs:
            times = self.requests.get(output.request_id)
            if times is None:
                continue
            times.generated = output.token_index + 1
            if output.token_index == 0:
                times.first_token_s = wall_s
            if output.finish_reason is not None:
                times.finished_s = wall_s
                finished.append((output.request_id, times))
        self.step_ended(result, wall_s, finished)
        for request_id, _ in finished:
            self.requests.pop(request_id, None)

    def on_abort(self, request_id: str, wall_s: float) -> None:
        times = self.requests.pop(request_id, None)
        if times is not None:
            self.aborted(request_id, times, wall_s)

    def on_reject(self, request: SimRequest, wall_s: float) -> None:
        self.rejected(request, wall_s)

    def on_queue_timeout(self, request: SimRequest, waited_ms: float, wall_s: float) -> None:
        self.requests.pop(request.request_id, None)
        self.queue_timed_out(request, waited_ms, wall_s)

    # -- what a flavour overrides ---------------------------------------------------------
    def startup(self, port: int) -> None:
        """Write the startup lines (the listening port is known)."""

    def step_begun(self, plan: StepPlan, wall_s: float) -> None:
        """A step admitted and preempted requests (``plan``)."""

    def step_ended(self, result: StepResult, wall_s: float, finished: list[tuple[str, RequestTimes]]) -> None:
        """A step ended; ``finished`` are the requests that completed in it."""

    def aborted(self, request_id: str, times: RequestTimes, wall_s: float) -> None:
        """A request left before finishing (client gone)."""

    def rejected(self, request: SimRequest, wall_s: float) -> None:
        """A request was refused because the waiting queue is full."""

    def queue_timed_out(self, request: SimRequest, waited_ms: float, wall_s: float) -> None:
        """A request was dropped after waiting ``waited_ms`` (ms) in the queue (``queue_timeout_ms``)."""

    def interval(self, now_mono: float) -> None:
        """Called every ``log_stats_interval_s`` (monotonic s): periodic lines."""

    def collector(self) -> Collector | None:
        """The ``/metrics`` collector (None: no metrics)."""
        return None

    def routes(self) -> list[tuple[str, str, Handler]]:
        """Extra ``(method, path, handler)`` routes."""
        return []

    def final_fields(self, request_id: str) -> dict:
        """Take the extra fields of a finished request's last chunk (llama.cpp's ``timings``);
        {} when the flavour sends none."""
        return self.finals.pop(request_id, {})

    # -- shared ---------------------------------------------------------------------------
    def registry(self) -> CollectorRegistry:
        """A fresh registry with only this flavour's collector (no process metrics)."""
        registry = CollectorRegistry(auto_describe=False)
        collector = self.collector()
        if collector is not None:
            registry.register(collector)
        return registry

    async def run_intervals(self) -> None:
        """Call :meth:`interval` on an absolute schedule until cancelled."""
        loop = asyncio.get_running_loop()
        next_t = loop.time()
        self.interval(next_t)
        while True:
            next_t += self.config.log_stats_interval_s
            await asyncio.sleep(max(0.0, next_t - loop.time()))
            self.interval(loop.time())
