"""Several load machines for real: the embedded server, the Locust master and three workers, each
in its own network namespace (its own "host", reached only through its veth and a bridge), started
the way a user starts them on real machines:

    server:   llm-locust sim-server --host 10.247.13.1
    master:   locust -f llm_locust/locustfiles/ladder.py --master --headless --expect-workers 3 --master-bind-host 10.247.13.2 …
    worker:   locust -f llm_locust/locustfiles/ladder.py --worker --master-host 10.247.13.2      (x 3)

The same with ``llm-locust run --workers 0 --remote-workers 3`` as the master (what the Kubernetes
Job in ``k8s/`` runs). The ladder 1, 2, 4, 8 against a batch ceiling of 4 must give ``requests.csv`` rows = Locust's
own count, client_report.json percentiles equal to those computed from ``requests.csv`` (merged
over the three workers' raw values), and the critical concurrency 4. Skipped where namespaces
cannot be made (not root, no ``ip``, refused); in CI (env ``CI`` set) a root without ``ip`` fails.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from llm_locust.analysis.pipeline import analyze_run
from llm_locust.run.launcher import stop_process
from tests.e2e.netns_helpers import NamespaceNetwork, namespaces_unavailable, wait_healthy
from tests.e2e.side_by_side import all_at_once

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
LADDER = ROOT / "llm_locust" / "locustfiles" / "ladder.py"
MAX_NUM_SEQS = 4
WORKERS = 3
PORT = 8000
HOSTS = ["server", "master", *(f"worker{i}" for i in range(WORKERS))]


COMMON = [
    "--model",
    "sim-llama",
    "--ladder",
    "1,2,4,8",
    "--dwell-s",
    "5",
    "--warmup-s",
    "1.5",
    "--max-tokens",
    "32",
    "--scrape-interval-s",
    "0.5",
]


def master_command(kind: str, server_ip: str, master_ip: str, run_dir: Path) -> list[str]:
    """The master as a user starts it: plain Locust, or ``llm-locust run`` waiting for remote workers
    (what the Kubernetes Job runs)."""
    host = ["--host", f"http://{server_ip}:{PORT}"]
    if kind == "locust":
        return [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(LADDER),
            "--master",
            "--headless",
            "--expect-workers",
            str(WORKERS),
            "--master-bind-host",
            master_ip,
            *host,
            *COMMON,
            "--run-dir",
            str(run_dir),
            "--csv",
            str(run_dir / "locust"),
            "--csv-full-history",
            "--only-summary",
        ]
    return [
        sys.executable,
        "-m",
        "llm_locust.cli",
        "run",
        "--workers",
        "0",
        "--remote-workers",
        str(WORKERS),
        "--master-port",
        "5557",
        "--no-analyze",
        "--timeout-s",
        "150",
        "--run-dir",
        str(run_dir),
        *host,
        *COMMON,
    ]


MASTERS = ("locust", "llm-locust-run")


def _multihost_run(kind: str, prefix: str, tmp: Path) -> tuple:
    """One run on its own namespaces (``prefix``): ``(run_dir, exit code, routes, master output, net)``."""
    run_dir = tmp / "run"
    processes: list[subprocess.Popen] = []
    logs = []
    net = NamespaceNetwork(prefix, HOSTS)
    try:
        server_ip, master_ip = net.address["server"], net.address["master"]
        routes = {host: net.routes(host) for host in HOSTS}
        server_log = open(tmp / "server.out", "w")
        logs.append(server_log)
        processes.append(net.popen("server", [
            sys.executable, "-m", "llm_locust.simserver", "--listen", server_ip, "--port", str(PORT),
            "--max-num-seqs", str(MAX_NUM_SEQS), "--model-name", "sim-llama", "--stats-log", str(tmp / "engine.log"),
        ], stdout=server_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))  # fmt: skip
        wait_healthy(net, f"http://{server_ip}:{PORT}/health")
        master_log = open(tmp / "master.out", "w")
        logs.append(master_log)
        master = net.popen(
            "master",
            master_command(kind, server_ip, master_ip, run_dir),
            stdout=master_log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        processes.append(master)
        for index in range(WORKERS):
            log = open(tmp / f"worker{index}.out", "w")
            logs.append(log)
            processes.append(net.popen(f"worker{index}", [
                sys.executable, "-m", "locust", "-f", str(LADDER), "--worker", "--master-host", master_ip,
            ], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))  # fmt: skip
        code = master.wait(timeout=180)
        for worker in processes[2:]:
            try:
                worker.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
    finally:
        for process in reversed(processes):
            stop_process(process, grace_s=10)
        for log in logs:
            log.close()
        net.close()
    return run_dir, code, routes, (tmp / "master.out").read_text(), net


@pytest.fixture(scope="module")
def multihost_runs(tmp_path_factory) -> dict:
    """Both masters' runs side by side, each on its own set of namespaces (the same addresses in
    separate networks) with its own embedded server: light runs, two at once take the time of one
    (:func:`tests.e2e.side_by_side.all_at_once`). ``{master kind: run}``."""
    prefix = f"ll{os.getpid() % 100000}"
    why = namespaces_unavailable(f"{prefix}-probe")
    if why is not None:
        if os.environ.get("CI") and os.geteuid() == 0 and "not installed" in why:
            pytest.fail(f"{why} (.ci/run installs iproute2)")
        pytest.skip(why)
    folders = {kind: tmp_path_factory.mktemp(f"multihost-{kind}") for kind in MASTERS}
    return all_at_once(
        {kind: functools.partial(_multihost_run, kind, f"{prefix}{i}", folders[kind]) for i, kind in enumerate(MASTERS)}
    )


@pytest.fixture(params=MASTERS)
def multihost_run(request, multihost_runs):
    return multihost_runs[request.param]


def test_namespaces_reach_only_their_subnet_and_are_deleted(multihost_run):
    _, _, routes, _, net = multihost_run
    for host, lines in routes.items():
        assert lines == [f"10.247.13.0/24 dev eth0 proto kernel scope link src {net.address[host]}"], host
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not [line for line in listed.splitlines() if line.startswith(f"{net.prefix}-")]
    assert net.created == []


def test_rows_equal_locusts_count_over_three_worker_hosts(multihost_run):
    run_dir, code, _, output, _ = multihost_run
    assert code == 0, output[-3000:]
    requests = pd.read_csv(run_dir / "requests.csv", keep_default_na=False, na_values=[""])
    assert requests["worker_id"].nunique() == WORKERS
    with open(run_dir / "locust_stats.csv") as f:
        aggregated = [line for line in f if ",Aggregated," in line][0].split(",")
    assert int(aggregated[2]) == len(requests) > 50
    report = json.loads((run_dir / "client_report.json").read_text())
    assert report["requests"] == len(requests)


def test_percentiles_are_merged_from_every_workers_raw_values(multihost_run):
    run_dir, _, _, _, _ = multihost_run
    report = json.loads((run_dir / "client_report.json").read_text())
    requests = pd.read_csv(run_dir / "requests.csv", keep_default_na=False, na_values=[""])
    ok = requests[requests["error_kind"].isna()]
    ttft = ok["ttft_ms"].to_numpy(float)
    tpot = ((ok["e2e_ms"] - ok["ttft_ms"]) / (ok["output_tokens"] - 1)).to_numpy(float)
    for name, values in (("ttft", ttft), ("tpot", tpot)):
        p50, p99 = np.percentile(values, [50, 99])
        assert report["latency_ms"][name]["p50"] == pytest.approx(p50, rel=1e-12), name
        assert report["latency_ms"][name]["p99"] == pytest.approx(p99, rel=1e-12), name


def test_knee_at_the_batch_ceiling(multihost_run):
    run_dir, _, _, _, _ = multihost_run
    result = analyze_run(run_dir, write=True)
    assert result.critical.users == MAX_NUM_SEQS, "\n".join(result.critical.evidence)
    assert (run_dir / "report" / "throughput.png").stat().st_size > 10_000
