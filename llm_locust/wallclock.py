"""The run's wall clock: Unix seconds that advance only as time passes, whatever the OS clock does.

Every instant a run records on its timeline (a request's start, a scrape, a server log line's
arrival, a ladder step's start and end, the clock exchange between workers and master) is read
from :func:`local_wall_s`. It is the OS wall clock read **once**, when this module is imported,
carried forward by the monotonic clock (``time.perf_counter``: ``CLOCK_MONOTONIC`` on Linux)::

    local_wall_s() = perf_counter() + (time.time() - perf_counter())  at import

The OS wall clock can be *stepped* while a run is going (NTP or chrony correcting it, a virtual
machine resumed and resynchronised); the monotonic clock is only slewed, as the wall clock is
between steps. With plain ``time.time`` a step of 7 s in mid-run moved every later stamp 7 s on:
a CI run of 3 Dec 2026 against a real vLLM recorded its last 12-s ladder step as 19.3 s long
(the shape counts its steps on the monotonic clock, the recorder stamped them on the wall clock)
with a 7-s hole of no request in it, and the step was rejected (client in-flight 4.44 of 8).
A step of 2.3 s had stretched a step of a llama.cpp run the same way minutes before. With this
clock a step in mid-run moves nothing; runs that began on a wrong wall clock stay on it, and the
workers' offsets to the master (:mod:`llm_locust.client.clock`) are measured between these
clocks, so they stay constant too.

Not this clock: a date from outside the run (an HTTP ``Retry-After`` date is compared with
``time.time``), and the kernel's receive stamps (``SO_TIMESTAMPNS``, ``CLOCK_REALTIME``), which
:mod:`llm_locust.client.reader` converts with ``CLOCK_REALTIME`` read at the same moment.

Test hook: env ``LLM_LOCUST_TEST_CLOCK_SKEW_S`` adds that many seconds to this process's clock,
as if its host's clock were off by that much (:data:`SKEW_ENV`).
"""

from __future__ import annotations

import os
import time

__all__ = ["SKEW_ENV", "local_wall_s"]

SKEW_ENV = "LLM_LOCUST_TEST_CLOCK_SKEW_S"
"""Test hook: seconds added to this process's wall clock (a host whose clock is off)."""

ANCHOR_READS = 5
"""Tries at reading the wall clock between two monotonic reads; the tightest pair anchors the run clock."""


def _perf_to_wall_s(reads: int = ANCHOR_READS) -> float:
    """``time.time() - time.perf_counter()`` at one instant: of ``reads`` wall-clock reads, the one
    whose two enclosing monotonic reads lie closest, against their midpoint. One plain pair of
    reads is off by however long the process was preempted between them: 4 ms on a busy 2-core
    machine, which ``tests/e2e/test_clock_skew.py`` saw as an offset measured 4 ms beyond its
    0.2-ms uncertainty (one run in twenty)."""
    best_gap_s, best = float("inf"), 0.0
    for _ in range(reads):
        before = time.perf_counter()
        wall = time.time()
        after = time.perf_counter()
        if after - before < best_gap_s:
            best_gap_s, best = after - before, wall - (before + after) / 2.0
    return best


_PERF_TO_WALL_S = _perf_to_wall_s() + float(os.environ.get(SKEW_ENV) or 0.0)


def local_wall_s() -> float:
    """Now on this process's run clock, Unix s: the wall clock at import carried on by the monotonic
    clock (a step of the OS clock after import does not move it)."""
    return time.perf_counter() + _PERF_TO_WALL_S
