"""The open-loop schedule: exact counts, exact split over workers, arrival statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llm_locust.client.schedule import (
    RatePlan,
    send_times,
    step_offsets_s,
    step_sends,
    total_sends,
    trace_plan_step,
    trace_send_times,
)
from llm_locust.client.workload.trace import TraceRow


def plan(**kw) -> RatePlan:
    base = dict(t0_s=1000.0, rates_rps=(10.0,), dwell_s=4.0, arrival="constant", burstiness=1.0, seed=7)
    base.update(kw)
    base.setdefault("worker_index", 0)
    base.setdefault("workers", 1)
    return RatePlan(**base)


def union(workers: int, **kw) -> list[tuple[float, int]]:
    return sorted(t for i in range(workers) for t in send_times(plan(worker_index=i, workers=workers, **kw)))


def cv(times) -> float:
    gaps = np.diff(np.sort(np.asarray(times, float)))
    return float(gaps.std() / gaps.mean())


def test_constant_union_over_workers_is_evenly_spaced():
    # 3 workers, 2.5 req/s over 4 s then 5 req/s: 10 sends at k / 2.5, then 20 at 4 + k / 5
    got = [t for t, _ in union(3, rates_rps=(2.5, 5.0))]
    expected = [1000.0 + k / 2.5 for k in range(10)] + [1004.0 + k / 5.0 for k in range(20)]
    assert got == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("arrival", ["constant", "poisson"])
@pytest.mark.parametrize("workers", [1, 2, 3, 7])
def test_counts_are_exact_and_split(arrival, workers):
    rates = (1.3, 4.0, 33.3)
    entries = union(workers, rates_rps=rates, arrival=arrival, dwell_s=3.0)
    for step, rate in enumerate(rates):
        in_step = [t for t, s in entries if s == step]
        assert len(in_step) == round(rate * 3.0)
        assert all(1000.0 + 3.0 * step <= t < 1000.0 + 3.0 * (step + 1) for t in in_step)
    shares = [total_sends(plan(worker_index=i, workers=workers, rates_rps=rates, dwell_s=3.0)) for i in range(workers)]
    assert sum(shares) == sum(round(r * 3.0) for r in rates)
    assert max(shares) - min(shares) <= len(rates)


def test_poisson_gaps_have_cv_one_and_constant_zero():
    poisson = [t for t, _ in union(2, rates_rps=(200.0,), dwell_s=50.0, arrival="poisson")]
    assert len(poisson) == 10_000
    # the CV of n exponential gaps has a standard error of about 1 / sqrt(n) = 0.01
    assert cv(poisson) == pytest.approx(1.0, abs=0.05)
    constant = [t for t, _ in union(2, rates_rps=(200.0,), dwell_s=5.0)]
    assert cv(constant) == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("burstiness", [0.25, 4.0])
def test_gamma_burstiness_sets_the_cv(burstiness):
    times = [
        t for t, _ in send_times(plan(rates_rps=(100.0,), dwell_s=100.0, arrival="poisson", burstiness=burstiness))
    ]
    assert len(times) == 10_000
    assert cv(times) == pytest.approx(1.0 / math.sqrt(burstiness), rel=0.08)
    assert max(times) < 1100.0


def test_seeds_differ_per_worker_and_repeat_per_seed():
    a = [t for t, _ in send_times(plan(worker_index=0, workers=2, arrival="poisson"))]
    b = [t for t, _ in send_times(plan(worker_index=1, workers=2, arrival="poisson"))]
    again = [t for t, _ in send_times(plan(worker_index=0, workers=2, arrival="poisson"))]
    assert a != b and a == again
    other_seed = [t for t, _ in send_times(plan(worker_index=0, workers=2, arrival="poisson", seed=8))]
    assert other_seed != a


def test_offsets_stay_in_step():
    import random

    p = plan(rates_rps=(50.0,), dwell_s=2.0, arrival="poisson", burstiness=0.3)
    offsets = step_offsets_s(p, 0, random.Random(1))
    assert offsets == sorted(offsets) and 0 <= offsets[0] and offsets[-1] < 2.0 and len(offsets) == 100


def test_message_round_trip_and_bad_plans():
    p = plan(rates_rps=(1.0, 2.0), worker_index=1, workers=3, arrival="poisson", burstiness=0.5)
    assert RatePlan.from_message(p.to_message()) == p
    with pytest.raises(ValueError, match="worker_index"):
        plan(worker_index=3, workers=3)
    with pytest.raises(ValueError, match="rates"):
        plan(rates_rps=(0.0,))
    with pytest.raises(ValueError):
        plan(arrival="uniform")
    with pytest.raises(ValueError, match="malformed"):
        RatePlan.from_message({"t0_s": 1.0})


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_trace_split_over_workers_is_every_row_once_at_its_scaled_time(workers):
    offsets = [0.0, 0.0, 0.4, 1.0, 1.0, 2.5, 3.0]
    rows = [TraceRow(i, i + 1, t, 10, 1) for i, t in enumerate(offsets)]
    dwell_s, rate = trace_plan_step(offsets[-1], len(rows), 2.0)
    assert dwell_s == 0.5 + 1.5 + 1.0 and step_sends(rate, dwell_s) == len(rows)  # the step plans every row
    sends = []
    for i in range(workers):
        p = plan(rates_rps=(rate,), dwell_s=dwell_s, worker_index=i, workers=workers, trace_rows=7, trace_speed=2.0)
        mine = list(trace_send_times(p, rows))
        assert [r.row_index for _, r in mine] == list(range(i, 7, workers))
        sends += mine
    assert sorted((r.row_index, t) for t, r in sends) == [(i, 1000.5 + t / 2.0) for i, t in enumerate(offsets)]
