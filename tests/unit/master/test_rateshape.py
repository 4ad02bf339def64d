"""RateShape on a fake master runner: the plans it sends, the steps it records, the drain."""

from __future__ import annotations

import argparse

import pytest

from llm_locust.client.rateuser import PLAN_MESSAGE, WorkerSchedule
from llm_locust.client.schedule import RatePlan
from llm_locust.master import rateshape
from llm_locust.master.rateshape import LEAD_S, SPAWN_WAIT_S, RateShape


class FakeClients:
    def __init__(self, ids):
        self.ready = [argparse.Namespace(id=i, state="ready") for i in ids]
        self.spawning, self.running = [], []

    @property
    def all(self):
        return self.ready


def make(monkeypatch, ids=None, **options):
    now = {"t": 1000.0}
    monkeypatch.setattr(rateshape, "local_wall_s", lambda: now["t"])
    sent = []
    defaults = dict(rate=0.0, rates="2,4", dwell_s=10.0, warmup_s=2.0, drain_s=5.0, arrival="constant",
                    burstiness=1.0, max_users=12, rate_seed=3)  # fmt: skip
    defaults.update(options)
    runner = argparse.Namespace(
        environment=argparse.Namespace(parsed_options=argparse.Namespace(**defaults), stop_timeout=0.0),
        user_count=0,
        send_message=lambda kind, data, client_id=None: sent.append((kind, data, client_id)),
    )
    if ids is not None:
        runner.clients = FakeClients(ids)
        index = {"w-b": 0, "w-a": 1, "w-c": 2}  # Locust's worker index, not the id order
        runner.get_worker_index = index.__getitem__
    shape = RateShape()
    shape.runner = runner
    shape.get_current_user_count = lambda: runner.user_count
    return shape, now, sent


def test_plans_follow_locusts_worker_index_and_split_the_rate(monkeypatch):
    shape, now, sent = make(monkeypatch, ids=["w-a", "w-b", "w-c"])
    assert shape.tick() == (12, pytest.approx(1000.0))
    assert sent == []  # the pool is starting: no plan yet
    now["t"], shape.runner.user_count = 1003.0, 12
    assert shape.tick() == (12, pytest.approx(1000.0))
    t0 = 1003.0 + LEAD_S
    plans = {client: RatePlan.from_message(data) for kind, data, client in sent if kind == PLAN_MESSAGE}
    assert {c: (p.worker_index, p.workers, p.t0_s, p.seed) for c, p in plans.items()} == {
        "w-b": (0, 3, t0, 3),
        "w-a": (1, 3, t0, 3),
        "w-c": (2, 3, t0, 3),
    }
    # the three schedules together: 20 sends at 2 req/s, then 40 at 4 req/s, on one grid
    times = sorted(t for p in plans.values() for t in iter(WorkerSchedule(p).take, None))
    assert times == pytest.approx([t0 + k / 2 for k in range(20)] + [t0 + 10 + k / 4 for k in range(40)])
    assert shape.steps == []  # before t0: the pool starts, no step yet


def test_steps_are_recorded_at_their_planned_times_then_drain(monkeypatch):
    shape, now, sent = make(monkeypatch)
    shape.tick()
    assert sent == []
    now["t"] = 1000.0 + SPAWN_WAIT_S  # some user never started: the plans go anyway
    shape.tick()
    assert len(sent) == 1 and sent[0][2] is None  # standalone: the plan goes to this process
    t0 = 1000.0 + SPAWN_WAIT_S + LEAD_S
    now["t"] = t0 + 13.7  # a late tick records every step it passed
    assert shape.tick()[0] == 12
    assert [(s["start_s"], s["rate_rps"], s["users"]) for s in shape.steps] == [(t0, 2.0, 12), (t0 + 10, 4.0, 12)]
    now["t"] = t0 + 20.4
    shape.runner.user_count = 12
    assert shape.tick() == (0, pytest.approx(1000.0))
    assert shape.steps[-1]["end_s"] == t0 + 20.0
    assert shape.runner.environment.stop_timeout == 5.0
    shape.runner.user_count = 0
    now["t"] = t0 + 21.0
    assert shape.tick() is None
    described = shape.describe()
    assert (described["kind"], described["rates"], described["workers"], described["t0_s"]) == (
        "rate",
        [2.0, 4.0],
        1,
        t0,
    )


def test_bad_options_raise_at_the_first_tick(monkeypatch):
    shape, _, _ = make(monkeypatch, rates="4,2")
    with pytest.raises(ValueError, match="--rates"):
        shape.tick()
