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
import time
from pathlib import Path

from analysis.schema import REQUESTS_CSV, RUN_JSON

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


class RunProgress:
    """The progress line of one run directory (see the module docstring).

    Parameters
    ----------
    run_dir : Path
        The run directory being written.
    started : float
        ``time.monotonic()`` at the launch (the elapsed time counts from it).
    """

    def __init__(self, run_dir: Path, started: float) -> None:
        self.run_dir = run_dir
        self.started = started
        self._requests = LineCounter(run_dir / REQUESTS_CSV)

    def requests(self) -> int:
        """Rows of ``requests.csv`` so far (its header left out)."""
        return max(0, self._requests.count() - 1)

    def step(self) -> str:
        """``step I (U users)`` of a ladder, else ``U users`` from Locust's history, else ``starting``."""
        try:
            meta = json.loads((self.run_dir / RUN_JSON).read_text())  # small, rewritten whole by the master
            steps = meta.get("shape", {}).get("steps", [])
            if steps:
                return f"step {steps[-1]['index']} ({steps[-1]['users']} users)"
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
        row = last_csv_row(self.run_dir / STATS_HISTORY_CSV)
        if row is not None and row.get("User Count") is not None:
            return f"{row['User Count']} users"
        return "starting"

    def line(self) -> str:
        """One line: elapsed s, step or users, requests recorded."""
        return f"  {time.monotonic() - self.started:5.0f} s  {self.step()}  {self.requests()} requests recorded"
