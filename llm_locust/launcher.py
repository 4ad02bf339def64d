"""Start a real Locust master and N local worker processes for one run, and wait for them.

This is Locust's own master/worker mode (ZeroMQ on loopback), started as separate OS processes,
not a distribution layer of ours: the same locustfile and flags work with workers on other
machines (``locust -f … --worker --master-host …``) or in Kubernetes (``k8s/``).

Every process this module starts is stopped by it, by PID, if it is still running at the end.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

GRACE_S = 30.0
"""How long processes get to exit on their own after SIGTERM."""
WORKER_EXIT_GRACE_S = 5.0
"""How long workers get to exit on their own once the master has ended. Locust forgets a worker
that reported it stopped (until it says it is ready again, ``--stop-timeout`` later), so the
master's quit message does not always reach it; its data is all with the master by then."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def stop_process(process: subprocess.Popen, *, grace_s: float = GRACE_S) -> None:
    """SIGTERM ``process`` (one we started), wait ``grace_s``, then SIGKILL it."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


@dataclass(kw_only=True)
class LocustRun:
    """One distributed run: what to start and where its files go.

    Attributes
    ----------
    locustfile : Path
        The locustfile master and workers load.
    run_dir : Path
        Run directory (``--run-dir``); process logs go there too (``locust_master.log``,
        ``locust_worker_<i>.log``).
    workers : int
        Local worker processes (>= 1).
    locust_args : list of str
        Further Locust / llm-locust flags for the master (``--host``, ``--model``, ``--ladder``…);
        Locust forwards them to the workers.
    timeout_s : float
        Upper bound on the whole run; past it the master is stopped (SIGTERM) and the run is
        reported as timed out.
    web_port : int or None
        None: headless. Otherwise Locust's web UI (with the LLM tab) on 127.0.0.1 at this port;
        the test still starts by itself (``--autostart``) and the master quits ``web_linger_s``
        seconds after it ends (``--autoquit``), so the run stays bounded.
    web_linger_s : float
        With the web UI: how long it stays up after the test ends, s.
    """

    locustfile: Path
    run_dir: Path
    workers: int = 2
    locust_args: list[str] = field(default_factory=list)
    timeout_s: float = 3600.0
    web_port: int | None = None
    web_linger_s: float = 30.0

    @property
    def web_url(self) -> str | None:
        """The web UI's address, None when headless."""
        return None if self.web_port is None else f"http://127.0.0.1:{self.web_port}/"

    def _ui_args(self) -> list[str]:
        if self.web_port is None:
            return ["--headless"]
        return ["--autostart", "--autoquit", str(max(0, round(self.web_linger_s))),
                "--web-host", "127.0.0.1", "--web-port", str(self.web_port)]

    def master_command(self, port: int) -> list[str]:
        return [
            sys.executable, "-m", "locust", "-f", str(self.locustfile),
            "--master", *self._ui_args(), "--expect-workers", str(self.workers),
            "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
            "--csv", str(self.run_dir / "locust"), "--csv-full-history",
            "--run-dir", str(self.run_dir), "--only-summary",
            *self.locust_args,
        ]  # fmt: skip

    def worker_command(self, port: int) -> list[str]:
        return [
            sys.executable, "-m", "locust", "-f", str(self.locustfile),
            "--worker", "--master-host", "127.0.0.1", "--master-port", str(port),
        ]  # fmt: skip


def _users_from_history(run_dir: Path) -> str | None:
    """The latest user count in Locust's ``locust_stats_history.csv`` (written with --csv-full-history)."""
    import csv

    try:
        with open(run_dir / "locust_stats_history.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return None
    return rows[-1].get("User Count") if rows else None


def _progress(run_dir: Path, started: float) -> str:
    """One line: elapsed time, current ladder step (numbered from 0, as in the analysis table) or
    user count, requests recorded so far."""
    step = "starting"
    try:
        meta = json.loads((run_dir / "run.json").read_text())
        steps = meta.get("shape", {}).get("steps", [])
        if steps:
            step = f"step {steps[-1]['index']} ({steps[-1]['users']} users)"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if step == "starting" and (users := _users_from_history(run_dir)) is not None:
        step = f"{users} users"
    try:
        with open(run_dir / "requests.csv", "rb") as f:
            requests = max(0, sum(1 for _ in f) - 1)
    except OSError:
        requests = 0
    return f"  {time.monotonic() - started:5.0f} s  {step}  {requests} requests recorded"


def run_locust(run: LocustRun, *, progress_every_s: float = 10.0, echo=print) -> int:
    """Start the master and the workers, wait for the run to end, stop what is left.

    Returns
    -------
    int
        The master's exit code (Locust: 0 ok, 1 some requests failed, 2 usage/locustfile error),
        124 when ``run.timeout_s`` (plus ``run.web_linger_s`` with the web UI) ran out, 130 on
        Ctrl-C (KeyboardInterrupt). Either way the master was stopped with SIGTERM first (Locust's
        graceful shutdown: the workers' last reports, final ``run.json``), then the workers.
    """
    run.run_dir.mkdir(parents=True, exist_ok=True)
    limit_s = run.timeout_s + (run.web_linger_s if run.web_port is not None else 0.0)
    port = free_port()
    logs = []
    processes: list[subprocess.Popen] = []
    started = time.monotonic()
    try:
        master_log = open(run.run_dir / "locust_master.log", "w")
        logs.append(master_log)
        # Own sessions: a terminal's Ctrl-C reaches only this process, which then stops the master
        # gracefully (SIGTERM) and the workers after it, so the data of the run so far is kept.
        master = subprocess.Popen(run.master_command(port), stdout=master_log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
        processes.append(master)
        if run.web_url is not None:
            echo(f"web UI: {run.web_url}?tab=llm  (LLM tab; stays up {run.web_linger_s:.0f} s after the run ends)")
        for index in range(run.workers):
            log = open(run.run_dir / f"locust_worker_{index}.log", "w")
            logs.append(log)
            processes.append(
                subprocess.Popen(run.worker_command(port), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
            )
        next_progress = started + progress_every_s
        code = None
        try:
            while code is None:
                try:
                    code = master.wait(timeout=1.0)
                except subprocess.TimeoutExpired:
                    now = time.monotonic()
                    if now - started > limit_s:
                        echo(f"run exceeded its {limit_s:.0f} s bound (--timeout-s): stopping it, keeping the data so far")
                        stop_process(master)
                        code = 124
                    elif now >= next_progress and progress_every_s > 0:
                        echo(_progress(run.run_dir, started))
                        next_progress = now + progress_every_s
        except KeyboardInterrupt:
            echo("interrupted: stopping the run, keeping the data so far")
            stop_process(master)
            code = 130
        deadline = time.monotonic() + WORKER_EXIT_GRACE_S
        for process in processes[1:]:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        return code
    finally:
        for process in reversed(processes):
            stop_process(process)
        for log in logs:
            log.close()
