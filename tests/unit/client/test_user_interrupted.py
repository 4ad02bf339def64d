"""A request in flight when Locust stops its user is recorded as ``interrupted`` (issue 14), with
the tokens it had received, its one Locust event fired, and the greenlet still ends as asked;
once the runner is stopping, no new request is sent."""

from __future__ import annotations

import math
import time

import gevent
import pytest
from gevent import GreenletExit
from locust.exception import StopUser
from locust.runners import STATE_CLEANUP, STATE_RUNNING

from llm_locust.master.clientreport import ClientReport
from tests.conftest import STAMP_TOLERANCE_MS, server_log, stop
from tests.locust_env import make_user
from tests.scripted_server import sse_script
from tests.sse_payloads import DONE, chat, sse

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)

TOKENS_BEFORE_KILL = 3
"""Token events the server sends 50 ms apart; the next one comes 5 s later, after the kill."""


def slow_stream() -> dict:
    events = [(0.05, sse(chat(f"t{i} "))) for i in range(TOKENS_BEFORE_KILL)]
    return sse_script(events + [(5.0, sse(chat("late", finish="length"))), (0.0, DONE)])


def wait_for(condition, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        gevent.sleep(0.01)


def test_killed_mid_stream_is_interrupted_with_its_tokens(scripted_server, shared_reader):
    url, process = scripted_server(slow_stream())
    user, environment, fired = make_user(url, shared_reader=shared_reader)

    greenlet = gevent.spawn(user.send, "hi")
    gevent.sleep(0.05 * TOKENS_BEFORE_KILL + 0.4)  # every token before the silence has arrived
    killed_at = time.time()
    greenlet.kill(block=True)
    stop(process)
    log = server_log(process)

    assert isinstance(greenlet.value, GreenletExit)  # the greenlet still ended as Locust asked
    assert len(fired) == 1 and str(fired[0]["exception"]).startswith("interrupted:")
    record = fired[0]["context"]["llm_record"]
    assert record.error_kind == "interrupted" and record.status_code == 200
    # the server's writes 1..3 (after the headers, write 0) were token events: all of them kept
    sent_tokens = sum(1 for index in log["sent"] if 1 <= index <= TOKENS_BEFORE_KILL)
    assert record.content_events == sent_tokens == TOKENS_BEFORE_KILL
    assert record.output_tokens >= 1 and record.ttft_ms == pytest.approx(
        (log["sent"][1] - record.t_start_s) * 1000, abs=STAMP_TOLERANCE_MS
    )
    # its end is the kill, not the last token
    assert record.t_start_s + record.e2e_ms / 1000 == pytest.approx(killed_at, abs=0.05)
    assert len(log["requests"]) == 1
    # out of every success statistic, counted by kind
    report = ClientReport(environment)
    report.add_rows([record.to_row()])
    summary = report.summary()
    # counted on its own, never as a failure
    assert summary["interrupted"] == 1 and summary["failures"] == 0 and summary["failures_by_kind"] == {}
    assert summary["successes"] == 0 and summary["requests"] == 1
    assert summary["latency_ms"]["ttft"]["count"] == 0 and summary["output_tokens"] == 0
    entry = next(iter(environment.stats.errors.values()))
    assert str(entry.error).startswith("interrupted:")


def test_killed_before_the_headers_is_interrupted_without_tokens(scripted_server, shared_reader):
    url, process = scripted_server({"writes": [[5.0, "HTTP/1.1 200 OK\r\n\r\n"]]})  # holds the request
    user, _, fired = make_user(url, shared_reader=shared_reader)

    greenlet = gevent.spawn(user.send, "hi")
    gevent.sleep(0.3)
    greenlet.kill(block=True)
    stop(process)

    assert len(server_log(process)["requests"]) == 1 and len(fired) == 1
    record = fired[0]["context"]["llm_record"]
    assert (record.error_kind, record.status_code, record.content_events) == ("interrupted", 0, 0)
    assert math.isnan(record.ttft_ms) and record.e2e_ms == pytest.approx(300, abs=100)


def test_a_finished_stream_is_not_interrupted_by_a_later_kill(scripted_server):
    url, process = scripted_server(sse_script([(0.02, sse(chat("a", finish="length"))), (0.0, DONE)]))
    user, _, fired = make_user(url)

    def send_then_idle():
        user.send("hi")
        gevent.sleep(5)

    greenlet = gevent.spawn(send_then_idle)
    wait_for(lambda: len(fired) == 1)
    greenlet.kill(block=True)
    stop(process)

    assert len(fired) == 1 and fired[0]["exception"] is None


def test_no_new_request_once_the_runner_is_stopping(scripted_server):
    url, process = scripted_server(sse_script([(0.01, sse(chat("a", finish="length"))), (0.0, DONE)]))
    user, environment, fired = make_user(url)

    environment.runner.state = STATE_RUNNING
    user.stream_one()
    environment.runner.state = STATE_CLEANUP  # what Locust's Runner.stop sets before killing the users
    with pytest.raises(StopUser):
        user.stream_one()
    stop(process)

    assert len(fired) == 1 and len(server_log(process)["requests"]) == 1
