"""The NTP-style offset (llm_locust/client/clock.py), with stamps worked out by hand."""

import time

import gevent
import pytest

from llm_locust.client import clock
from llm_locust.client.clock import ClockSample, OffsetEstimator


def exchange(*, master_ahead_s, t0, out_s, held_s, back_s):
    """Stamps of one ping/pong when the master's clock is ``master_ahead_s`` ahead of the worker's."""
    t1 = t0 + out_s + master_ahead_s
    t2 = t1 + held_s
    t3 = t0 + out_s + held_s + back_s
    return t0, t1, t2, t3


def test_symmetric_paths_give_the_exact_offset():
    sample = ClockSample.from_stamps(*exchange(master_ahead_s=2.0, t0=100.0, out_s=0.01, held_s=0.005, back_s=0.01))
    assert sample.offset_s == pytest.approx(2.0, abs=1e-9)
    assert sample.delay_s == pytest.approx(0.02, abs=1e-9)


def test_asymmetric_paths_stay_within_half_the_delay():
    # 10 ms out, 30 ms back: the estimate is off by (out - back) / 2 = -10 ms; delay 40 ms
    sample = ClockSample.from_stamps(*exchange(master_ahead_s=2.0, t0=100.0, out_s=0.01, held_s=0.005, back_s=0.03))
    assert sample.offset_s == pytest.approx(1.99, abs=1e-9)
    assert sample.delay_s == pytest.approx(0.04, abs=1e-9)
    assert abs(sample.offset_s - 2.0) <= sample.delay_s / 2 + 1e-9


def test_the_least_delay_sample_is_kept():
    estimator = OffsetEstimator(keep=3)
    assert estimator.offset_s == 0.0 and estimator.describe()["uncertainty_s"] is None
    for out_s, back_s in [(0.05, 0.01), (0.002, 0.004), (0.2, 0.01)]:
        estimator.add(
            ClockSample.from_stamps(*exchange(master_ahead_s=-1.5, t0=10.0, out_s=out_s, held_s=0.001, back_s=back_s))
        )
    assert estimator.best.delay_s == pytest.approx(0.006)
    assert estimator.offset_s == pytest.approx(-1.5 - 0.001)  # (out - back) / 2 = -1 ms
    described = estimator.describe()
    assert described == {
        "offset_s": pytest.approx(-1.501),
        "uncertainty_s": pytest.approx(0.003),
        "delay_s": pytest.approx(0.006),
        "samples": 3,
    }
    for _ in range(3):  # the good sample falls out of the window of 3
        estimator.add(ClockSample(offset_s=-1.4, delay_s=0.5))
    assert estimator.offset_s == pytest.approx(-1.4)


def test_a_negative_delay_is_a_broken_stamp_and_dropped():
    estimator = OffsetEstimator()
    estimator.add(ClockSample(offset_s=3.0, delay_s=-0.1))
    assert estimator.samples == 0 and estimator.best is None


class _Message:
    def __init__(self, data):
        self.data = data


class _WorkerRunner:
    """The two calls WorkerClock makes on Locust's WorkerRunner: the pings it sends are kept."""

    def __init__(self):
        self.sent, self.handlers = [], {}

    def register_message(self, kind, handler):
        self.handlers[kind] = handler

    def send_message(self, kind, data):
        self.sent.append((kind, data))


class _Environment:
    def __init__(self):
        self.runner = _WorkerRunner()


def _answer(environment, ping_index, *, master_ahead_s, delay_s):
    """The master's pong to the worker's ping ``ping_index``, the round trip ``delay_s`` split evenly."""
    # the worker's t3 is its own clock as the pong is handled (now): t0 is set so that t3 - t0 = delay
    assert environment.runner.sent[ping_index][0] == clock.PING
    now = clock.local_wall_s()
    t1 = now - delay_s / 2 + master_ahead_s
    environment.runner.handlers[clock.PONG](environment, _Message({"t0": now - delay_s, "t1": t1, "t2": t1}))


def _read_in_greenlet(worker_clock):
    reading = gevent.spawn(worker_clock.master_wall_s)
    gevent.sleep(0.01)
    return reading


def test_a_read_waits_for_a_tight_sample_and_places_by_it():
    environment = _Environment()
    worker_clock = clock.WorkerClock(environment)
    try:
        reading = _read_in_greenlet(worker_clock)
        assert not reading.ready()  # no answer yet: no offset of 0 handed out
        _answer(environment, 0, master_ahead_s=2.0, delay_s=0.6)  # a late answer: ±0.3 s, not enough
        gevent.sleep(0.01)
        assert not reading.ready()
        _answer(environment, 0, master_ahead_s=2.0, delay_s=0.004)
        read_s = reading.get(timeout=1.0)
        assert read_s == pytest.approx(clock.local_wall_s() + 2.0, abs=0.05)
        assert worker_clock.estimator.offset_s == pytest.approx(2.0, abs=1e-3)  # t3 is read a few µs after `now`
    finally:
        worker_clock._greenlet.kill()


def test_a_burst_of_loose_samples_settles_with_the_tightest():
    environment = _Environment()
    worker_clock = clock.WorkerClock(environment)
    try:
        reading = _read_in_greenlet(worker_clock)
        for index, delay_s in enumerate([0.5, 0.3, 0.4, 0.2, 0.6, 0.25, 0.35]):
            _answer(environment, 0, master_ahead_s=-1.0, delay_s=delay_s)
            gevent.sleep(0)
            assert not reading.ready(), index
        _answer(environment, 0, master_ahead_s=-1.0, delay_s=0.45)  # the burst's 8th answer
        assert reading.get(timeout=1.0) == pytest.approx(clock.local_wall_s() - 1.0, abs=0.05)
        assert worker_clock.estimator.best.delay_s == pytest.approx(0.2, abs=1e-3)
    finally:
        worker_clock._greenlet.kill()


def test_a_silent_master_costs_one_bounded_wait_and_a_warning(monkeypatch, caplog):
    monkeypatch.setattr(clock, "SETTLE_TIMEOUT_S", 0.2)
    environment = _Environment()
    worker_clock = clock.WorkerClock(environment)
    try:
        started = time.monotonic()
        first = worker_clock.master_wall_s()
        waited_s = time.monotonic() - started
        assert 0.1 <= waited_s < 1.0
        assert first == pytest.approx(clock.local_wall_s(), abs=0.05)  # no answer: the worker's own clock
        assert "did not settle" in caplog.text
        started = time.monotonic()
        worker_clock.master_wall_s()
        assert time.monotonic() - started < 0.05  # once past the deadline, no more waiting
    finally:
        worker_clock._greenlet.kill()
