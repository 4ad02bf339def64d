"""A Locust master SIGKILLed mid-run (``kill -9``, the OOM killer) by someone else: its workers got
no quit message, so ``run_locust`` stops them at once instead of waiting for one, and returns 137
(128 + 9, the shell's code) with a line that says what happened."""

from __future__ import annotations

import time

import pytest

from llm_locust.run import launcher
from llm_locust.run.launcher import LocustRun

pytestmark = pytest.mark.slow

LOCUSTFILE = """
import os, signal

import gevent
import llm_locust.plugin  # noqa: F401  llm-locust's options (--run-dir), which the launcher passes
from locust import User, constant, events, task
from locust.runners import MasterRunner


class Idle(User):
    wait_time = constant(1)

    @task
    def nothing(self):
        pass


@events.test_start.add_listener
def kill_the_master(environment, **_kwargs):
    if isinstance(environment.runner, MasterRunner):
        gevent.spawn_later(1.0, os.kill, os.getpid(), signal.SIGKILL)
"""


def test_a_killed_master_ends_the_run_with_137_and_its_worker_is_stopped_without_a_wait(tmp_path, monkeypatch):
    # a grace far above the run's length: waiting for a quit message that never comes would show
    monkeypatch.setattr(launcher, "WORKER_EXIT_GRACE_S", 120.0)
    locustfile = tmp_path / "killer.py"
    locustfile.write_text(LOCUSTFILE)
    lines: list[str] = []
    run = LocustRun(
        locustfile=locustfile,
        run_dir=tmp_path / "run",
        workers=1,
        locust_args=["--host", "http://127.0.0.1:9", "-u", "1", "-t", "60s"],
        timeout_s=90.0,
    )
    started = time.monotonic()
    code = launcher.run_locust(run, progress_every_s=0, echo=lines.append)
    elapsed = time.monotonic() - started
    assert code == 128 + 9, (code, lines)
    assert any("ended by SIGKILL" in line for line in lines), lines
    assert elapsed < 60.0, elapsed  # neither the 120-s grace nor the 60-s test ran out
    assert "Got SIGTERM signal" in (tmp_path / "run" / "locust_worker_0.log").read_text()
