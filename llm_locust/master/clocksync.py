"""The master's side of the clock exchange (:mod:`llm_locust.client.clock`): answer each worker's
``llm_clock_ping`` at once with the master's receive and send stamps, and keep the estimate each
worker reports with its next ping, for ``run.json`` ``clock_offsets``."""

from __future__ import annotations

import logging
import math
import time

from llm_locust.client.clock import PING, PONG

logger = logging.getLogger(__name__)


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
        environment.llm_clock_responder = self
        environment.runner.register_message(PING, self._on_ping)

    def _on_ping(self, environment, msg, **_kwargs) -> None:
        t1 = time.time()
        data = msg.data if isinstance(msg.data, dict) else {}
        estimate = data.get("estimate")
        if isinstance(estimate, dict) and _finite(estimate.get("offset_s")) and _finite(estimate.get("uncertainty_s")):
            self.estimates[msg.node_id] = estimate
        self.environment.runner.send_message(
            PONG, {"t0": data.get("t0"), "t1": t1, "t2": time.time()}, client_id=msg.node_id
        )

    def describe(self) -> list[dict]:
        """``[{"worker", "offset_s", "uncertainty_s", "delay_s", "samples"}, ...]`` by worker id."""
        return [{"worker": worker, **estimate} for worker, estimate in sorted(self.estimates.items())]


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
