"""The NTP-style offset (llm_locust/client/clock.py), with stamps worked out by hand."""

import pytest

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
