"""The asyncio driver: runs the pure :class:`BatchEngine` in real time and routes its tokens.

One task loops ``begin_step`` -> sleep the step time -> ``end_step`` -> deliver each token to
its request's queue. Sleeps follow an absolute schedule (``next_t += step``; sleep
``next_t - now``), so event-loop overhead does not accumulate over steps; after more than
:data:`MAX_LAG_S` behind (a stalled loop) the schedule restarts from now instead of bursting.
While the engine is idle the task waits on an ``asyncio.Event`` set by :meth:`submit` (no busy
loop), and the schedule restarts at the next request.
"""

from __future__ import annotations

import asyncio

from llm_locust.simserver.engine import BatchEngine, SimRequest, TokenOutput

MAX_LAG_S = 0.25
"""How far behind its schedule the step loop may run before it resets the schedule, s."""


class EngineDriver:
    """Owns the engine's clock and the per-request token queues.

    Parameters
    ----------
    engine : BatchEngine
        The engine to drive (also read by metrics and the stats logger).
    """

    def __init__(self, *, engine: BatchEngine) -> None:
        self.engine = engine
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
        self.engine.add_request(request)
        queue: asyncio.Queue[TokenOutput] = asyncio.Queue()
        self._queues[request.request_id] = queue
        self._wake.set()
        return queue

    def abort(self, request_id: str) -> bool:
        """Remove a request from the engine and forget its queue (client gone); True if it was
        still waiting or running."""
        self._queues.pop(request_id, None)
        return self.engine.abort_request(request_id)

    async def run(self) -> None:
        """Step the engine in real time until cancelled."""
        loop = asyncio.get_running_loop()
        next_t: float | None = None
        while True:
            plan = self.engine.begin_step()
            if plan is None:
                self._wake.clear()
                await self._wake.wait()
                next_t = None
                continue
            now = loop.time()
            if next_t is None or now - next_t > MAX_LAG_S:
                next_t = now
            next_t += plan.duration_ms / 1000.0
            await asyncio.sleep(max(0.0, next_t - loop.time()))
            result = self.engine.end_step(plan)
            for output in result.outputs:
                queue = self._queues.get(output.request_id)
                if queue is not None:
                    queue.put_nowait(output)
                if output.finish_reason is not None:
                    self._queues.pop(output.request_id, None)
