"""SIGTERM (CI cancellation, ``docker stop``, Kubernetes) stops a run the way Ctrl-C does: the data
so far kept, the client report and the analysis written, exit 143, and every process the run
started gone (issue 14). Also plain ``locust --master`` receiving SIGTERM: the run directory is
still completed."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from llm_locust.run.demo import SIM_MODEL
from llm_locust.run.launcher import free_port, stop_process

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def data_rows(path: Path) -> int:
    try:
        with open(path, newline="") as f:
            return max(0, sum(1 for _ in csv.reader(f)) - 1)
    except OSError:
        return 0


def locust_request_count(run_dir: Path) -> int:
    """Locust's own total request count (the Aggregated row of its --csv stats file)."""
    with open(run_dir / "locust_stats.csv", newline="") as f:
        (total,) = [row for row in csv.DictReader(f) if row["Name"] == "Aggregated"]
    return int(total["Request Count"])


def descendants(pid: int) -> dict[int, tuple[float, str]]:
    """``{pid: (create_time, command line)}`` of every process below ``pid`` (create_time tells a
    reused PID apart)."""
    found = {}
    for child in psutil.Process(pid).children(recursive=True):
        try:
            found[child.pid] = (child.create_time(), " ".join(child.cmdline()))
        except psutil.NoSuchProcess:
            pass
    return found


def survivors(started: dict[int, tuple[float, str]]) -> list[int]:
    alive = []
    for pid, (created, _) in started.items():
        try:
            process = psutil.Process(pid)
            if process.create_time() == created and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def terminate_mid_run(
    process: subprocess.Popen, run_dir: Path, *, min_rows: int, expect_children: int, timeout_s: float = 90.0
) -> tuple[dict[int, tuple[float, str]], str]:
    """Wait until ``requests.csv`` holds ``min_rows`` rows, note the process tree, SIGTERM the
    top process by PID, wait for it; returns (the tree, its output)."""
    deadline = time.monotonic() + timeout_s
    tree: dict[int, tuple[float, str]] = {}
    while data_rows(run_dir / "requests.csv") < min_rows or len(tree) < expect_children:
        assert process.poll() is None, process.communicate()[0]
        assert time.monotonic() < deadline, f"no {min_rows} rows within {timeout_s} s"
        tree.update(descendants(process.pid))
        time.sleep(0.3)
    tree.update(descendants(process.pid))
    process.send_signal(signal.SIGTERM)
    try:
        out, _ = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        for pid in [process.pid, *tree]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        raise
    return tree, out


def cleanup(tree: dict[int, tuple[float, str]]) -> None:
    for pid in survivors(tree):
        os.kill(pid, signal.SIGKILL)


def test_sigterm_to_run_stops_it_gracefully_keeps_the_data_and_leaves_no_process(sim_host, tmp_path):
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "llm_locust.cli", "run", "--host", sim_host, "--ladder", "1,2", "--dwell-s", "60",
         "--warmup-s", "1", "--max-tokens", "16", "--workers", "2", "--run-dir", str(run_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
    )  # fmt: skip
    tree, out = terminate_mid_run(process, run_dir, min_rows=3, expect_children=3)
    try:
        assert process.returncode == 143, out
        assert "terminated (SIGTERM): stopping the run, keeping the data so far" in out
        assert "Traceback" not in out
        commands = [command for _, command in tree.values()]
        assert (
            sum("--master" in c.split() for c in commands) == 1 and sum("--worker" in c.split() for c in commands) == 2
        ), commands
        assert survivors(tree) == []
        rows = data_rows(run_dir / "requests.csv")
        assert rows >= 3 and rows == locust_request_count(run_dir)
        assert json.loads((run_dir / "client_report.json").read_text())["requests"] == rows
        assert json.loads((run_dir / "run.json").read_text())["ended_at_s"] is not None
        # stopped in step 0: one load level, so the timeline and no curve against concurrency
        assert (run_dir / "report" / "summary.md").is_file() and (run_dir / "report" / "timeline.png").is_file()
    finally:
        cleanup(tree)


def test_sigterm_to_demo_stops_its_embedded_server_too(tmp_path):
    run_dir = tmp_path / "demo"
    process = subprocess.Popen(
        [sys.executable, "-m", "llm_locust.cli", "demo", "--ladder", "1,2", "--dwell-s", "60", "--warmup-s", "1",
         "--max-tokens", "16", "--workers", "1", "--run-dir", str(run_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
    )  # fmt: skip
    tree, out = terminate_mid_run(process, run_dir, min_rows=3, expect_children=3)
    try:
        assert process.returncode == 143, out
        commands = [command for _, command in tree.values()]
        assert sum("llm_locust.simserver" in c for c in commands) == 1, commands
        assert (
            sum("--master" in c.split() for c in commands) == 1 and sum("--worker" in c.split() for c in commands) == 1
        ), commands
        assert survivors(tree) == []
        rows = data_rows(run_dir / "requests.csv")
        assert rows >= 3 and rows == locust_request_count(run_dir)
        assert (run_dir / "client_report.json").is_file()
        assert (run_dir / "report" / "summary.md").is_file()
    finally:
        cleanup(tree)


def test_sigterm_to_a_plain_locust_master_still_completes_the_run_directory(sim_host, tmp_path):
    run_dir = tmp_path / "plain"
    port = free_port()
    master = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", str(REPO / "llm_locust" / "locustfiles" / "ladder.py"), "--master", "--headless",
         "--expect-workers", "1", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
         "--host", sim_host, "--model", SIM_MODEL, "--ladder", "1,2", "--dwell-s", "60", "--warmup-s", "1",
         "--max-tokens", "16", "--run-dir", str(run_dir), "--csv", str(run_dir / "locust"), "--only-summary"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
    )  # fmt: skip
    worker = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", str(REPO / "llm_locust" / "locustfiles" / "ladder.py"), "--worker",
         "--master-host", "127.0.0.1", "--master-port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO,
    )  # fmt: skip
    try:
        _, out = terminate_mid_run(master, run_dir, min_rows=3, expect_children=0)
        assert master.returncode == 0, out  # Locust's Ctrl-C path: its own exit code
        assert "Traceback" not in out
        worker.wait(timeout=30)  # the master's quit message reached it
        rows = data_rows(run_dir / "requests.csv")
        assert rows >= 3 and rows == locust_request_count(run_dir)
        assert json.loads((run_dir / "client_report.json").read_text())["requests"] == rows
        assert json.loads((run_dir / "run.json").read_text())["ended_at_s"] is not None
    finally:
        stop_process(worker, grace_s=5)
        stop_process(master, grace_s=5)
