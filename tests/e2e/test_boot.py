"""Booted Locust processes (llm_locust/run/boot.py): run what the launcher sends, nothing without it."""

from __future__ import annotations

import sys

import pytest

from llm_locust.run.launcher import BootedLocust

pytestmark = pytest.mark.slow


def test_a_booted_process_becomes_python_m_locust_with_the_line_it_is_sent(tmp_path):
    booted = BootedLocust(1, plugin=True)
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
    booted = BootedLocust(2, plugin=False)
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
