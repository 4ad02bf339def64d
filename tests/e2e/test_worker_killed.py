"""A worker SIGKILLed mid-ladder, or SIGSTOPped (a worker whose host vanished: silent, no FIN), as
in issue 14: the run completes, requests.csv still equals Locust's count, run.json's
``workers_lost`` names the worker with a time inside the step, the client report and the console
say what was lost, and the users come back on the surviving worker — the rest of the step and the
later steps reach their target in-flight again."""

from __future__ import annotations

import functools
import json
import os
import signal
import time
from pathlib import Path

import pytest

from llm_locust.run.demo import SIM_MODEL, start_sim_server
from llm_locust.run.launcher import LocustRun, free_port, stop_process
from tests.e2e.fault_helpers import (
    LOCUSTFILES,
    locust_request_count,
    mean_in_flight,
    read_requests,
    run_meta,
    start_locust,  # fmt: skip
    wait_for_step,
)
from tests.e2e.side_by_side import all_at_once

pytestmark = pytest.mark.slow

DWELL_S, WARMUP_S = 16.0, 2.0
KILL_AFTER_S = 5.0
"""Into step 0 (2 users, one on each worker): after the worker's first report with records (a
worker reports every 3 s), so it has shipped some."""
RECOVERY_S = 6.0
"""Locust marks a worker missing after 3 missed 1-s heartbeats; the shape notices within its next
1-s tick and the users are spawned again: within about 5 s of the kill."""


SIGNALS = ("SIGKILL", "SIGSTOP")


def _killed_worker_run(signal_name: str, tmp: Path) -> tuple[Path, int | None, float]:
    """A ladder run whose first worker gets ``signal_name`` in step 0: ``(run_dir, exit code, kill time)``."""
    run_dir = tmp / "run"
    port = free_port()
    server = start_sim_server(port=port, max_num_seqs=8, log_path=tmp / "server.log")
    run = LocustRun(locustfile=LOCUSTFILES / "ladder.py", run_dir=run_dir, workers=2, locust_args=[
        "--host", f"http://127.0.0.1:{port}", "--model", SIM_MODEL, "--ladder", "2,4", "--dwell-s", str(DWELL_S),
        "--warmup-s", str(WARMUP_S), "--max-tokens", "16", "--drain-s", "5"])  # fmt: skip
    master, workers, logs = start_locust(run)
    try:
        wait_for_step(run_dir, 0)
        time.sleep(KILL_AFTER_S)
        killed_at = time.time()
        os.kill(workers[0].pid, getattr(signal, signal_name))
        master.wait(timeout=120)
    finally:
        if workers[0].poll() is None:
            os.kill(workers[0].pid, signal.SIGKILL)  # a stopped process would not act on SIGTERM
            workers[0].wait(timeout=10)
        for process in [master, *workers]:
            stop_process(process, grace_s=5)
        stop_process(server, grace_s=5)
        for log in logs:
            log.close()
    return run_dir, master.returncode, killed_at


@pytest.fixture(scope="module")
def killed_worker_runs(tmp_path_factory) -> dict:
    """Both runs side by side, each on its own embedded server (a light run: two at once take the
    time of one, :func:`tests.e2e.side_by_side.all_at_once`): ``{signal name: (run_dir, exit code, kill time)}``."""
    folders = {name: tmp_path_factory.mktemp(f"killed-{name}") for name in SIGNALS}
    return all_at_once({name: functools.partial(_killed_worker_run, name, folders[name]) for name in SIGNALS})


@pytest.fixture(params=SIGNALS)
def killed_worker_run(request, killed_worker_runs):
    return killed_worker_runs[request.param]


def test_the_run_completes_and_keeps_every_counted_request(killed_worker_run):
    run_dir, returncode, _ = killed_worker_run
    meta = run_meta(run_dir)
    assert meta["ended_at_s"] is not None and len(meta["shape"]["steps"]) == 2, returncode
    requests = read_requests(run_dir)
    assert len(requests) == locust_request_count(run_dir) > 0
    assert (requests["error_kind"] == "").all(), requests["error_kind"].value_counts()


