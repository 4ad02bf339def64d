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


def environment_and_users(count: int, *extra: str):
    options = get_parser().parse_args(["-f", "x.py", "--host", "http://127.0.0.1:1", "--model", "m", *extra])
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


def test_a_trace_plan_hands_each_user_its_row_at_its_time(tmp_path, caplog):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(f'{{"timestamp_s": {t}, "input_tokens": 50, "output_tokens": {k + 1}, "session_id": "s{k}"}}\n'
                             for k, t in enumerate([10.0, 10.2, 10.2, 10.6, 11.0])))  # fmt: skip
    environment, (first, second) = environment_and_users(2, "--trace", str(trace))
    t0 = time.time() - 0.4  # the first send is 0.5 s after t0
    plan = RatePlan(t0_s=t0, rates_rps=(2.5,), dwell_s=2.0, arrival="constant", burstiness=1.0, seed=0,
                    worker_index=1, workers=2, trace_rows=5, trace_speed=2.0)  # fmt: skip
    environment.runner.send_message(PLAN_MESSAGE, plan.to_message())
    schedule = getattr(environment, SCHEDULE_ATTRIBUTE)
    assert schedule.planned == 2  # worker 1 of 2: rows 1 and 3
    first.wait_time()
    second.wait_time()
    assert first.ready_to_send() and second.ready_to_send()
    # at speed 2 row 1 (0.2 s into the trace) is due 0.1 s after the first send, row 3 (0.6 s) 0.3 s after
    assert (first.scheduled_s, first.trace_row, first.trace_session_id) == (pytest.approx(t0 + 0.6), 1, "s1")
    assert (second.scheduled_s, second.trace_row, second.trace_session_id) == (pytest.approx(t0 + 0.8), 3, "s3")
    assert first.wait_time() == IDLE_S and not first.ready_to_send()
    environment, _ = environment_and_users(1, "--trace", str(trace))
    environment.runner.send_message(PLAN_MESSAGE, {**plan.to_message(), "trace_rows": 6})
    assert getattr(environment, SCHEDULE_ATTRIBUTE, None) is None  # not the master's trace: not used
    assert "holds 5 requests, the master's 6" in caplog.text
