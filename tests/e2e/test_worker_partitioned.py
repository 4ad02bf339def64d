"""A worker cut off by the network mid-ladder (issue 27, item 4), on real "machines": the embedded
server, the master and two workers each in a network namespace of their own
(:mod:`tests.e2e.netns_helpers`), the worker's link dropped 4 s into step 0.

- ``down``: the worker's own interface goes down (``ip link set eth0 down``) for the rest of the run;
- ``back``: the switch's port to it goes down, and up again once the worker has quit; then a worker
  is started again on that "host", as the Kubernetes Deployment in ``k8s/`` restarts its pod.

What Locust and this package do, read from ``locust/runners.py`` (2.47): the master marks the
worker ``missing`` 4-5 s after its last heartbeat (``heartbeat_worker``, ``HEARTBEAT_LIVENESS``
3); the shape dispatches its users to the worker left (:mod:`llm_locust.master.shapes`); the cut
worker hears no heartbeat from the master and quits 5 s after the last
(:mod:`llm_locust.client.masterwatch`, exit code 1). What it wrote meanwhile stays in its kernel
and arrives when the link is back, after the process is gone: Locust's master took those stale
heartbeats for the worker healing, dispatched users to it and marked it missing again 4-5 s
later; :mod:`llm_locust.master.healgate` now holds them until the worker answers a ping, which a
dead one never does (``back`` failed before it: the step at one user for 4 s more, ``workers_lost``
at the second silence). Stale ``stats`` reports are taken as Locust takes them (from any worker):
a record arrives once, counted once. A worker started again joins with a new client id - a new
worker, never the lost one back - and Locust dispatches the users again, stopping one on the
worker left: its request is ``interrupted`` mid-run, which is not the run's stop (the analysis read
step 1 as 'the run was stopped during this step' before).

So the cut is reported like a killed worker (tests/e2e/test_worker_killed.py), and the numbers
are checked against the server's own access log, which names each request's client address -
each namespace's: the worker left and the restarted one have every request the server completed
for them in ``requests.csv``, exactly once; the cut worker lacks only those it had not shipped yet
(at most one report interval's worth, plus the one in flight).
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llm_locust.run.launcher import stop_process
from tests.e2e.fault_helpers import locust_request_count, mean_in_flight, read_requests, run_meta, wait_for_step
from tests.e2e.netns_helpers import NamespaceNetwork, namespaces_unavailable, wait_healthy
from tests.e2e.side_by_side import all_at_once

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
LADDER = ROOT / "llm_locust" / "locustfiles" / "ladder.py"
PORT = 8000
HOSTS = ["server", "master", "worker0", "worker1"]
DWELL_S, WARMUP_S = 16.0, 2.0
CUT_AFTER_S = 4.0
"""Into step 0 (2 users, one per worker): after the cut worker's first report with records
(a worker reports every 3 s), so it has shipped some."""
RECOVERY_S = 7.0
"""After the cut: Locust marks the worker missing within 5 s of its last heartbeat, the shape
gives its user to the worker left at its next 1-s tick."""
REPORT_INTERVAL_S = 3.0
"""Locust's ``WORKER_REPORT_INTERVAL``: what a lost worker had not shipped is at most this old."""
SCENARIOS = ("down", "back")
_ACCESS = re.compile(r'^INFO: +(?P<ip>[0-9.]+):\d+ - "POST /v1/chat/completions HTTP/[0-9.]+" (?P<status>\d+)')


