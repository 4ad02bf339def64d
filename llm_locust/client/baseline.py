"""``BaselineUser``: an :class:`~llm_locust.client.user.LLMUser` that sends exactly
``--baseline-requests`` requests per process, then stops.

The single-request baseline (:class:`~llm_locust.master.shapes.BaselineShape`, one user) must send
exactly N requests. The shape runs on the master and only learns of finished requests from the
workers' reports (every 3 s; once a second it looks), so a shape-side stop alone overshoots:
N = 3 sent 4, and 30 with ``--max-tokens 4``. The count is therefore kept where the requests are
sent: each process (worker or standalone) takes one request from its budget before it sends, and
its user stops itself (Locust's ``StopUser``) once the budget is spent; the shape then ends the
test at the next report. With one user in the whole run, as the shape spawns, exactly N requests
are sent.
"""

from __future__ import annotations

import math

from locust.exception import StopUser

from llm_locust.client.record import RequestRecord
from llm_locust.client.user import LLMUser

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
            raise StopUser()
        return record
