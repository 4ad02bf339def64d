"""Scale (issue 13 item 5): a master with 8 local worker processes against the embedded server.

Every worker's records reach ``requests.csv`` (as many rows as Locust counted), every worker
sent requests, and ``client_report.json`` gives per worker the counts of ``requests.csv``, the
CPU of ``client_load.csv`` and the worker's host and pid - each figure recomputed here from the
files with the csv module alone.
"""

from __future__ import annotations

import csv
import json
import socket
import statistics
import time
from collections import Counter, defaultdict

import pytest

from llm_locust.analysis.report.workers import workers_markdown
from llm_locust.analysis.rundir.reader import load_run
from llm_locust.run.demo import SIM_MODEL
from llm_locust.run.launcher import LocustRun, run_locust
from tests.e2e.fault_helpers import LOCUSTFILES, locust_request_count

pytestmark = pytest.mark.slow

WORKERS = 8


@pytest.fixture(scope="module")
def eight_worker_run(sim_host, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("scale") / "run"
    run = LocustRun(locustfile=LOCUSTFILES / "ladder.py", run_dir=run_dir, workers=WORKERS, timeout_s=90, locust_args=[
        "--host", sim_host, "--model", SIM_MODEL, "--ladder", str(WORKERS), "--dwell-s", "3", "--warmup-s", "1",
        "--max-tokens", "8"])  # fmt: skip
    started = time.monotonic()
    code = run_locust(run, progress_every_s=0)
    print(f"{WORKERS}-worker run: {time.monotonic() - started:.1f} s wall")
    master_log = (run_dir / "locust_master.log").read_text()
    assert code == 0, master_log[-3000:]
    return run_dir, master_log


def read_csv(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_every_record_of_every_worker_is_in_requests_csv(eight_worker_run):
    run_dir, _ = eight_worker_run
    rows = read_csv(run_dir / "requests.csv")
    meta = json.loads((run_dir / "run.json").read_text())
    per_worker = Counter(row["worker_id"] for row in rows)

    assert len(rows) == locust_request_count(run_dir) > 0
    assert len(meta["workers"]) == WORKERS
    assert set(per_worker) == set(meta["workers"])  # the ladder's 8 users: one on each worker
    assert min(per_worker.values()) > 0
    assert meta["workers_lost"] == [] and meta["workers_missing"] == []


def test_client_report_per_worker_equals_the_files(eight_worker_run):
    run_dir, master_log = eight_worker_run
    report = json.loads((run_dir / "client_report.json").read_text())
    rows = read_csv(run_dir / "requests.csv")
    load = read_csv(run_dir / "client_load.csv")
    ok, failed, cpu = Counter(), Counter(), defaultdict(list)
    for row in rows:
        (failed if row["error_kind"] else ok)[row["worker_id"]] += 1
    for row in load:
        cpu[row["worker"]].append(float(row["cpu_cores"]) * 100.0)

    workers = {worker["worker"]: worker for worker in report["workers"]}
    assert len(workers) == WORKERS and sum(w["requests"] for w in workers.values()) == report["requests"]
    for worker_id, worker in workers.items():
        assert (worker["ok"], worker["failed"]) == (ok[worker_id], failed[worker_id]), worker_id
        assert worker["requests"] == ok[worker_id] + failed[worker_id] > 0
        assert len(cpu[worker_id]) >= 2 and worker["load_samples"] == len(cpu[worker_id])  # ~1 s intervals
        assert worker["cpu_mean_percent"] == pytest.approx(statistics.fmean(cpu[worker_id]), rel=1e-9)
        assert worker["cpu_max_percent"] == pytest.approx(max(cpu[worker_id]), rel=1e-9)
        assert worker["host"] == socket.gethostname() and worker["missing"] == []
        assert worker["first_record_s"] < worker["last_record_s"]
    pids = [worker["pid"] for worker in workers.values()]
    assert len(set(pids)) == WORKERS and all(isinstance(pid, int) and pid > 0 for pid in pids)
    assert "per worker (requests from requests.csv" in master_log  # the table the master prints


def test_summary_md_has_one_row_per_worker(eight_worker_run):
    run_dir, _ = eight_worker_run
    lines = workers_markdown(load_run(run_dir))
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| worker")]
    assert lines[0] == "## Load workers" and len(rows) == WORKERS
