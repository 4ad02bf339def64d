"""The run clock's anchor survives a preemption between its reads (issue 27, item 5; 6716d44).

A fresh interpreter imports :mod:`llm_locust.wallclock` with ``time.time`` and ``time.perf_counter``
replaced by one scripted clock: true time advances 1 µs per read, the wall clock is the monotonic
one plus :data:`TRUE_OFFSET_S`, and the process is "preempted" for :data:`PREEMPTION_S` between its
first and second read (the 4 ms a busy 2-core machine gave tests/e2e/test_clock_skew.py, one run
in twenty). The anchor - ``local_wall_s() - perf_counter()`` - must be the true offset; one plain
pair of reads (the code before 6716d44) is off by the whole preemption.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from llm_locust.wallclock import SKEW_ENV

TRUE_OFFSET_S = 1_700_000_000.0
PREEMPTION_S = 0.004
STEP_S = 1e-6

SCRIPT = f"""
import json, time

class Clock:
    def __init__(self):
        self.t, self.reads = 1000.0, 0
    def _read(self):
        self.reads += 1
        if self.reads == 2:
            self.t += {PREEMPTION_S!r}  # preempted between the first and the second read
        self.t += {STEP_S!r}
        return self.t
    def perf_counter(self):
        return self._read()
    def time(self):
        return self._read() + {TRUE_OFFSET_S!r}

clock = Clock()
time.perf_counter, time.time = clock.perf_counter, clock.time
from llm_locust.wallclock import local_wall_s
print(json.dumps({{"anchor_s": local_wall_s() - time.perf_counter()}}))
"""


def test_a_preemption_between_the_anchor_reads_does_not_move_the_clock():
    env = {name: value for name, value in os.environ.items() if name != SKEW_ENV}  # no skew hook
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    anchor_s = json.loads(out.stdout)["anchor_s"]
    # within the scripted clock's own step (the reads between the anchor and the check), not the preemption
    assert anchor_s == pytest.approx(TRUE_OFFSET_S, abs=10 * STEP_S)
