"""The asyncio driver: runs the pure :class:`BatchEngine` in real time and routes its tokens.

One task loops ``begin_step`` -> sleep the step time -> ``end_step`` -> deliver each token to
its request's queue. Sleeps follow an absolute schedule (``next_t += step``; sleep
``next_t - now``), so event-loop overhead does not accumulate over steps; after more than
:data:`MAX_LAG_S` behind (a stalled loop) the schedule restarts from now instead of bursting.
While the engine is idle the task waits on an ``asyncio.Event`` set by :meth:`submit` (no busy
loop), and the schedule restarts at the next request. While a static batch fills
(``BatchEngine.fill_deadline_s``) it waits on the same event, at most until that deadline.
Requests are stamped with the loop clock (``arrival_s``) when submitted.

An optional listener (an engine flavour's log writer, ``flavors/``) is told of every
submission, rejection (queue full), step begin and end, and abort, with the wall-clock time (Unix s).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Protocol

from llm_locust.simserver.engine import (
    BatchEngine,
    FinishReason,
    QueueFullError,
    SimRequest,
    StepPlan,
    StepResult,
    TokenOutput,
)

MAX_LAG_S = 0.25
"""How far behind its schedule the step loop may run before it resets the schedule, s."""


class EngineListener(Protocol):
    """What a listener of :class:`EngineDriver` implements (all times wall clock, Unix s)."""

    def on_submit(self, request: SimRequest, wall_s: float) -> None: ...

    def on_step_begin(self, plan: StepPlan, wall_s: float) -> None: ...

    def on_step_end(self, result: StepResult, wall_s: float) -> None: ...

    def on_abort(self, request_id: str, wall_s: float) -> None: ...

    def on_reject(self, request: SimRequest, wall_s: float) -> None: ...

    def on_queue_timeout(self, request: SimRequest, waited_ms: float, wall_s: float) -> None: ...


class EngineDriver:
    """Owns the engine's clock and the per-request token queues.

    Parameters
    ----------
    engine : BatchEngine
        The engine to drive (also read by metrics and the stats logger).
    listener : EngineListener, optional
        Told of submissions, steps and aborts.
    """

    def __init__(self, *, engine: BatchEngine, listener: EngineListener | None = None) -> None:
        self.engine = engine
        self.listener = listener
        self._queues: dict[str, asyncio.Queue[TokenOutput]] = {}
        self._wake = asyncio.Event()

    def submit(self, request: SimRequest) -> asyncio.Queue[TokenOutput]:
        """Add ``request`` to the engine; returns the queue its :class:`TokenOutput` s arrive on.

        Raises
        ------
        QueueFullError
            From :meth:`BatchEngine.add_request` when the waiting queue is full.
        ValueError
            From :meth:`BatchEngine.add_request` for impossible token counts.
        """
        request.arrival_s = asyncio.get_running_loop().time()
        try:
            self.engine.add_request(request)
        except QueueFullError:
            if self.listener is not None:
                self.listener.on_reject(request, time.time())
            raise
        queue: asyncio.Queue[TokenOutput] = asyncio.Queue()
        self._queues[request.request_id] = queue
        self._wake.set()
        if self.listener is not None:
            self.listener.on_submit(request, time.time())
        return queue

    def abort(self, request_id: str) -> bool:
        """Remove a request from the engine and forget its queue (client gone); True if it was
        still waiting or running."""
        self._queues.pop(request_id, None)
        removed = self.engine.abort_request(request_id)
        if removed and self.listener is not None:
            self.listener.on_abort(request_id, time.time())
        return removed

    def _expire(self, now_s: float) -> None:
        """Drop the requests that timed out in the queue; each gets one
        output (``token_index`` -1, ``finish_reason`` ABORT) on its queue."""
        for request in self.engine.expire_waiting(now_s):
            if self.listener is not None:
                self.listener.on_queue_timeout(request, 1000.0 * (now_s - request.arrival_s), time.time())
            queue = self._queues.pop(request.request_id, None)
            if queue is not None:
                queue.put_nowait(
                    TokenOutput(request_id=request.request_id, token_index=-1, finish_reason=FinishReason.ABORT)
                )

    async def run(self) -> None:
        """Step the engine in real time until cancelled."""
        loop = asyncio.get_running_loop()
        next_t: float | None = None
        while True:
            self._expire(loop.time())
            plan = self.engine.begin_step(loop.time())
            if plan is None:
                self._wake.clear()
                deadlines = [d for d in (self.engine.fill_deadline_s, self.engine.next_expiry_s()) if d is not None]
                deadline_s = min(deadlines) if deadlines else None
                if deadline_s is None:
                    await self._wake.wait()
                else:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), max(0.0, deadline_s - loop.time()))
                next_t = None
                continue
            if self.listener is not None:
                self.listener.on_step_begin(plan, time.time())
            now = loop.time()
            if next_t is None or now - next_t > MAX_LAG_S:
                next_t = now
            next_t += plan.duration_ms / 1000.0
            await asyncio.sleep(max(0.0, next_t - loop.time()))
            result = self.engine.end_step(plan)
            if self.listener is not None:
                self.listener.on_step_end(result, time.time())
            for output in result.outputs:
                queue = self._queues.get(output.request_id)
                if queue is not None:
                    queue.put_nowait(output)
                if output.finish_reason is not None:
                    self._queues.pop(output.request_id, None)
