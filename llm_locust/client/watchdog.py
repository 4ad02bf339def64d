"""Deadlines for many streams with one timer: the TTFT, stall and total timeouts.

A socket timeout would do, but gevent creates and cancels a timer for every ``recv`` that has
one, and on a stream of small events that is a quarter of the client's CPU (measured with
``benchmarks/client_overhead.py``). Instead each exchange holds a :class:`Deadline`, and one
watchdog greenlet per process sleeps until the earliest deadline and throws the deadline's
exception into the greenlet that owns it — only while that greenlet is blocked inside its
exchange (``armed``), so it surfaces from the ``recv``/``send`` the exchange is waiting in,
never elsewhere.

A deadline that moves later with every event (the stall timeout, from the last event) is not
moved by each read: its ``renew`` says where it is now, and the watchdog asks only when the
deadline it holds has passed. Its ``at`` is then never later than the true deadline, so the
watchdog never wakes late; it wakes early at most once per stall period per stream. Touching
the deadline on every read cost a worker 0.4 µs per read (two objects of each of hundreds of
streams, out of the CPU's cache; ``benchmarks/client_overhead.py``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import gevent
import gevent.event

if TYPE_CHECKING:
    import greenlet

MAX_SLEEP_S = 1.0
"""Longest watchdog sleep; deadlines that moved are re-read at least this often."""


class Expired(Exception):
    """A :class:`Deadline` passed; ``kind`` and the message say which."""

    def __init__(self, kind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Deadline:
    """One exchange's current deadline (``time.perf_counter`` seconds; ``inf`` for none).

    Attributes
    ----------
    at : float
        When the exchange fails if it is still waiting.
    kind, message : object, str
        What the :class:`Expired` thrown at ``at`` carries.
    renew : callable() -> None, or None
        Brings ``at``, ``kind`` and ``message`` up to date (a deadline that its exchange's
        events move later without a word, see the module); the watchdog calls it when ``at``
        has passed, before it expires the deadline. None: ``at`` is always up to date.
    """

    __slots__ = ("at", "kind", "message", "greenlet", "armed", "renew")

    def __init__(self) -> None:
        self.at = math.inf
        self.kind: object = None
        self.message = ""
        self.greenlet: greenlet.greenlet | None = None  # gevent.getcurrent() while armed
        self.armed = False
        self.renew: Callable[[], None] | None = None

    def passed(self, now: float) -> bool:
        """Whether the deadline is at or before ``now`` (``time.perf_counter`` seconds), renewed
        first when it would be."""
        if self.at <= now and self.renew is not None:
            self.renew()
        return self.at <= now


class Watchdog:
    """Throws expired :class:`Deadline` errors into their greenlets (one per process is enough)."""

    def __init__(self) -> None:
        self._deadlines: set[Deadline] = set()
        self._open: set[Deadline] = set()  # armed and not yet disarmed (expired ones included)
        self._wake = gevent.event.Event()
        self._runner = None
        self._next_check = math.inf

    def arm(self, deadline: Deadline) -> None:
        """Watch ``deadline`` for the current greenlet until :meth:`disarm`."""
        deadline.greenlet = gevent.getcurrent()
        deadline.armed = True
        self._deadlines.add(deadline)
        self._open.add(deadline)
        if self._runner is None or self._runner.dead:
            self._runner = gevent.spawn(self._run)
        self.moved(deadline)

    def moved(self, deadline: Deadline) -> None:
        """Call after moving ``deadline.at`` earlier than it was (later needs no call)."""
        if deadline.at < self._next_check:
            self._wake.set()

    def disarm(self, deadline: Deadline) -> None:
        """Stop watching ``deadline`` (its exchange is over); a second call does nothing. Its
        ``renew`` is dropped: it refers back to the exchange (a cycle only the collector frees)."""
        deadline.armed = False
        deadline.renew = None
        self._deadlines.discard(deadline)
        self._open.discard(deadline)

    @property
    def open_exchanges(self) -> int:
        """Exchanges (requests) of this process between :meth:`arm` and :meth:`disarm`: the
        streams it has open, from the send to the end of the answer."""
        return len(self._open)

    def _run(self) -> None:
        while True:
            if not self._deadlines:
                self._next_check = math.inf
                self._wake.clear()
                self._wake.wait(60.0)
                if not self._deadlines:
                    break
                continue
            now = time.perf_counter()
            earliest = now + MAX_SLEEP_S
            for deadline in list(self._deadlines):
                if deadline.passed(now):
                    self._deadlines.discard(deadline)
                    gevent.get_hub().loop.run_callback(self._expire, deadline)
                elif deadline.at < earliest:
                    earliest = deadline.at
            self._next_check = earliest
            self._wake.clear()
            self._wake.wait(max(0.0, earliest - time.perf_counter()))
        self._runner = None

    def _expire(self, deadline: Deadline) -> None:
        # runs in the hub: the owner is suspended, and inside its exchange only if still armed
        if not deadline.armed or deadline.greenlet is None:  # armed: its greenlet is set
            return
        if not deadline.passed(time.perf_counter()):  # moved on meanwhile: keep watching it
            self._deadlines.add(deadline)
            self._wake.set()
            return
        deadline.armed = False
        deadline.greenlet.throw(Expired(deadline.kind, deadline.message))
