"""The master's side of the clock exchange (:mod:`llm_locust.client.clock`): answer each worker's
``llm_clock_ping`` at once with the master's receive and send stamps, and keep the estimate each
worker reports with its next ping, for ``run.json`` ``clock_offsets``.

Test hook: env ``LLM_LOCUST_TEST_SLOW_PINGS`` (read only here) has the master take up each
worker's first N pings :data:`SLOW_PING_S` late, as a master busy at the test's start does: those
samples' delay is half a second, on the way out only (their offset off by a quarter second).
"""

from __future__ import annotations

import logging
import math
import os
from collections import Counter

import gevent

from llm_locust.client.clock import PING, PONG
from llm_locust.wallclock import local_wall_s

logger = logging.getLogger(__name__)

SLOW_PINGS_ENV = "LLM_LOCUST_TEST_SLOW_PINGS"
SLOW_PING_S = 0.5
_SLOW_PINGS = int(os.environ.get(SLOW_PINGS_ENV) or 0)


class ClockResponder:
    """Answer clock pings on a master runner.

    Parameters
    ----------
    environment : locust.env.Environment
        The master's; set as ``environment.llm_clock_responder``.

    Attributes
    ----------
    estimates : dict of str to dict
        Worker id -> its latest reported estimate (``offset_s``, ``uncertainty_s``, ``delay_s``,
        ``samples``; see :meth:`llm_locust.client.clock.OffsetEstimator.describe`).
    """

    def __init__(self, environment) -> None:
        self.environment = environment
        self.estimates: dict[str, dict] = {}
        self._pings: Counter[str] = Counter()
        environment.llm_clock_responder = self
        environment.runner.register_message(PING, self._on_ping)

    def _on_ping(self, environment, msg, **_kwargs) -> None:
        self._pings[msg.node_id] += 1
        if self._pings[msg.node_id] <= _SLOW_PINGS:
            gevent.spawn_later(SLOW_PING_S, self._answer, msg)
        else:
            self._answer(msg)

    def _answer(self, msg) -> None:
        t1 = local_wall_s()
        data = msg.data if isinstance(msg.data, dict) else {}
        estimate = data.get("estimate")
        if isinstance(estimate, dict) and _finite(estimate.get("offset_s")) and _finite(estimate.get("uncertainty_s")):
            self.estimates[msg.node_id] = estimate
        self.environment.runner.send_message(
            PONG, {"t0": data.get("t0"), "t1": t1, "t2": local_wall_s()}, client_id=msg.node_id
        )

    def describe(self) -> list[dict]:
        """``[{"worker", "offset_s", "uncertainty_s", "delay_s", "samples"}, ...]`` by worker id."""
        return [{"worker": worker, **estimate} for worker, estimate in sorted(self.estimates.items())]


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
