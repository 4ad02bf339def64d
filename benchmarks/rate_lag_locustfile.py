"""The rate locustfile with the send lag taken apart (``benchmarks/rate_send_lag.py --profile``).

Each send's lag ``t_start_s - scheduled_s`` is split at two more instants, all on the same clock
(:func:`llm_locust.client.clock.master_wall_s`):

- ``woke_s``: the user's sleep in Locust's ``wait_time`` returned (first line of
  ``ready_to_send``): ``woke_s - scheduled_s`` is the timer's and the event loop's part (how late
  the greenlet got the CPU back; negative when libev's cached clock fired the timer early);
- ``ready_s``: after ``ready_to_send`` (which sleeps again when the timer fired early);
- ``t_start_s``: the record's send stamp, after the prompt, the body and a connection slot:
  ``t_start_s - ready_s`` is our own per-request preparation.

Where a late wake-up comes from is recorded beside it: ``run_delay_ms``, the time this thread
waited for a CPU on the kernel's run queue since the previous wake-up (``/proc/thread-self/
schedstat``, second field: the process was ready but another process had the cores), and each
garbage collection's start and end (``gc.callbacks``, ``gc_pauses.csv``): a collection blocks
every greenlet.

The parts go to ``lag_parts.csv`` in ``--run-dir`` when the test stops.
"""

from __future__ import annotations

import csv
import gc
import time
from pathlib import Path

from locust import events

import llm_locust.plugin  # noqa: F401  (options, record shipping, run directory)
from llm_locust.client import rateuser
from llm_locust.client.clock import master_wall_s
from llm_locust.client.rateuser import RateUser
from llm_locust.master.rateshape import RateShape  # noqa: F401  (Locust picks the shape up from this module)

rateuser.install()

_PARTS: dict[float, list[float]] = {}
_GC: list[tuple[int, float, float]] = []  # (generation, start, end), wall clock
_gc_start = [0.0]
_last_delay_ns = [0]


def _run_delay_ns() -> int:
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _on_gc(phase: str, info: dict) -> None:
    if phase == "start":
        _gc_start[0] = time.time()
    else:
        _GC.append((int(info.get("generation", -1)), _gc_start[0], time.time()))


gc.callbacks.append(_on_gc)


class ChatUser(RateUser):
    def ready_to_send(self) -> bool:
        scheduled_s, woke_s = self._next_s, master_wall_s(self.environment)
        delay_ns = _run_delay_ns()
        queued_ms, _last_delay_ns[0] = (delay_ns - _last_delay_ns[0]) / 1e6, delay_ns
        ok = super().ready_to_send()
        if ok and scheduled_s is not None:
            _PARTS[scheduled_s] = [woke_s, queued_ms, master_wall_s(self.environment)]
        return ok

    def send(self, prompt, **kwargs):
        record = super().send(prompt, **kwargs)
        parts = _PARTS.get(record.scheduled_s)
        if parts is not None:
            parts.append(record.t_start_s)
        return record


@events.test_stop.add_listener
def _write(environment, **_kwargs) -> None:
    run_dir = getattr(environment.parsed_options, "run_dir", None)
    if not run_dir:
        return
    with open(Path(run_dir) / "lag_parts.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["scheduled_s", "woke_s", "run_delay_ms", "ready_s", "t_start_s"])
        for scheduled_s, parts in sorted(_PARTS.items()):
            if len(parts) == 4:
                writer.writerow([repr(scheduled_s), *map(repr, parts)])
    with open(Path(run_dir) / "gc_pauses.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["generation", "start_s", "end_s"])
        writer.writerows((g, repr(a), repr(b)) for g, a, b in _GC)