def test_workers_lost_names_the_killed_worker_within_the_step(killed_worker_run):
    run_dir, _, killed_at = killed_worker_run
    meta = run_meta(run_dir)
    requests = read_requests(run_dir)
    # the killed worker is the one whose requests stop at the kill; the other one goes on
    after = set(requests.loc[requests["t_start_s"] > killed_at + 1.0, "worker_id"])
    assert len(after) == 1 and set(meta["workers"]) - after != set()
    [killed] = set(meta["workers"]) - after
    assert (requests["worker_id"] == killed).sum() > 0
    assert requests.loc[requests["worker_id"] == killed, "t_start_s"].max() <= killed_at

    [loss] = meta["workers_lost"]
    assert set(loss) == {"worker", "lost_at_s", "last_record_s"}
    assert loss["worker"] == killed
    step = meta["shape"]["steps"][0]
    assert step["start_s"] <= loss["lost_at_s"] <= step["end_s"]
    assert killed_at - 1.5 <= loss["lost_at_s"] <= killed_at + 0.1  # last heard from: within a heartbeat
    ends = requests.loc[requests["worker_id"] == killed, "end_s"]
    assert loss["last_record_s"] == pytest.approx(ends.max(), abs=1e-3)  # its last shipped record

    report = json.loads((run_dir / "client_report.json").read_text())
    [reported] = report["workers_lost"]
    assert reported["worker"] == killed and 0 <= reported["unshipped_s"] <= 3.0 + 1.0

    # the missing spell: from its last word to the run's end (never back); Locust marks a worker
    # missing after 3 missed 1-s heartbeats, the watch sees it within its next 1-s poll
    [spell] = meta["workers_missing"]
    assert spell["worker"] == killed and spell["from_s"] == loss["lost_at_s"] and spell["to_s"] is None
    assert spell["from_s"] + 3.0 <= spell["noticed_s"] <= spell["from_s"] + 15.0
    workers = {worker["worker"]: worker for worker in report["workers"]}
    assert set(workers) == set(meta["workers"])
    assert workers[killed]["missing"] == [{"from_s": spell["from_s"], "to_s": meta["ended_at_s"], "until": "run_end",
                                           "missing_s": pytest.approx(meta["ended_at_s"] - spell["from_s"])}]  # fmt: skip
    for worker, entry in workers.items():
        assert entry["requests"] == (requests["worker_id"] == worker).sum()
    console = (run_dir / "locust_master.log").read_text()
    assert f"worker lost: {killed}" in console and "only loss" in console


def test_the_users_come_back_on_the_surviving_worker(killed_worker_run):
    run_dir, _, killed_at = killed_worker_run
    steps = run_meta(run_dir)["shape"]["steps"]
    requests = read_requests(run_dir)
    # the rest of step 0 after the recovery, and the whole steady window of step 1
    assert mean_in_flight(requests, killed_at + RECOVERY_S, steps[0]["end_s"]) == pytest.approx(2.0, abs=0.15)
    assert mean_in_flight(requests, steps[1]["start_s"] + WARMUP_S, steps[1]["end_s"]) == pytest.approx(4.0, abs=0.2)


def test_the_verdict_names_the_lost_worker_not_a_slow_client(killed_worker_run):
    """Step 0 ran short while the killed worker's user was gone: the verdict blames the loss
    (evidence worker_lost) and asks why it happened, not for more workers."""
    from llm_locust.analysis.pipeline import analyze_run

    run_dir, _, _ = killed_worker_run
    verdict = analyze_run(run_dir, write=False).verdict
    assert verdict is not None
    [loss] = run_meta(run_dir)["workers_lost"]
    assert bool(verdict.table["worker_gone"].iloc[0]) and loss["worker"] in verdict.table["invalid_reason"].iloc[0]
    client = next(e for e in verdict.evidence if e.rule == "client")
    assert client.values["worker_lost"] == 1.0, client.text
    changes = [r.change for r in verdict.recommendations]
    assert changes and not any(c.startswith("add load") for c in changes), changes
    assert any(c.startswith("find why the load worker was lost") for c in changes), changes
