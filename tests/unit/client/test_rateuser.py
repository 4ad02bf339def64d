"""RateUser in a real local Locust environment: the plan message, sends handed out earliest first,
never early, scheduled_s recorded, nothing after the schedule."""

from __future__ import annotations

import time

import pytest
from locust.argument_parser import get_parser
from locust.env import Environment

import llm_locust.plugin  # noqa: F401  (llm-locust's options on Locust's parser)
from llm_locust.client import rateuser
from llm_locust.client.rateuser import IDLE_S, PLAN_MESSAGE, POLL_S, SCHEDULE_ATTRIBUTE, RateUser
from llm_locust.client.schedule import RatePlan


def environment_and_users(count: int):
    options = get_parser().parse_args(["-f", "x.py", "--host", "http://127.0.0.1:1", "--model", "m"])
    user_class = type("TestRateUser", (RateUser,), {"host": "http://127.0.0.1:1"})
    environment = Environment(user_classes=[user_class], host="http://127.0.0.1:1", parsed_options=options)
    environment.create_local_runner()
    environment.runner.register_message(PLAN_MESSAGE, rateuser._on_plan)
    return environment, [user_class(environment) for _ in range(count)]


def test_users_take_the_sends_in_order_and_never_send_early():
    environment, (first, second) = environment_and_users(2)
    assert first.wait_time() == POLL_S and not first.ready_to_send()  # no plan yet: poll, send nothing
    t0 = time.time() + 0.2
    plan = RatePlan(t0_s=t0, rates_rps=(20.0,), dwell_s=0.1, arrival="constant", burstiness=1.0, seed=0,
                    worker_index=0, workers=1)  # fmt: skip
    environment.runner.send_message(PLAN_MESSAGE, plan.to_message())  # a local runner hands it to itself
    assert getattr(environment, SCHEDULE_ATTRIBUTE).planned == 2
    delay_first, delay_second = first.wait_time(), second.wait_time()
    assert 0 < delay_first <= 0.2 and delay_second == pytest.approx(delay_first + 0.05, abs=0.01)
    assert first.ready_to_send()  # called long before the send's time: waits for it
    assert time.time() >= t0 and first.scheduled_s == t0
    time.sleep(0.1)  # the second send is now late: it leaves at once, keeping its scheduled time
    assert second.ready_to_send() and second.scheduled_s == t0 + 0.05
    assert first.wait_time() == IDLE_S and not first.ready_to_send()  # the schedule is spent
    assert getattr(environment, SCHEDULE_ATTRIBUTE).taken == 2


def test_a_malformed_plan_is_not_used(caplog):
    environment, _ = environment_and_users(1)
    environment.runner.send_message(PLAN_MESSAGE, {"t0_s": "soon"})
    assert getattr(environment, SCHEDULE_ATTRIBUTE, None) is None
    assert "rate plan not used" in caplog.text
