"""What the next request asks for: the one interface every user (and load shape) draws from.

A request source has one method, ``next_request() -> WorkItem``: the prompt (a string, or a chat
``messages`` list), the output tokens to ask for, and the prompt length the workload meant (NaN
when it meant none). One source serves every user of a process (gevent runs them on one thread).

Sources: :class:`CyclingPrompts` (the fixed prompt set, ``--prompts-file``),
:class:`~llm_locust.client.workload.synthetic.SyntheticPrompts` (``--input-tokens``),
:class:`~llm_locust.client.workload.dataset.DatasetPrompts` (``--dataset``). Built by
:func:`llm_locust.client.workload.build.build_request_source`.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Protocol


class WorkItem(NamedTuple):
    """One request's input.

    Attributes
    ----------
    prompt : str or list of dict
        The user text, or a chat ``messages`` list (``[{"role", "content"}, ...]``) sent as is.
    max_tokens : int
        Output token limit to ask for, tokens.
    prompt_tokens_target : float
        The prompt length the workload built, as the server counts it (tokens); NaN when the
        workload does not fix one (a prompt set, a dataset).
    """

    prompt: str | list[dict]
    max_tokens: int
    prompt_tokens_target: float = math.nan


class RequestSource(Protocol):
    """Anything with ``next_request() -> WorkItem``."""

    def next_request(self) -> WorkItem:
        """The next request's input."""


class CyclingPrompts:
    """A fixed prompt set sent in order, from ``start`` on, wrapping around.

    Parameters
    ----------
    prompts : tuple of str
        Non-empty.
    max_tokens : int
    start : int, default 0
        Index of the first prompt (taken modulo the set's size).

    >>> source = CyclingPrompts(("a", "b"), max_tokens=8, start=1)
    >>> [source.next_request().prompt for _ in range(3)]
    ['b', 'a', 'b']
    """

    def __init__(self, prompts: tuple[str, ...], *, max_tokens: int, start: int = 0) -> None:
        self.prompts = prompts
        self.max_tokens = max_tokens
        self.index = start % len(prompts)

    def next_request(self) -> WorkItem:
        prompt = self.prompts[self.index]
        self.index = (self.index + 1) % len(self.prompts)
        return WorkItem(prompt, self.max_tokens)
