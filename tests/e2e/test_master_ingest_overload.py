"""A master offered records faster than it writes them: backpressure, on-time stop, no loss.

A real Locust master (llm-locust's recorder) and one real worker whose user produces fake records
in bulk (``benchmarks/ingest_locustfile.py``: counted in Locust's stats, queued on the worker's
record shipper as a real request's would be) as fast as it can, with a small window
(``--records-window``), so the master is offered at least 3 times what it takes during the test.
Checked: the worker held records back (the master's window),
the run's time limit fired on time and no worker was lost while the master was busy writing,
Locust's request count equals the rows of ``requests.csv`` (and the records produced), and
``run.json`` reports the lag.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from llm_locust.run.launcher import free_port, stop_process

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
LOCUSTFILE = REPO / "benchmarks" / "ingest_locustfile.py"
RECORDS = 60_000
RUN_TIME_S = 4
WINDOW = 10_000
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")


def _stamp(log: str, needle: str) -> float:
    for line in log.splitlines():
        if needle in line and (match := STAMP.match(line)):
            return datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    raise AssertionError(f"{needle!r} not in the master's log:\n{log[-3000:]}")


def test_overloaded_master_holds_back_workers_stops_on_time_and_loses_nothing(tmp_path):
    started = time.monotonic()
    port = free_port()
    run_dir = tmp_path / "run"
    master_log, worker_log = tmp_path / "master.log", tmp_path / "worker.log"
    common = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE)]
    with open(master_log, "w") as mlog, open(worker_log, "w") as wlog:
        master = subprocess.Popen(
            [*common, "--master", "--headless", "--expect-workers", "1", "--master-bind-host", "127.0.0.1",
             "--master-bind-port", str(port), "-u", "1", "-r", "1", "-t", f"{RUN_TIME_S}s", "--run-dir", str(run_dir),
             "--csv", str(run_dir / "locust"), "--only-summary", "--fake-records", str(RECORDS), "--fake-tokens", "8",
             "--records-window", str(WINDOW), "--stop-timeout", "0"],
            stdout=mlog, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO,
        )  # fmt: skip
        worker = subprocess.Popen(
            [*common, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
            stdout=wlog, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO,
        )  # fmt: skip
        try:
            assert master.wait(timeout=60) == 0, master_log.read_text()[-3000:]
            worker.wait(timeout=10)
        finally:
            stop_process(master, grace_s=5)
            stop_process(worker, grace_s=5)
    log = master_log.read_text()
    meta = json.loads((run_dir / "run.json").read_text())
    ingest = meta["ingest"]
    with open(run_dir / "requests.csv", newline="") as f:
        rows = sum(1 for _ in csv.reader(f)) - 1
    with open(run_dir / "locust_stats.csv", newline="") as f:
        locust_count = int(next(row for row in csv.DictReader(f) if row["Name"] == "Aggregated")["Request Count"])
    # the master was offered at least 3 times what it took during the test; the worker held the rest back
    assert locust_count >= 3 * ingest["records_at_test_stop"], ingest
    assert ingest["peak_held_records"] > 0
    # the time limit fired on time while records were being written, and no worker went missing
    limit_set = _stamp(log, f"Run time limit set to {RUN_TIME_S} seconds")
    limit_hit = _stamp(log, "--run-time limit reached")
    assert RUN_TIME_S - 0.5 <= limit_hit - limit_set <= RUN_TIME_S + 1.5, log[-3000:]
    assert "failed to send heartbeat" not in log and meta["workers_lost"] == []
    # nothing lost: Locust's count and the rows of requests.csv agree
    assert locust_count == rows == ingest["records"] > 0
    # the lag is reported: the last records waited at least the time between the end of production and the stop
    assert ingest["max_lag_s"] > 0 and "records ingested" in log
    print(f"records {rows}; at the stop {ingest['records_at_test_stop']}; master {ingest['records_per_busy_s']} "
          f"records/s busy; lag max {ingest['max_lag_s']} s; held {ingest['peak_held_records']}; "
          f"wall {time.monotonic() - started:.1f} s")  # fmt: skip
