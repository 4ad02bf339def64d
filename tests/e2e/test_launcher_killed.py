"""A launcher killed outright (``kill -9``) leaves no load behind, on every launch path (issue 27):

- ``llm-locust run`` with local workers (the master forks them),
- ``llm-locust diagnose`` in its ladder round,
- ``llm-locust demo`` (its embedded server too),
- ``llm-locust run --server-log-cmd CMD``: the command the master follows as the server's log
  (``kubectl logs -f …``, a session of its own) ends with the master, also when the master is
  killed outright with its launcher (before: it ran on, printing into a pipe no one read);
- the Kubernetes Job's master (``llm-locust run --workers 0 --remote-workers 1``, ``k8s/``) with a
  worker started by hand (``python -m locust -f llm_locust/locustfiles/ladder.py --worker …``): there the
  launcher *and* its master are killed (a pod gone), so the worker learns it only from the
  master's silent heartbeats.

Each launcher is started with ``setsid`` (a session of its own, as from a terminal) on a ladder
far longer than the test; 1.5 s into its second step, the test takes the process ids of every
process below it (and of the hand-started worker), ``kill -9``s the launcher and requires every
one of those processes to have ended within :data:`END_WITHIN_S` (by PID and start time, zombies
counted as ended). Then ``llm-locust analyze`` on the run directory shows the completed step and
says at which step the run was cut, the step run.json recorded last. The five run side by side
against one embedded server (~25 s in all).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from llm_locust.run.demo import SIM_MODEL, start_sim_server
from llm_locust.run.launcher import free_port
from tests.e2e.fault_helpers import LOCUSTFILES, wait_for_step
from tests.e2e.side_by_side import all_at_once

pytestmark = pytest.mark.slow

END_WITHIN_S = 10.0
"""Longest a process of a killed launcher may go on: a master's graceful stop takes 1-2 s, a
hand-started worker quits 5 s after the master's last heartbeat (client/masterwatch.py)."""
DWELL_S = 4.0
LADDER = "1,2,4,8,16,32,64,128"
"""32 s of ladder: a process left running is still there at the check."""
KILL_INTO_STEP_S = 1.5
COMMON = ["--ladder", LADDER, "--dwell-s", str(DWELL_S), "--warmup-s", "1", "--max-tokens", "16"]


def _processes(pids) -> list[psutil.Process]:
    found = []
    for pid in pids:
        try:
            found.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    return found


def _cmdline(process: psutil.Process) -> str:
    """Its command line, or "" once it has ended: a child of a process just killed may already be a
    zombie, whose command line psutil refuses (ZombieProcess is a NoSuchProcess)."""
    try:
        return " ".join(process.cmdline())
    except psutil.NoSuchProcess:
        return ""


def _alive(process: psutil.Process) -> bool:
    """Still running: the same process (pid and start time), and not a zombie."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _kill_and_watch(launcher: subprocess.Popen, step_dir: Path, *, extra=(), kill_below=False, spare="") -> tuple:
    """Once ``step_dir``'s run.json shows step 1, ``kill -9`` ``launcher`` (with ``kill_below``, every
    process below it too - but those whose command line holds ``spare``, when given: a pod gone);
    ``(seconds until every process had ended or None, their command lines left then)``."""
    group: list[psutil.Process] = []
    try:
        wait_for_step(step_dir, 1, timeout_s=90)
        time.sleep(KILL_INTO_STEP_S)
        below = [psutil.Process(launcher.pid), *psutil.Process(launcher.pid).children(recursive=True)]
        group = below + _processes(extra)
        assert len(group) >= 2, [_cmdline(p) for p in group]
        killed_at = time.monotonic()
        for process in below if kill_below else below[:1]:
            if not spare or spare not in _cmdline(process):
                with contextlib.suppress(psutil.NoSuchProcess):  # ended (and reaped) meanwhile
                    process.send_signal(signal.SIGKILL)
        launcher.wait(timeout=10)
        while time.monotonic() - killed_at < END_WITHIN_S:
            if not [p for p in group if _alive(p)]:
                return time.monotonic() - killed_at, []
            time.sleep(0.1)
        return None, [" ".join(_cmdline(p).split()[:6]) for p in group if _alive(p)]
    finally:
        for process in group:
            if _alive(process):  # before the fix: the ladder would run on for half a minute
                process.kill()


def _analyze(run_dir: Path) -> str:
    out = subprocess.run([sys.executable, "-m", "llm_locust.cli", "analyze", str(run_dir)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    return out.stdout + out.stderr


def _cli(args: list[str], log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen(["setsid", sys.executable, "-m", "llm_locust.cli", *args], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip


def _run_path(tmp: Path, host: str) -> tuple:
    run_dir = tmp / "run"
    launcher = _cli(["run", "--workers", "2", "--no-analyze", "--run-dir", str(run_dir), "--host", host,
                     "--model", SIM_MODEL, *COMMON], tmp / "launcher.out")  # fmt: skip
    return (*_kill_and_watch(launcher, run_dir), run_dir, _analyze(run_dir))


def _diagnose_path(tmp: Path, host: str) -> tuple:
    out = tmp / "diag"
    launcher = _cli(["diagnose", "--host", host, "--model", SIM_MODEL, "--out", str(out), "--baseline-requests", "2",
                     "--workers", "2", *COMMON], tmp / "launcher.out")  # fmt: skip
    run_dir = out / "round-a" / "ladder"
    return (*_kill_and_watch(launcher, run_dir), run_dir, _analyze(run_dir))


def _demo_path(tmp: Path, _host: str) -> tuple:
    run_dir = tmp / "demo"
    launcher = _cli(["demo", "--run-dir", str(run_dir), "--workers", "1", *COMMON], tmp / "launcher.out")
    return (*_kill_and_watch(launcher, run_dir), run_dir, _analyze(run_dir))


def _remote_worker_path(tmp: Path, host: str) -> tuple:
    run_dir, port = tmp / "k8s", free_port()
    launcher = _cli(["run", "--workers", "0", "--remote-workers", "1", "--master-port", str(port), "--no-analyze",
                     "--timeout-s", "120", "--run-dir", str(run_dir), "--host", host, "--model", SIM_MODEL, *COMMON],
                    tmp / "launcher.out")  # fmt: skip
    with open(tmp / "worker.out", "w") as out:
        worker = subprocess.Popen([sys.executable, "-m", "locust", "-f", str(LOCUSTFILES / "ladder.py"), "--worker",
                                   "--master-host", "127.0.0.1", "--master-port", str(port)],
                                  stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip
    try:
        return (*_kill_and_watch(launcher, run_dir, extra=[worker.pid], kill_below=True), run_dir, _analyze(run_dir))
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.wait(timeout=10)


FOLLOWED = "print('followed line', flush=True)"
"""Marks the ``--server-log-cmd`` command's own process (not killed by the test: its parent is)."""


