"""The worker's load sampler (``client_load.csv`` rows) in-process: a row a second between
test_start and test_stop plus the last partial one, the lag of a loop held on purpose, the open
streams from the watchdog, and the rows shipped unchanged."""

from __future__ import annotations

import math
import time
import types

import gevent
import pytest
from locust.env import Environment

from llm_locust.client.load import CLIENT_LOAD_COLUMNS, ClientLoadSampler
from llm_locust.client.watchdog import Deadline, Watchdog
from llm_locust.master.shipping import RowShipper

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)


def test_watchdog_counts_exchanges_from_arm_to_disarm():
    watchdog = Watchdog()
    first, second = Deadline(), Deadline()
    watchdog.arm(first)
    watchdog.arm(second)
    assert watchdog.open_exchanges == 2
    watchdog.disarm(first)
    watchdog.disarm(first)  # the reader and the exchange both disarm: counted once
    assert watchdog.open_exchanges == 1
    watchdog.disarm(second)
    assert watchdog.open_exchanges == 0


def test_sampler_rows_lag_and_open_streams():
    environment = Environment()
    environment.create_local_runner()
    shipped = []
    shipper = RowShipper(environment, "load", shipped.extend)
    ClientLoadSampler(environment, shipper)
    watchdog = Watchdog()
    environment.llm_client = types.SimpleNamespace(watchdog=watchdog)  # what LLMUser's config holds
    streams = [Deadline() for _ in range(3)]
    for deadline in streams:
        watchdog.arm(deadline)

    started = time.time()
    environment.events.test_start.fire(environment=environment)
    gevent.sleep(1.2)
    held_s = 0.3  # of CPU time (so at least as long on the wall clock, however loaded the machine)
    end = time.process_time() + held_s
    while time.process_time() < end:  # the event loop held: no greenlet runs meanwhile
        pass
    gevent.sleep(1.2)
    disarmed = time.time()
    watchdog.disarm(streams[0])
    gevent.sleep(0.5)  # a whole-second row comes in this time, or the last, partial one is >= 0.5 s
    environment.events.test_stop.fire(environment=environment)
    stopped = time.time()

    # a row a second (>= 2.9 s: two whole seconds, more when the machine stretched the held loop),
    # then the last, partial one when it is >= 0.2 s
    assert 3 <= len(shipped) <= math.floor(stopped - started) + 1
    assert all(len(row) == len(CLIENT_LOAD_COLUMNS) for row in shipped)
    t_s = [row[0] for row in shipped]
    assert started < t_s[0] < t_s[1] < t_s[2] <= stopped + 0.001  # t_s is rounded to ms
    assert t_s[1] - t_s[0] > 0.8
    assert {row[1] for row in shipped} == {environment.runner.client_id}  # as requests.csv's worker_id
    after = [row[5] for row in shipped if row[0] > disarmed + 0.001]
    assert after and set(after) == {2}
    assert {row[5] for row in shipped if row[0] < disarmed - 0.001} == {3}
    lag_max_ms = max(row[4] for row in shipped)
    assert lag_max_ms >= 0.5 * held_s * 1000  # a probe asleep while the loop was held woke that late
    second = shipped[1]
    assert second[4] >= second[3] >= 0
    assert all(0 <= row[2] <= 1.2 and not math.isnan(row[2]) for row in shipped)
    assert shipped[1][2] * (t_s[1] - t_s[0]) >= 0.9 * held_s  # cores x interval: the CPU seconds burnt in it


def test_a_sampler_made_after_the_test_started_samples_at_once():
    # a worker whose first spawn came before Locust fired init (a new user saw a worker with 50
    # requests and no client_load.csv row): its sampler, made in init, starts there
    from locust.runners import STATE_RUNNING

    environment = Environment()
    environment.create_local_runner()
    environment.runner.state = STATE_RUNNING  # test_start already fired, nothing listened
    shipped = []
    ClientLoadSampler(environment, RowShipper(environment, "load", shipped.extend))
    gevent.sleep(1.3)
    environment.events.test_stop.fire(environment=environment)
    assert len(shipped) >= 1 and all(row[1] == environment.runner.client_id for row in shipped)
