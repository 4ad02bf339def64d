"""Booted Locust processes (llm_locust/run/boot.py): run what the launcher sends, nothing without it."""

from __future__ import annotations

import os
import sys
import time

import pytest

from llm_locust.run.launcher import BootedLocust, ForkedProcess, can_watch_forked, free_port

pytestmark = pytest.mark.slow


def test_a_booted_process_becomes_python_m_locust_with_the_line_it_is_sent(tmp_path):
    booted = BootedLocust(1, plugin=True, fork=False)
    try:
        master, worker = booted.take_master(), booted.take_worker()
        assert master is not None and worker is not None and booted.take_worker() is None
        log = tmp_path / "master.log"
        assert master.args[-1] == "--master" and worker.args[-1] == "--worker"  # ps shows the role
        with pytest.raises(ValueError):  # the master's process given a worker's command line
            BootedLocust.go(master, [sys.executable, "-m", "locust", "--worker", "--version"], log, None)
        assert BootedLocust.go(master, [sys.executable, "-m", "locust", "--master", "--version"], log, None)
        assert master.wait(timeout=60) == 0
        assert log.read_text().startswith("locust 2.")  # Locust's own --version line, in the log
        worker.stdin.close()  # no line: it runs nothing, writes nothing, exits 0
        assert worker.wait(timeout=60) == 0
        assert sorted(p.name for p in tmp_path.iterdir()) == ["master.log"]
    finally:
        booted.cancel()


def test_a_cancelled_boot_ends_and_a_command_not_locusts_is_refused(tmp_path):
    booted = BootedLocust(2, plugin=False, fork=False)
    master = booted.take_master()
    try:
        with pytest.raises(ValueError):
            BootedLocust.go(master, ["locust", "--version"], tmp_path / "m.log", None)
    finally:
        master.stdin.close()
        master.terminate()
        master.wait(timeout=10)
    workers = list(booted.workers)
    booted.cancel()
    assert all(p.poll() is not None for p in workers) and not booted.workers
    booted.cancel()  # again: nothing left
    assert not list(tmp_path.iterdir())


LOCUST = [sys.executable, "-m", "locust"]


def _locustfile(tmp_path):
    """A locustfile whose user does nothing (the tests here watch processes, not requests)."""
    path = tmp_path / "lf.py"
    path.write_text("from locust import User, task\n\nclass U(User):\n    @task\n    def t(self):\n        pass\n")
    return path


def _parent_pid(pid: int) -> int:
    """The parent's process id from ``/proc/PID/stat`` (the field after the state)."""
    stat = open(f"/proc/{pid}/stat").read()
    return int(stat.rsplit(")", 1)[1].split()[1])


@pytest.mark.skipif(not can_watch_forked(), reason="needs Linux pidfds")
def test_a_booted_master_forks_its_workers_each_with_its_own_log_and_they_are_watched_by_pidfd(tmp_path):
    booted = BootedLocust(2, plugin=False)
    assert booted.fork_workers == 2 and booted.workers == [] and booted.take_worker() is None
    master = booted.take_master()
    assert master is not None
    # a worker with no master would keep trying to connect; it ends with the master that forked it
    port = free_port()
    locustfile = _locustfile(tmp_path)
    waiting = [*LOCUST, "-f", str(locustfile), "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)]
    logs = [tmp_path / "w0.log", tmp_path / "w1.log"]
    workers: list = []
    try:
        with pytest.raises(ValueError):  # a worker's command must say --worker
            BootedLocust.go(master, [*LOCUST, "--master", "--version"], tmp_path / "m.log", None,
                            [([*LOCUST, "--version"], logs[0])])  # fmt: skip
        assert BootedLocust.go(master, [*LOCUST, "--master", "--version"], tmp_path / "m.log", None,
                               [(waiting, logs[0]), (waiting, logs[1])])  # fmt: skip
        workers = BootedLocust.forked(master)
        assert len(workers) == 2 and all(isinstance(w, ForkedProcess) for w in workers)
        assert len({w.pid for w in workers} | {master.pid}) == 3
        assert master.wait(timeout=60) == 0  # the master's own line: --version, then exit
        assert (tmp_path / "m.log").read_text().startswith("locust 2.")
        for worker in workers:
            with pytest.raises(ChildProcessError):  # not this process's child: the master's
                os.waitpid(worker.pid, os.WNOHANG)
            # a forked worker ends with its master (llm_locust/parentdeath.py), seen through its pidfd
            assert worker.wait(timeout=15) == ForkedProcess.ENDED and worker.poll() == ForkedProcess.ENDED
        workers[1].kill()  # ended: nothing to signal, no error
    finally:
        booted.cancel()
        for worker in workers:
            worker.kill()


@pytest.mark.skipif(not can_watch_forked(), reason="needs Linux pidfds")
def test_a_forked_worker_is_its_masters_child_while_both_run(tmp_path):
    booted = BootedLocust(1, plugin=False)
    master = booted.take_master()
    port = free_port()
    locustfile = _locustfile(tmp_path)
    common = [*LOCUST, "-f", str(locustfile)]
    master_command = [*common, "--master", "--headless", "--master-bind-host", "127.0.0.1",
                      "--master-bind-port", str(port), "--expect-workers", "1", "-u", "1", "-t", "2s"]  # fmt: skip
    worker_command = [*common, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)]
    workers: list = []
    try:
        assert BootedLocust.go(master, master_command, tmp_path / "m.log", None, [(worker_command, tmp_path / "w.log")])
        workers = BootedLocust.forked(master)
        assert [_parent_pid(w.pid) for w in workers] == [master.pid]
        deadline = time.monotonic() + 10  # it renames itself first thing after the fork
        while "--worker" not in (shown := open(f"/proc/{workers[0].pid}/cmdline").read().replace("\0", " ").split()):
            assert time.monotonic() < deadline, shown
            time.sleep(0.01)
        assert "--master" not in shown, shown  # ps shows its role
        assert master.wait(timeout=60) == 0  # the test ran with the forked worker, then quit
        workers[0].wait(timeout=30)  # told to quit by its master
        master_log = (tmp_path / "m.log").read_text()
        assert "1 workers connected" in master_log, master_log
    finally:
        booted.cancel()
        for worker in workers:
            worker.kill()
