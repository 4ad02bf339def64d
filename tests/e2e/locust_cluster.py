"""A headless Locust master and its workers as real processes on loopback, for tests that need
plain Locust processes with an environment of their own each (a clock set off, a patched
``time.time``, a worker burning CPU) rather than ``llm-locust run``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from llm_locust.run.launcher import free_port, stop_process


def run_master_and_workers(
    tmp: Path,
    locustfile: Path,
    master_args: list[str],
    *,
    worker_envs: list[dict[str, str]],
    master_env: dict[str, str] | None = None,
    timeout_s: float = 120.0,
) -> int:
    """Run ``locust -f locustfile --master --headless`` with ``master_args`` and one worker per
    entry of ``worker_envs`` (its whole environment) until the master exits.

    The master's output goes to ``tmp/master.out``, worker ``i``'s to ``tmp/worker{i}.out``; every
    process is stopped by PID before this returns.

    Returns
    -------
    int
        The master's exit code.

    Raises
    ------
    subprocess.TimeoutExpired
        The master ran longer than ``timeout_s``.
    """
    master_port = free_port()
    processes, logs = [], []
    try:
        log = open(tmp / "master.out", "w")
        logs.append(log)
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "locust", "-f", str(locustfile), "--master", "--headless",
             "--expect-workers", str(len(worker_envs)), "--master-bind-host", "127.0.0.1",
             "--master-bind-port", str(master_port), *master_args],
            env=master_env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=tmp,
        ))  # fmt: skip
        for index, env in enumerate(worker_envs):
            log = open(tmp / f"worker{index}.out", "w")
            logs.append(log)
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "locust", "-f", str(locustfile), "--worker", "--master-host", "127.0.0.1",
                 "--master-port", str(master_port)],
                env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=tmp,
            ))  # fmt: skip
        return processes[0].wait(timeout=timeout_s)
    finally:
        for process in reversed(processes):
            stop_process(process, grace_s=10)
        for log in logs:
            log.close()
