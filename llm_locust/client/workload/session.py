"""Multi-turn sessions: a Locust user holds a conversation of K turns, each turn sending the whole
history so far (``--session-turns K``, ``--think-time-s T``).

A session is a chat ``messages`` list that grows by two messages a turn: the next user message
(the request source's next prompt: ``--input-tokens`` text of that many tokens, a ``--dataset``
prompt, the prompt set) and, once the turn has streamed, the assistant's real answer (the text
the server sent). So turn *k*'s prompt holds every earlier user message and answer, and prompts
grow turn by turn as in a chat or an agent loop. Only ``--protocol openai-chat`` sends a
``messages`` list.

A session sticks to its user (the state is the user's own). It ends after its K turns, or at the
first turn that failed (that turn's row in ``requests.csv`` holds the error kind; the user's next
request starts a new session). Between turns the user waits ``think_time_s`` (a user reading the
answer and typing; in no latency). ``requests.csv`` gets ``session_id`` (unique over the run) and
``turn`` (1..K; 0 outside sessions).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from llm_locust.client.workload.source import RequestSource, WorkItem


@dataclass(slots=True, kw_only=True)
class Session:
    """One conversation in progress.

    Attributes
    ----------
    session_id : str
        Unique over the run (16 hex digits).
    turns : int
        Turns it will have at most (K).
    turn : int
        Turns sent so far (the next is ``turn + 1``).
    messages : list of dict
        The history: ``{"role": "user"|"assistant", "content": text}`` in order.
    """

    session_id: str
    turns: int
    turn: int = 0
    messages: list[dict] = field(default_factory=list)

    @property
    def done(self) -> bool:
        """Whether every turn was sent."""
        return self.turn >= self.turns


class SessionPlayer:
    """The turns of one user's sessions, one after another.

    Parameters
    ----------
    source : RequestSource
        Where each user message comes from (one per turn).
    turns : int
        Turns per session, >= 1.
    think_time_s : float, default 0.0
        Pause between a turn's answer and the next turn, s.

    Examples
    --------
    >>> from llm_locust.client.workload.source import CyclingPrompts
    >>> player = SessionPlayer(CyclingPrompts(("a", "b", "c"), max_tokens=4), turns=2)
    >>> item, turn = player.next_turn()
    >>> item.prompt, turn
    ([{'role': 'user', 'content': 'a'}], 1)
    >>> player.answered("A", ok=True)
    >>> player.next_turn()[0].prompt
    [{'role': 'user', 'content': 'a'}, {'role': 'assistant', 'content': 'A'}, {'role': 'user', 'content': 'b'}]
    >>> player.answered("B", ok=True)
    >>> player.next_turn()[1]  # a new session
    1
    """

    def __init__(self, source: RequestSource, *, turns: int, think_time_s: float = 0.0) -> None:
        if turns < 1:
            raise ValueError(f"turns must be at least 1, got {turns}")
        self.source = source
        self.turns = turns
        self.think_time_s = think_time_s
        self.session: Session | None = None

    def next_turn(self) -> tuple[WorkItem, int]:
        """The next request (the history plus the next user message) and its turn number.

        A new session starts when none is under way. The prompt length target is the source's
        on the first turn only (later ones carry the history too): NaN after it.
        """
        session = self.session
        if session is None or session.done:
            session = self.session = Session(session_id=os.urandom(8).hex(), turns=self.turns)
        item = self.source.next_request()
        user = item.prompt if isinstance(item.prompt, list) else [{"role": "user", "content": item.prompt}]
        session.messages.extend(user)
        session.turn += 1
        target = item.prompt_tokens_target if session.turn == 1 else math.nan
        return WorkItem(list(session.messages), item.max_tokens, target), session.turn

    @property
    def session_id(self) -> str:
        """The current session's id ("" before the first)."""
        return self.session.session_id if self.session is not None else ""

    def answered(self, text: str, *, ok: bool) -> None:
        """Record the turn's outcome: its answer joins the history, a failure ends the session."""
        session = self.session
        if session is None:
            return
        if not ok:
            self.session = None
            return
        session.messages.append({"role": "assistant", "content": text})
        if session.done:
            self.session = None

    def pause_s(self) -> float:
        """How long to wait before the next request: the think time inside a session, else 0."""
        return self.think_time_s if self.session is not None else 0.0
