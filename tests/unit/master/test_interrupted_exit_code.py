"""Requests interrupted by the end of the test are Locust failures (so its count equals
requests.csv) but, alone, do not turn Locust's exit code into --exit-code-on-error (issue 14)."""

from __future__ import annotations

import pytest
from locust import log
from locust.env import Environment

from llm_locust.client.record import ErrorKind
from llm_locust.client.stream import INTERRUPTED_MESSAGE
from llm_locust.client.user import LLMRequestError
from llm_locust.master.recorder import _interrupted_is_no_error


@pytest.fixture(autouse=True)
def no_unhandled_greenlet_exception(monkeypatch):
    """Locust's process-wide flag (set by any earlier test's crashed greenlet) decides 0 vs 2."""
    monkeypatch.setattr(log, "unhandled_greenlet_exception", False)


def environment_with(*errors) -> Environment:
    environment = Environment()
    environment.create_local_runner()
    for error in errors:
        environment.runner.stats.log_error("POST", "chat", error)
    return environment


def interrupted() -> LLMRequestError:
    return LLMRequestError(ErrorKind.INTERRUPTED, INTERRUPTED_MESSAGE)


def test_only_interrupted_requests_give_the_exit_code_of_a_run_without_failures():
    environment = environment_with(interrupted(), interrupted())
    _interrupted_is_no_error(environment)
    assert environment.process_exit_code == 0


def test_as_a_master_sees_them_from_a_worker_report():
    environment = environment_with(repr(interrupted()))  # the master holds the worker's string
    _interrupted_is_no_error(environment)
    assert environment.process_exit_code == 0


def test_any_other_failure_keeps_locusts_own_rule():
    environment = environment_with(interrupted(), LLMRequestError(ErrorKind.HTTP_5XX, "HTTP 503"))
    _interrupted_is_no_error(environment)
    assert environment.process_exit_code is None  # Locust then uses --exit-code-on-error


def test_no_failure_or_a_code_already_set_is_left_alone():
    environment = environment_with()
    _interrupted_is_no_error(environment)
    assert environment.process_exit_code is None
    environment = environment_with(interrupted())
    environment.process_exit_code = 3
    _interrupted_is_no_error(environment)
    assert environment.process_exit_code == 3
    environment = environment_with(interrupted())
    environment.runner.exceptions["x"] = {"count": 1, "msg": "boom", "traceback": "", "nodes": set()}
    _interrupted_is_no_error(environment)
    assert environment.process_exit_code is None
