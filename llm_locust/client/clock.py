"""A worker's wall clock placed on the master's: NTP-style offset over Locust's own messages.

Records are placed in time by one wall-clock anchor (``t_start_s``) read on the worker, while the
ladder's step boundaries come from the master's clock; on two machines a few hundred
milliseconds of offset would put requests into the wrong step. Each worker therefore sends the
master a ``llm_clock_ping`` (its send time ``t0``); the master answers ``llm_clock_pong`` with
its receive and send times (``t1``, ``t2``, :mod:`llm_locust.master.clocksync`); the worker
notes the arrival ``t3``. One exchange gives (RFC 5905, section 8)::

    offset_s = ((t1 - t0) + (t2 - t3)) / 2      master clock - worker clock
    delay_s  = (t3 - t0) - (t2 - t1)            round trip minus the master's own time

and the true offset lies within ``offset_s ± delay_s / 2`` whatever the asymmetry of the two
paths. The estimate kept is the sample of least delay (the least queueing, so the tightest bound)
among the last :data:`KEEP_SAMPLES`: a burst of :data:`BURST` pings at start, then one every
:data:`PERIOD_S`.

Until the clock has *settled* (a sample of delay at most :data:`SETTLE_DELAY_S`, or the whole
burst answered) a read of the master's clock waits, at most :data:`SETTLE_TIMEOUT_S` from the
worker's start: the master starts its test as soon as the last worker connects, so a user's first
request could otherwise be stamped before the first answer (offset 0: the worker's own clock, the
full skew off) or with a first sample that a queued master answered late (off by up to half its
delay). The estimate then moves only to a tighter sample, by less than the settled one's
uncertainty, so no record is placed by a guess. Found by ``tests/e2e/test_clock_skew.py`` on a
loaded machine: a +2 s worker's first request placed 2 s late added 0.5 s of in-flight time to
the one-user step. Written here and not taken from an NTP library because the exchange must run
over the connection Locust already has (no other port between load machines and master).

Both sides read their clocks with :func:`llm_locust.wallclock.local_wall_s` (the wall clock at
start carried on by the monotonic clock), so a step of either host's OS clock in mid-run changes
no offset; its test hook ``LLM_LOCUST_TEST_CLOCK_SKEW_S`` sets a host's clock off.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass

import gevent
import gevent.event

from llm_locust.wallclock import local_wall_s

logger = logging.getLogger(__name__)

PING = "llm_clock_ping"
PONG = "llm_clock_pong"
BURST = 8
"""Pings sent at start, :data:`BURST_GAP_S` apart."""
BURST_GAP_S = 0.1
PERIOD_S = 5.0
"""Seconds between two pings after the burst (clocks drift; a run lasts minutes to hours)."""
KEEP_SAMPLES = 32
SETTLE_DELAY_S = 0.1
"""A sample of this round trip or less settles the clock (the offset known within ±50 ms)."""
SETTLE_TIMEOUT_S = 2.0
"""Longest a read of the master's clock waits for the clock to settle, s from the worker's start;
past it the estimate so far is used (the worker's own clock before any answer) and a warning says so."""


@dataclass(frozen=True, slots=True)
class ClockSample:
    """One ping/pong exchange: ``offset_s`` (master - worker) and ``delay_s`` (round trip), s."""

    offset_s: float
    delay_s: float

    @classmethod
    def from_stamps(cls, t0: float, t1: float, t2: float, t3: float) -> ClockSample:
        """From the four stamps (worker send, master receive, master send, worker receive; Unix s)."""
        return cls(offset_s=((t1 - t0) + (t2 - t3)) / 2.0, delay_s=(t3 - t0) - (t2 - t1))


class OffsetEstimator:
    """The minimum-delay sample among the last ``keep`` exchanges.

    Attributes
    ----------
    samples : int
        Exchanges seen so far.
    """

    def __init__(self, keep: int = KEEP_SAMPLES) -> None:
        self._recent: deque[ClockSample] = deque(maxlen=keep)
        self.samples = 0

    def add(self, sample: ClockSample) -> None:
        """Add an exchange (a negative delay, impossible, is dropped as a broken stamp)."""
        if sample.delay_s < 0:
            return
        self._recent.append(sample)
        self.samples += 1

    @property
    def best(self) -> ClockSample | None:
        """The least-delay sample kept, or None before the first."""
        return min(self._recent, key=lambda s: s.delay_s) if self._recent else None

    @property
    def offset_s(self) -> float:
        """Master clock - worker clock, s (0 before the first exchange)."""
        best = self.best
        return best.offset_s if best is not None else 0.0

    def describe(self) -> dict:
        """``offset_s``, ``uncertainty_s`` (half the least delay: the true offset lies within),
        ``delay_s``, ``samples``; NaN-free (None before the first exchange)."""
        best = self.best
        return {
            "offset_s": None if best is None else round(best.offset_s, 6),
            "uncertainty_s": None if best is None else round(best.delay_s / 2.0, 6),
            "delay_s": None if best is None else round(best.delay_s, 6),
            "samples": self.samples,
        }


class WorkerClock:
    """On a worker: ping the master, keep the estimate, place wall-clock reads on the master's clock.

    Parameters
    ----------
    environment : locust.env.Environment
        A worker's (``environment.runner`` is a ``WorkerRunner``); set as ``environment.llm_clock``.
    """

    def __init__(self, environment) -> None:
        self.environment = environment
        self.estimator = OffsetEstimator()
        self.settled = gevent.event.Event()
        self._settle_by = time.monotonic() + SETTLE_TIMEOUT_S
        environment.llm_clock = self
        environment.runner.register_message(PONG, self._on_pong)
        self._greenlet = gevent.spawn(self._loop)

    def master_wall_s(self) -> float:
        """Now, on the master's clock (Unix s); before the clock has settled, waits for it (at most
        until :data:`SETTLE_TIMEOUT_S` after this clock's start)."""
        if not self.settled.is_set():
            self._wait_settled()
        return local_wall_s() + self.estimator.offset_s

    def _wait_settled(self) -> None:
        if self.settled.wait(max(0.0, self._settle_by - time.monotonic())):
            return
        if not self.settled.is_set():  # the first reader past the deadline says so, once
            self.settled.set()
            logger.warning(
                "the clock exchange with the master did not settle within %.1f s (%s): records are "
                "placed with the estimate so far (this worker's own clock before any answer)",
                SETTLE_TIMEOUT_S,
                self.estimator.describe(),
            )

    def _ping(self) -> None:
        self.environment.runner.send_message(PING, {"t0": local_wall_s(), "estimate": self.estimator.describe()})

    def _on_pong(self, environment, msg, **_kwargs) -> None:
        t3 = local_wall_s()
        try:
            sample = ClockSample.from_stamps(float(msg.data["t0"]), float(msg.data["t1"]), float(msg.data["t2"]), t3)
        except (KeyError, TypeError, ValueError):
            logger.warning("malformed %s message from the master: %r", PONG, msg.data)
            return
        self.estimator.add(sample)
        if not self.settled.is_set() and self.estimator.best is not None:
            if self.estimator.best.delay_s <= SETTLE_DELAY_S or self.estimator.samples >= BURST:
                self.settled.set()

    def _loop(self) -> None:
        for _ in range(BURST):
            self._ping()
            gevent.sleep(BURST_GAP_S)
        while True:
            gevent.sleep(PERIOD_S)
            self._ping()


def master_wall_s(environment) -> float:
    """Now on the master's clock for code running in ``environment`` (a worker with a
    :class:`WorkerClock`), else this process's own wall clock (the master, a standalone run)."""
    clock = getattr(environment, "llm_clock", None)
    return clock.master_wall_s() if clock is not None else local_wall_s()
