"""BaselineUser sends exactly ``--baseline-requests`` requests and, on a worker, reports the last
one to the master at once (not at the worker's next 3-s report), against a scripted loopback server."""

from __future__ import annotations

import pytest
from locust.argument_parser import get_parser
from locust.env import Environment
from locust.exception import StopUser
from locust.runners import STATE_RUNNING, Runner, WorkerRunner
from locust.stats import setup_distributed_stats_event_listeners

import llm_locust.plugin  # noqa: F401  (registers llm-locust's options on Locust's parser)
from llm_locust.client.baseline import BaselineUser
from llm_locust.master.shipping import COUNT_KEY, RecordShipper
from tests.conftest import stop
from tests.scripted_server import sse_script
from tests.sse_payloads import DONE, chat, sse, usage_chunk


class _Client:
    """Locust's socket to the master, keeping what is sent."""

    def __init__(self) -> None:
        self.sent = []

    def send(self, message) -> None:
        self.sent.append(message)


def baseline_user_on_a_worker(host: str, budget: int):
    """A BaselineUser on a worker with no sockets: ``(user, messages sent to the master)``."""
    options = get_parser().parse_args(
        ["-f", "x.py", "--host", host, "--model", "m", "--baseline-requests", str(budget)]
    )
    user_class = type("TestBaselineUser", (BaselineUser,), {"host": host})
    environment = Environment(user_classes=[user_class], host=host, parsed_options=options)
    runner = WorkerRunner.__new__(WorkerRunner)  # a worker without its sockets and greenlets:
    Runner.__init__(runner, environment)  # Locust's stats listeners, as on a worker:
    setup_distributed_stats_event_listeners(environment.events, environment.stats)
    runner.client = _Client()
    runner.client_id = "w1"
    runner.state = STATE_RUNNING
    environment.runner = runner
    RecordShipper(environment, None)
    user = user_class(environment)
    user.on_start()
    return user, runner.client.sent


def test_a_worker_reports_its_last_baseline_request_at_once(scripted_server):
    answer = [(0.0, sse(chat("Hi", finish="length"))), (0.0, sse(usage_chunk(3, 1))), (0.0, DONE)]
    url, process = scripted_server(sse_script(answer, keep_alive=True))
    user, sent = baseline_user_on_a_worker(url, budget=2)
    user.send("hi")
    assert sent == []  # not the last: the worker's report timer ships it
    with pytest.raises(StopUser):
        user.send("hi")
    (report,) = sent
    assert (report.type, report.node_id) == ("stats", "w1")
    assert report.data["stats_total"]["num_requests"] == 2  # what the master's shape counts
    assert report.data[COUNT_KEY] == 2  # both records ride it
    with pytest.raises(StopUser):  # the budget is spent: no request, no report
        user.send("hi")
    stop(process)
    assert len(sent) == 1
