"""The watchdog and deadlines its exchanges move later without a word (``Deadline.renew``)."""

from __future__ import annotations

import time

import gevent
import pytest

from llm_locust.client.watchdog import Deadline, Expired, Watchdog
from tests.conftest import LoopLag

STALL_S = 0.1
TOLERANCE_MS = 10.0


def _wait_for_expiry(watchdog: Watchdog, deadline: Deadline, limit_s: float = 3.0) -> float:
    """Arm ``deadline`` in this greenlet and sleep until the watchdog throws; the instant it did."""
    watchdog.arm(deadline)
    try:
        gevent.sleep(limit_s)
    except Expired:
        return time.perf_counter()
    finally:
        watchdog.disarm(deadline)
    pytest.fail("the deadline never expired")


def test_a_stall_deadline_moved_by_events_expires_a_stall_after_the_last_event():
    # events every 30 ms for 0.3 s only touch `last_event` (as a stream's reads do); the deadline
    # holds the first stall instant and is renewed when the watchdog finds it passed
    watchdog = Watchdog()
    deadline = Deadline()
    last_event = [time.perf_counter()]
    renewals = [0]

    def renew() -> None:
        renewals[0] += 1
        deadline.at = last_event[0] + STALL_S

    deadline.kind, deadline.message, deadline.renew = "stall", "no event", renew
    deadline.at = last_event[0] + STALL_S

    def events() -> None:
        for _ in range(10):
            gevent.sleep(0.03)
            last_event[0] = time.perf_counter()

    with LoopLag() as lag:
        producer = gevent.spawn(events)
        expired_at = _wait_for_expiry(watchdog, deadline)
        producer.join()
    late_ms = (expired_at - (last_event[0] + STALL_S)) * 1000
    assert 0 <= late_ms <= TOLERANCE_MS + lag.max_ms, late_ms  # never early, never late
    # renewed when the held instant passed: a few times over 0.4 s, not once per event
    assert 1 <= renewals[0] <= 6


def test_a_deadline_renewed_to_the_same_instant_expires_then():
    watchdog = Watchdog()
    deadline = Deadline()
    due = time.perf_counter() + 0.05
    deadline.at, deadline.kind, deadline.message = due, "stall", "no event"
    deadline.renew = lambda: None  # nothing moved it
    with LoopLag() as lag:
        expired_at = _wait_for_expiry(watchdog, deadline)
    late_ms = (expired_at - due) * 1000
    assert 0 <= late_ms <= TOLERANCE_MS + lag.max_ms, late_ms


def test_the_thrown_error_carries_the_renewed_kind_and_message():
    # a renewal may turn a stall deadline into the total one (sooner than the next stall)
    watchdog = Watchdog()
    deadline = Deadline()
    start = time.perf_counter()
    deadline.at, deadline.kind, deadline.message = start + 0.03, "stall", "no event"

    def renew() -> None:
        deadline.at, deadline.kind, deadline.message = start + 0.08, "total", "too long"

    deadline.renew = renew
    watchdog.arm(deadline)
    try:
        with pytest.raises(Expired) as caught:
            gevent.sleep(2.0)
    finally:
        watchdog.disarm(deadline)
    assert caught.value.kind == "total" and str(caught.value) == "too long"
    assert time.perf_counter() - start >= 0.08
