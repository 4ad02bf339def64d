"""The launcher's progress line during a run, read from the run directory incrementally.

Every few seconds ``llm-locust run`` prints the elapsed time, the current ladder step (numbered
from 0, as in the analysis table) or Locust's user count, and the requests recorded so far. The
count comes from the new bytes of ``requests.csv`` since the previous line (its newlines; a row
being written counts once its newline is there), and the user count from the last line of
``locust_stats_history.csv``: each line costs what was appended since the last one, never a
re-read of a file that grows with the run (a long run's ``requests.csv`` reaches gigabytes).

Why own code: the master writes these files as the run goes; nothing in Locust reports them to
the process that launched it.
"""

from __future__ import annotations

import csv
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

from llm_locust.analysis.console import clock, console_line
from llm_locust.analysis.schema import REQUESTS_CSV, RUN_JSON

STATS_HISTORY_CSV = "locust_stats_history.csv"
"""Locust's ``--csv-full-history`` file (with ``--csv <run_dir>/locust``)."""
TAIL_BYTES = 8192
"""How much of the end of ``locust_stats_history.csv`` is read for its last line, bytes."""


class LineCounter:
    """Newlines in a growing file, counted from where the previous :meth:`count` stopped.

    Parameters
    ----------
    path : Path
        The file (it may not exist yet: the count is then 0).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._lines = 0

    def count(self) -> int:
        """Complete lines in the file now (each read covers only the bytes appended since the last)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                while chunk := f.read(1 << 20):
                    self._lines += chunk.count(b"\n")
                    self._offset += len(chunk)
        except OSError:
            pass
        return self._lines


def last_csv_row(path: Path, *, tail_bytes: int = TAIL_BYTES) -> dict[str, str] | None:
    """The last complete row of a CSV file with a header, read from its end (None: no row).

    Only the header line and the last ``tail_bytes`` bytes are read.
    """
    try:
        with open(path, "rb") as f:
            header = f.readline()
            f.seek(0, 2)
            size = f.tell()
            start = max(len(header), size - tail_bytes)
            f.seek(start)
            tail = f.read(size - start)
    except OSError:
        return None
    lines = tail.split(b"\n")[:-1]  # the part after the last newline is a row being written
    if start > len(header):
        lines = lines[1:]  # the first piece may be the end of a longer row
    if not header.strip() or not lines or not lines[-1].strip():
        return None
    rows = list(csv.reader([header.decode("utf-8", "replace"), lines[-1].decode("utf-8", "replace")]))
    return dict(zip(rows[0], rows[1])) if len(rows) == 2 else None


@dataclass(frozen=True, slots=True)
class Plan:
    """What a run is to do, from its Locust flags: the step count and each step's length, s, of a
    ladder or rate ladder; or the run time of ``--shape none``; or the baseline's request count."""

    steps: int | None = None
    dwell_s: float = 0.0
    run_time_s: float | None = None
    requests: int | None = None


def plan_of(locustfile: str, locust_args: list[str]) -> Plan:
    """The :class:`Plan` of a run of ``locustfile`` (a name of ``llm_locust/locustfiles/``) with these flags.

    >>> plan_of("ladder.py", ["--ladder", "1,2,4", "--dwell-s", "10"])
    Plan(steps=3, dwell_s=10.0, run_time_s=None, requests=None)
    >>> plan_of("chat_stream.py", ["-t", "2m"]).run_time_s
    120.0
    """
    import argparse

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--ladder", default="1,2,4,8")
    parser.add_argument("--rates", default="")
    parser.add_argument("--rate", type=float, default=0.0)
    parser.add_argument("--dwell-s", type=float, default=20.0)
    parser.add_argument("--baseline-requests", type=int, default=10)
    parser.add_argument("-t", "--run-time", default="")
    try:
        known = parser.parse_known_args(locust_args)[0]
    except SystemExit:  # a malformed value: Locust's own parser says so
        return Plan()
    name = Path(locustfile).name
    if name == "ladder.py":
        return Plan(steps=len(known.ladder.split(",")), dwell_s=known.dwell_s)
    if name == "rate.py":
        return Plan(steps=len(known.rates.split(",")) if known.rates else 1, dwell_s=known.dwell_s)
    if name == "baseline.py":
        return Plan(requests=known.baseline_requests)
    if known.run_time:
        units = {"h": 3600, "m": 60, "s": 1}
        total = sum(float(n) * units[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)([hms])", known.run_time))
        return Plan(run_time_s=total or None)
    return Plan()


class RunProgress:
    """The progress line of one run directory (see the module docstring).

    Parameters
    ----------
    run_dir : Path
        The run directory being written.
    started : float
        ``time.monotonic()`` at the launch (the elapsed time counts from it).
    """

    def __init__(self, run_dir: Path, started: float, plan: Plan | None = None) -> None:
        self.run_dir = run_dir
        self.started = started
        self.plan = plan or Plan()
        self._requests = LineCounter(run_dir / REQUESTS_CSV)

    def requests(self) -> int:
        """Rows of ``requests.csv`` so far (its header left out)."""
        return max(0, self._requests.count() - 1)

    def _last_step(self) -> dict | None:
        try:
            meta = json.loads((self.run_dir / RUN_JSON).read_text())  # small, rewritten whole by the master
            steps = meta.get("shape", {}).get("steps", [])
            return steps[-1] if steps and isinstance(steps[-1], dict) else None
        except (OSError, ValueError, TypeError, AttributeError):
            return None

    def step(self) -> str:
        """``step I of N, U users`` of a ladder (I from 1), else ``U users`` from Locust's
        history, else ``starting``."""
        last = self._last_step()
        if last is not None and "index" in last:
            of = f" of {self.plan.steps}" if self.plan.steps else ""
            return f"step {int(last['index']) + 1}{of}, {last.get('users', '?')} users"
        row = last_csv_row(self.run_dir / STATS_HISTORY_CSV)
        if row is not None and row.get("User Count") is not None:
            return f"{row['User Count']} users"
        return "starting"

    def left_s(self, now_wall: float | None = None) -> float | None:
        """Seconds of load left by the plan (the steps still to come and the rest of this one,
        or the rest of ``-t``), None when the plan does not say."""
        now_wall = time.time() if now_wall is None else now_wall
        plan = self.plan
        last = self._last_step()
        if plan.steps and plan.dwell_s and last is not None and "start_s" in last:
            into_s = now_wall - float(last["start_s"])
            return (plan.steps - int(last["index"]) - 1) * plan.dwell_s + max(0.0, plan.dwell_s - into_s)
        if plan.run_time_s:
            return max(0.0, plan.run_time_s - (time.monotonic() - self.started))
        return None

    def line(self) -> str:
        """One line in Locust's console style: step or users, elapsed, time left, requests recorded."""
        requests = self.requests()
        counted = f"{requests} of {self.plan.requests}" if self.plan.requests else f"{requests}"
        left = self.left_s()
        parts = [self.step(), f"{clock(time.monotonic() - self.started)} elapsed"]
        if left is not None:
            parts.append(f"~{clock(left)} left")
        parts.append(f"{counted} requests recorded")
        return console_line(", ".join(parts))
