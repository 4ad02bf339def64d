"""``BaselineUser``: an :class:`~llm_locust.client.user.LLMUser` that sends exactly
``--baseline-requests`` requests per process, then stops.

The single-request baseline (:class:`~llm_locust.master.shapes.BaselineShape`, one user) must send
exactly N requests. The shape runs on the master and only learns of finished requests from the
workers' reports (every 3 s; once a second it looks), so a shape-side stop alone overshoots:
N = 3 sent 4, and 30 with ``--max-tokens 4``. The count is therefore kept where the requests are
sent: each process (worker or standalone) takes one request from its budget before it sends, and
its user stops itself (Locust's ``StopUser``) once the budget is spent. With one user in the whole
run, as the shape spawns, exactly N requests are sent.

A worker sends its report at once after the last request (:meth:`BaselineUser.report_now`), not
at its next 3-s timer, and the shape looks for it every 50 ms: the run ends ~0.1 s after the last
request instead of 1-4 s (the last record rides that report, and the master's stop collects
anything still held: :mod:`llm_locust.master.shipping`).
"""

from __future__ import annotations

import logging
import math

from locust.exception import RPCError, StopUser
from locust.runners import WorkerRunner

from llm_locust.client.record import RequestRecord
from llm_locust.client.user import LLMUser

logger = logging.getLogger(__name__)

SENT_ATTRIBUTE = "llm_baseline_sent"
"""Attribute of the ``Environment`` that counts this process's baseline requests."""


class BaselineUser(LLMUser):
    """Streams one request at a time until this process has sent ``--baseline-requests``.

    Raises
    ------
    locust.exception.StopUser
        From :meth:`send` once the process's budget is spent (Locust stops the user; it is not
        spawned again, as the shape never asks for a second user).
    """

    abstract = True

    def send(
        self, prompt: str | list[dict], *, max_tokens: int | None = None, prompt_tokens_target: float = math.nan
    ) -> RequestRecord:
        environment = self.environment
        budget = environment.parsed_options.baseline_requests
        sent = getattr(environment, SENT_ATTRIBUTE, 0)
        if sent >= budget:
            raise StopUser()
        setattr(environment, SENT_ATTRIBUTE, sent + 1)  # taken before sending: no other user can take it
        record = super().send(prompt, max_tokens=max_tokens, prompt_tokens_target=prompt_tokens_target)
        if sent + 1 >= budget:
            self.report_now()
            raise StopUser()
        return record

    def report_now(self) -> None:
        """On a worker: send the master its report now (Locust's ``stats`` message, made as
        ``WorkerRunner._send_stats`` makes it every 3 s: the ``report_to_master`` listeners fill
        it, Locust's stats and the request records among them); elsewhere nothing."""
        environment = self.environment
        runner = environment.runner
        if isinstance(runner, WorkerRunner):
            data: dict = {}
            environment.events.report_to_master.fire(client_id=runner.client_id, data=data)
            try:
                runner.send_message("stats", data)
            except RPCError as exc:  # as Locust's own report timer does on a failed send
                logger.error("could not report the last baseline request to the master: %s", exc)
