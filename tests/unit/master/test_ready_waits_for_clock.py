"""A worker says it is ready only once its clock exchange with the master has settled (issue 27,
item 5; 443b057): the master's first spawn waits for that, so no first request is stamped on the
worker's own clock. Before, ``llm_ready`` went at once, whatever the clock."""

from __future__ import annotations

from types import SimpleNamespace

import gevent
import gevent.event

from llm_locust.master.workerready import READY, announce_ready


def worker_with_clock():
    sent: list[tuple] = []
    runner = SimpleNamespace(send_message=lambda name, data=None, client_id=None: sent.append((name, data)))
    clock = SimpleNamespace(settled=gevent.event.Event())
    return SimpleNamespace(runner=runner, llm_clock=clock), clock, sent


def test_ready_waits_until_the_clock_has_settled():
    environment, clock, sent = worker_with_clock()
    announce_ready(environment)  # the default wait: longer than this test
    gevent.sleep(0.3)  # the master has answered no ping yet
    assert sent == []
    clock.settled.set()
    gevent.sleep(0.05)
    [(name, data)] = sent
    assert name == READY and isinstance(data["pid"], int)


def test_a_clock_that_never_settles_delays_ready_only_so_long():
    environment, _, sent = worker_with_clock()
    announce_ready(environment, settle_wait_s=0.2)
    gevent.sleep(0.1)
    assert sent == []
    gevent.sleep(0.3)
    assert [name for name, _ in sent] == [READY]
