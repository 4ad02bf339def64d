"""The master's wait for its --expect-workers (llm_locust/master/workerwait.py): it goes the moment
they are ready, says how long it has waited, and a stop while it waits ends it in one line."""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace

import gevent
import pytest
from locust.event import EventHook
from locust.runners import MasterRunner

from llm_locust.master.workerwait import wait_for_workers


class _Runner(MasterRunner):
    def __init__(self) -> None:  # none of MasterRunner's sockets: only what the wait reads
        self.clients = SimpleNamespace(ready=[])
        self.quits = 0

    def quit(self) -> None:
        self.quits += 1

    def __del__(self) -> None:  # Runner.__del__ stops greenlets this one never had
        pass


def _environment(expect: int, max_wait_s: float = 0.0):
    options = SimpleNamespace(headless=True, autostart=False, expect_workers=expect, expect_workers_max_wait=max_wait_s)
    return SimpleNamespace(runner=_Runner(), parsed_options=options, events=SimpleNamespace(worker_connect=EventHook()))


def _connect_later(environment, delay_s: float, name: str) -> None:
    def connect() -> None:
        gevent.sleep(delay_s)
        environment.runner.clients.ready.append(name)
        environment.events.worker_connect.fire(client_id=name)

    gevent.spawn(connect)


def test_it_goes_when_the_last_worker_is_ready_and_logs_while_it_waits(caplog):
    environment = _environment(2)
    _connect_later(environment, 0.05, "a")
    _connect_later(environment, 0.35, "b")
    with caplog.at_level(logging.INFO, logger="llm_locust.master.workerwait"):
        waited = wait_for_workers(environment, wait_s=0.2)
    assert 0.35 <= waited < 0.6  # at the second connection, not at a poll's next tick
    assert [r.getMessage() for r in caplog.records] == ["waiting for workers: 1 of 2 ready after 0 s"]


def test_with_a_max_wait_it_hands_over_to_locusts_loop():
    environment = _environment(1, max_wait_s=0.15)
    started = time.monotonic()
    assert wait_for_workers(environment, wait_s=10.0) == pytest.approx(0.15, abs=0.1)
    assert time.monotonic() - started < 1.0


def test_a_stop_while_it_waits_quits_the_connected_workers_and_exits_1(caplog):
    environment = _environment(2)
    _connect_later(environment, 0.01, "a")
    waiting = gevent.getcurrent()
    gevent.spawn_later(0.1, waiting.throw, KeyboardInterrupt)  # what SIGTERM or Ctrl-C raises here
    with caplog.at_level(logging.INFO, logger="llm_locust.master.workerwait"), pytest.raises(SystemExit) as stopped:
        wait_for_workers(environment, wait_s=10.0)
    assert stopped.value.code == 1 and environment.runner.quits == 1
    [line] = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert line.startswith("stopped while waiting for workers: 1 of 2 ready after 0.1 s")
    assert not environment.events.worker_connect._handlers  # its listener is gone