def _worker(net: NamespaceNetwork, host: str, log) -> subprocess.Popen:
    return net.popen(host, [sys.executable, "-m", "locust", "-f", str(LADDER), "--worker", "--master-host",
                            net.address["master"]], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip


def _partitioned_run(scenario: str, prefix: str, tmp: Path) -> dict:
    """One ladder 2, 4 on its own namespaces whose worker0 is cut off in step 0 (module docstring):
    ``{"run_dir", "code", "cut_at_s", "pids": {host: [pid, ...]}, "cut_exit", "server_log", "ips"}``."""
    run_dir = tmp / "run"
    processes: list[subprocess.Popen] = []
    logs = []
    net = NamespaceNetwork(prefix, HOSTS)
    result: dict = {"run_dir": run_dir, "tmp": tmp, "ips": dict(net.address), "pids": {}}
    try:
        server_ip, master_ip = net.address["server"], net.address["master"]
        logs.append(open(tmp / "server.out", "w"))
        processes.append(net.popen("server", [
            sys.executable, "-m", "llm_locust.simserver", "--listen", server_ip, "--port", str(PORT),
            "--max-num-seqs", "8", "--model-name", "sim-llama", "--stats-log", str(tmp / "engine.log"),
        ], stdout=logs[-1], stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))  # fmt: skip
        wait_healthy(net, f"http://{server_ip}:{PORT}/health")
        logs.append(open(tmp / "master.out", "w"))
        master = net.popen("master", [
            sys.executable, "-m", "locust", "-f", str(LADDER), "--master", "--headless", "--expect-workers", "2",
            "--master-bind-host", master_ip, "--host", f"http://{server_ip}:{PORT}", "--model", "sim-llama",
            "--ladder", "2,4", "--dwell-s", str(DWELL_S), "--warmup-s", str(WARMUP_S), "--max-tokens", "16",
            "--drain-s", "5", "--run-dir", str(run_dir), "--csv", str(run_dir / "locust"), "--only-summary",
        ], stdout=logs[-1], stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip
        processes.append(master)
        workers = {}
        for host in ("worker0", "worker1"):
            logs.append(open(tmp / f"{host}.out", "w"))
            workers[host] = _worker(net, host, logs[-1])
            processes.append(workers[host])
            result["pids"][host] = [workers[host].pid]
        wait_for_step(run_dir, 0)
        time.sleep(CUT_AFTER_S)
        result["cut_at_s"] = time.time()
        net.set_link("worker0", up=False, side="host" if scenario == "down" else "switch")
        try:
            result["cut_exit"] = workers["worker0"].wait(timeout=15)  # quits on the master's silence
        except subprocess.TimeoutExpired:
            result["cut_exit"] = None
        result["cut_quit_s"] = time.time()
        if scenario == "back":
            net.set_link("worker0", up=True, side="switch")
            logs.append(open(tmp / "worker0-again.out", "w"))
            again = _worker(net, "worker0", logs[-1])
            processes.append(again)
            result["pids"]["worker0"].append(again.pid)
        result["code"] = master.wait(timeout=120)
    finally:
        for process in reversed(processes):
            stop_process(process, grace_s=10)
        for log in logs:
            log.close()
        net.close()
    result["server_log"] = (tmp / "engine.log").read_text()
    return result


@pytest.fixture(scope="module")
def partitioned_runs(tmp_path_factory) -> dict:
    """Both scenarios side by side, each on its own namespaces and embedded server (light runs: two
    at once take the time of one): ``{scenario: run}``."""
    prefix = f"lp{os.getpid() % 100000}"
    why = namespaces_unavailable(f"{prefix}-probe")
    if why is not None:
        if os.environ.get("CI") and os.geteuid() == 0 and "not installed" in why:
            pytest.fail(f"{why} (.ci/run installs iproute2)")
        pytest.skip(why)
    folders = {name: tmp_path_factory.mktemp(f"partition-{name}") for name in SCENARIOS}
    return all_at_once({name: functools.partial(_partitioned_run, name, f"{prefix}{i}", folders[name])
                        for i, name in enumerate(SCENARIOS)})  # fmt: skip


@pytest.fixture(params=SCENARIOS)
def partitioned_run(request, partitioned_runs) -> dict:
    return partitioned_runs[request.param]


def _served_by_ip(server_log: str) -> dict[str, int]:
    """The server's own count of chat requests per client address (its access log)."""
    counts: dict[str, int] = {}
    for line in server_log.splitlines():
        if match := _ACCESS.match(line):
            counts[match["ip"]] = counts.get(match["ip"], 0) + 1
    return counts


def _worker_ids(run: dict) -> dict[int, str]:
    """pid -> Locust client id, from run.json ``worker_processes`` (each worker reports its pid)."""
    return {entry["pid"]: entry["worker"] for entry in run_meta(run["run_dir"])["worker_processes"]}


def test_the_cut_worker_quits_and_the_run_completes(partitioned_run):
    meta = run_meta(partitioned_run["run_dir"])
    assert partitioned_run["code"] == 0 and meta["ended_at_s"] is not None and len(meta["shape"]["steps"]) == 2
    # it stopped on the master's silence, 5 s after the last heartbeat it heard (<= 1 s before the cut)
    assert partitioned_run["cut_exit"] == 1
    assert partitioned_run["cut_quit_s"] - partitioned_run["cut_at_s"] <= 5.0 + 0.25 + 1.5
    assert "no heartbeat from the master" in (partitioned_run["tmp"] / "worker0.out").read_text()


def test_every_request_the_server_served_is_recorded_once(partitioned_run):
    run_dir = partitioned_run["run_dir"]
    requests = read_requests(run_dir)
    ids = _worker_ids(partitioned_run)
    served = _served_by_ip(partitioned_run["server_log"])
    ips = partitioned_run["ips"]
    assert len(requests) == locust_request_count(run_dir) > 0
    assert requests["response_id"].is_unique
    # a user stopped by a re-dispatch (the restarted worker joining) leaves a request the server never finished
    interrupted = requests["error_kind"] == "interrupted"
    assert set(requests["error_kind"]) <= {"", "interrupted"} and interrupted.sum() <= 2
    assert (requests.loc[interrupted, "end_s"] < run_meta(run_dir)["shape"]["steps"][-1]["end_s"] - 5.0).all()
    rows = requests.loc[~interrupted, "worker_id"].value_counts().to_dict()
    # the worker left: the server's count for its address, exactly
    [left] = [ids[pid] for pid in partitioned_run["pids"]["worker1"]]
    assert rows[left] == served[ips["worker1"]] > 0
    # the cut worker (and the one started again on its host): all but what it had not shipped
    cut, *again = [ids[pid] for pid in partitioned_run["pids"]["worker0"]]
    recorded = rows.get(cut, 0) + sum(rows.get(worker, 0) for worker in again)
    shortest_s = float(requests.loc[~interrupted, "e2e_ms"].min()) / 1000.0
    unshipped = served[ips["worker0"]] - recorded
    assert 0 <= unshipped <= REPORT_INTERVAL_S / shortest_s + 1, (served, rows)
    assert requests.loc[requests["worker_id"] == cut, "t_start_s"].max() <= partitioned_run["cut_at_s"]
    if again:
        [back] = again
        assert back != cut and rows[back] > 0  # a new worker, never the lost one counted again
        assert requests.loc[requests["worker_id"] == back, "t_start_s"].min() > partitioned_run["cut_quit_s"]


def test_reported_like_a_killed_worker(partitioned_run):
    run_dir, cut_at = partitioned_run["run_dir"], partitioned_run["cut_at_s"]
    meta = run_meta(run_dir)
    cut = _worker_ids(partitioned_run)[partitioned_run["pids"]["worker0"][0]]
    [loss] = meta["workers_lost"]
    assert loss["worker"] == cut
    step = meta["shape"]["steps"][0]
    assert step["start_s"] <= loss["lost_at_s"] <= step["end_s"]
    assert cut_at - 1.5 <= loss["lost_at_s"] <= cut_at + 0.1  # last heard from: within a heartbeat of the cut
    [spell] = meta["workers_missing"]
    assert spell["worker"] == cut and spell["to_s"] is None  # never back: the restarted one is another worker
    assert f"worker lost: {cut}" in (partitioned_run["tmp"] / "master.out").read_text()


def test_the_users_come_back_on_the_worker_left(partitioned_run):
    run_dir, cut_at = partitioned_run["run_dir"], partitioned_run["cut_at_s"]
    steps = run_meta(run_dir)["shape"]["steps"]
    requests = read_requests(run_dir)
    assert mean_in_flight(requests, cut_at + RECOVERY_S, steps[0]["end_s"]) == pytest.approx(2.0, abs=0.15)
    assert mean_in_flight(requests, steps[1]["start_s"] + WARMUP_S, steps[1]["end_s"]) == pytest.approx(4.0, abs=0.2)


def test_the_step_it_fell_in_is_marked_and_the_next_is_judged(partitioned_run):
    from llm_locust.analysis.pipeline import analyze_run

    meta = run_meta(partitioned_run["run_dir"])
    table = analyze_run(partitioned_run["run_dir"], write=False).verdict.table
    [loss] = meta["workers_lost"]
    assert bool(table["worker_gone"].iloc[0]) and loss["worker"] in table["invalid_reason"].iloc[0]
    assert not bool(table["worker_gone"].iloc[1]) and bool(table["valid"].iloc[1]), table["invalid_reason"].iloc[1]
    assert not table["incomplete"].any()
