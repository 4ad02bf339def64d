"""A worker Locust marked missing comes back only once it answers the master, never on a stale heartbeat.

Locust's master takes any heartbeat from a ``missing`` worker as its return: "self-healed with
heartbeat" (``MasterRunner.handle_message``, ``locust/runners.py`` 2.47): it puts the worker back
in its user dispatcher and dispatches again, giving it users and stopping as many on the workers
left. A worker cut off by the network goes on writing heartbeats into its connection to the master
until it quits (:mod:`llm_locust.client.masterwatch`, 5 s of silence), and the kernel keeps
them - in the socket, and in the neighbour table's queue of packets waiting for the link - after
the process has exited; when the link is back, they arrive. Seen with a switch port down 5 s and
up again once the worker had quit (tests/e2e/test_worker_partitioned.py): the master "healed" the
dead worker, gave it one of the step's two users and stopped the live worker's second one
(recorded ``interrupted``), the step ran at one user until Locust marked the worker missing
again 4-5 s later, and run.json ``workers_lost`` gave that second silence as the loss.

:class:`HealGate` sits in front of Locust's message handler on the master: while a worker is
``missing``, its ``heartbeat``, ``spawning`` and ``spawning_complete`` messages (each would set it
back to a live state) are held back, and the master sends it :data:`PING` with a token made after
it went missing (again at most once a second while they keep coming). A live worker answers
:data:`PONG` with the token (:func:`install_ping_answer`), which no stale message can carry; its
next heartbeat then goes to Locust, which heals it as before. A dead one never answers: it stays
missing, as run.json's ``workers_lost`` says, until Locust drops it after 60 s
(``HEARTBEAT_DEAD_INTERNAL``). Its ``stats`` reports are let through as Locust takes them (from
any worker, missing or not): records it shipped arrive once and are counted once.

Why own code: Locust has no hook between a heartbeat's arrival and the heal; this wraps the
master runner's ``handle_message``.
"""

from __future__ import annotations

import logging
import time
import uuid

from locust.runners import STATE_MISSING

logger = logging.getLogger(__name__)

PING = "llm_heal_ping"
"""Custom message master -> a missing worker: its data a token; answer it with :data:`PONG`."""
PONG = "llm_heal_pong"
"""Custom message worker -> master: the token of the :data:`PING` it received."""
HELD_TYPES = frozenset({"heartbeat", "spawning", "spawning_complete"})
"""Messages that set a missing worker back to a live state in Locust's handler: held while it is
missing and has not answered."""
PING_INTERVAL_S = 1.0
"""Least time between two pings to the same missing worker, s (its heartbeats come every second)."""


class HealGate:
    """On the master: hold back a missing worker's heartbeats until it answers a ping (module docstring).

    Parameters
    ----------
    environment : locust.env.Environment
        The master's; its runner's ``handle_message`` is wrapped and :data:`PONG` registered.

    Attributes
    ----------
    held : dict of str to int
        Worker id -> messages held back while it was missing (for the log and tests).
    """

    def __init__(self, environment) -> None:
        self.runner = environment.runner
        self.held: dict[str, int] = {}
        self._token: dict[str, str] = {}
        self._pinged_mono: dict[str, float] = {}
        self._answered: set[str] = set()
        self._locust_handle = self.runner.handle_message
        self.runner.handle_message = self._handle_message
        self.runner.register_message(PONG, self._on_pong)

    def _handle_message(self, client_id, msg) -> None:
        if msg.type in HELD_TYPES and self._hold(msg.node_id):
            return
        self._locust_handle(client_id, msg)

    def _hold(self, worker: str) -> bool:
        client = self.runner.clients.get(worker)
        if client is None or client.state != STATE_MISSING:
            self._forget(worker)
            return False
        if worker in self._answered:
            self._forget(worker)  # it answered: this heartbeat heals it, in Locust's own way
            return False
        if worker not in self._token:
            self._token[worker] = uuid.uuid4().hex
            logger.warning("worker %s: a message arrived after it went missing; not taken as its return until it "
                           "answers the master (a worker cut off writes heartbeats the network delivers later, "
                           "even after it quit)", worker)  # fmt: skip
        now = time.monotonic()
        if now - self._pinged_mono.get(worker, -PING_INTERVAL_S) >= PING_INTERVAL_S:
            self._pinged_mono[worker] = now
            try:
                self.runner.send_message(PING, self._token[worker], client_id=worker)
            except Exception as exc:  # its connection gone: it cannot answer
                logger.debug("could not ping %s: %s", worker, exc)
        self.held[worker] = self.held.get(worker, 0) + 1
        return True

    def _forget(self, worker: str) -> None:
        self._token.pop(worker, None)
        self._pinged_mono.pop(worker, None)
        self._answered.discard(worker)

    def _on_pong(self, environment=None, msg=None, **_kwargs) -> None:
        worker = getattr(msg, "node_id", None)
        if worker is not None and worker in self._token and getattr(msg, "data", None) == self._token[worker]:
            self._answered.add(worker)
            logger.warning("worker %s answered the master: it is back (%d messages held meanwhile)",
                           worker, self.held.get(worker, 0))  # fmt: skip


def install_ping_answer(environment) -> None:
    """On a worker: answer the master's :data:`PING` with its token (:data:`PONG`)."""

    def answer(environment=None, msg=None, **_kwargs) -> None:
        environment.runner.send_message(PONG, getattr(msg, "data", None))

    environment.runner.register_message(PING, answer)