def _log_command_path(tmp: Path, host: str) -> tuple:
    """``--server-log-cmd`` following an idle log (``kubectl logs -f`` of a server that logs nothing
    more: one line, then silence - a command that goes on printing dies of the closed pipe at its
    next line): the launcher and the master killed (a pod gone), the command itself left to end
    with its master."""
    run_dir = tmp / "run"
    follow = f'{sys.executable} -c "import time\n{FOLLOWED}\ntime.sleep(600)"'
    launcher = _cli(["run", "--workers", "1", "--no-analyze", "--run-dir", str(run_dir), "--host", host,
                     "--model", SIM_MODEL, "--server-log-cmd", follow, *COMMON], tmp / "launcher.out")  # fmt: skip
    return (*_kill_and_watch(launcher, run_dir, kill_below=True, spare=FOLLOWED), run_dir, _analyze(run_dir))


PATHS = {
    "run": _run_path,
    "diagnose": _diagnose_path,
    "demo": _demo_path,
    "remote-worker": _remote_worker_path,
    "server-log-cmd": _log_command_path,
}


@pytest.fixture(scope="module")
def killed_launchers(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("killed")
    port = free_port()
    server = start_sim_server(port=port, max_num_seqs=8, log_path=tmp / "engine.log")
    try:
        folders = {name: tmp_path_factory.mktemp(name) for name in PATHS}
        host = f"http://127.0.0.1:{port}"
        return all_at_once({name: functools.partial(path, folders[name], host) for name, path in PATHS.items()})
    finally:
        server.kill()
        server.wait(timeout=10)


@pytest.mark.parametrize("path", list(PATHS))
def test_no_process_of_a_killed_launcher_goes_on(killed_launchers, path):
    ended_after_s, left, run_dir, _ = killed_launchers[path]
    assert ended_after_s is not None, f"still running {END_WITHIN_S:.0f} s after kill -9: {left}"
    assert ended_after_s < END_WITHIN_S


@pytest.mark.parametrize("path", ["run", "diagnose", "demo"])
def test_the_cut_run_is_analysable_and_says_where_it_was_cut(killed_launchers, path):
    _, _, run_dir, output = killed_launchers[path]
    steps = json.loads((run_dir / "run.json").read_text())["shape"]["steps"]
    cut = steps[-1]  # the step the kill fell in: the last one the master recorded
    assert cut["index"] >= 1, steps
    assert (
        f"s into step {cut['index']} ({cut['users']} users) of the planned ladder {LADDER.replace(',', ', ')}" in output
    )
    assert "step 0 completed" in output, output
    first = next(line.split() for line in output.splitlines() if line.split()[:2] == ["0", "1"])
    assert float(first[2]) == pytest.approx(1.0, abs=0.1), output  # step 0 (1 user) measured: its in-flight


def test_a_hand_started_worker_says_its_master_went_silent(killed_launchers):
    _, _, run_dir, _ = killed_launchers["remote-worker"]
    log = (run_dir.parent / "worker.out").read_text()
    assert "no heartbeat from the master for" in log, log[-2000:]
    assert os.path.exists(run_dir / "requests.csv")
