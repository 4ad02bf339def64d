"""The pause after connection-level failures and rejections (issue 14: an outage was hammered at 13k
requests/s, a full queue at 1,400 requests/s): bounded, growing, jittered, per user, Retry-After
honoured up to its bound, ended by the first request answered otherwise."""

from __future__ import annotations

import random

import gevent
import pytest

from llm_locust.client.backoff import Backoff, retry_after_s
from llm_locust.client.connection import ConnectionPool, Target
from tests.conftest import stop
from tests.locust_env import make_users
from tests.scripted_server import sse_script
from tests.sse_payloads import DONE, chat, sse

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)

# the documented bounds, written out: the n-th failure in a row waits within [low, high] s
DOCUMENTED = [(0.05, 0.1), (0.1, 0.2), (0.2, 0.4), (0.4, 0.8), (0.8, 1.6), (1.0, 2.0), (1.0, 2.0), (1.0, 2.0)]


@pytest.mark.parametrize("kind", ["connection_error", "connect_timeout", "http_429", "http_5xx"])
def test_pauses_grow_within_the_documented_bounds(kind):
    backoff = Backoff(random.Random(7))
    for low, high in DOCUMENTED:
        assert low <= backoff.after(kind) <= high


def test_the_jitter_spreads_users_that_failed_together():
    pauses = {round(Backoff(random.Random(seed)).after("connection_error"), 6) for seed in range(20)}
    assert len(pauses) > 10 and min(pauses) >= 0.05 and max(pauses) <= 0.1


@pytest.mark.parametrize("answered", ["", "http_4xx", "ttft_timeout", "truncated", "stream_error"])
def test_an_answered_request_ends_the_streak(answered):
    backoff = Backoff(random.Random(1))
    for kind in ("connection_error", "http_429", "http_5xx", "connection_error", "http_429", "http_429"):
        backoff.after(kind)  # one streak, whatever mix of refusals
    assert 1.0 <= backoff.after("http_5xx") <= 2.0
    assert backoff.after(answered) == 0.0
    assert 0.05 <= backoff.after("http_429") <= 0.1  # starts over


@pytest.mark.parametrize(("header", "expected"), [("3", 3.0), ("0", 0.0), ("120", 10.0)])
def test_retry_after_is_honoured_up_to_its_bound(header, expected):
    backoff = Backoff(random.Random(3))
    assert backoff.after("http_429", retry_after_s(header)) == expected
    assert backoff.after("http_5xx", retry_after_s(header)) == expected
    # never for a refused connection (no response, so no header), nor when unreadable: the streak's
    # third and fourth failures
    assert 0.2 <= backoff.after("connection_error", retry_after_s(header)) <= 0.4
    assert 0.4 <= backoff.after("http_429", retry_after_s("later")) <= 0.8


def test_retry_after_as_an_http_date():
    # RFC 9110 10.2.3's example date, 7 s after "now"
    assert retry_after_s("Fri, 31 Dec 1999 23:59:59 GMT", now_s=946684792.0) == 7.0
    assert retry_after_s("Fri, 31 Dec 1999 23:59:59 GMT", now_s=946684800.0) == 0.0  # in the past


def test_backoff_false_never_pauses():
    backoff = Backoff(random.Random(1), enabled=False)
    assert [backoff.after(k, 5.0) for k in ("http_429", "http_5xx", "connection_error")] == [0.0, 0.0, 0.0]


def test_real_users_pause_after_refused_connections_and_not_after_answers(scripted_server):
    """Two users, one server: user 0 against a port nothing listens on, user 1 answered. The
    refused user's sends are spaced by the documented pauses; the healthy one, running at the same
    time, never waits."""
    url, process = scripted_server(sse_script([(0.0, sse(chat("a", finish="length"))), (0.0, DONE)]))
    (down, healthy), _, fired = make_users(url, 2)
    down.pool = ConnectionPool(Target("http://127.0.0.1:9"))  # discard port: nothing listens on loopback

    def five(user):
        for _ in range(5):
            user.stream_one()

    gevent.joinall([gevent.spawn(five, down), gevent.spawn(five, healthy)], raise_error=True)  # side by side
    stop(process)

    starts = [f["context"]["llm_record"] for f in fired]
    refused = [r for r in starts if r.error_kind]
    answered = [r for r in starts if not r.error_kind]
    assert len(refused) == 5 and all(r.error_kind == "connection_error" for r in refused)
    assert len(answered) == 5
    gaps = [b.t_start_s - (a.t_start_s + a.e2e_ms / 1000) for a, b in zip(refused, refused[1:])]
    for gap, (low, high) in zip(gaps, DOCUMENTED):
        assert low - 0.005 <= gap <= high + 0.05
    healthy_gaps = [b.t_start_s - (a.t_start_s + a.e2e_ms / 1000) for a, b in zip(answered, answered[1:])]
    assert max(healthy_gaps) < 0.03
    assert answered[-1].t_start_s < refused[-1].t_start_s  # done while the other was still pausing


def _rejection(status: str, retry_after: str | None) -> dict:
    """Writes of one JSON error answer (``Connection: close``), with a Retry-After header or not."""
    body = '{"error": {"message": "The server is overloaded. Retry later."}}'
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
    )
    head += f"Retry-After: {retry_after}\r\n" if retry_after is not None else ""
    return {"writes": [[0.0, head + "\r\n" + body], [0.0, {"close": True}]], "keep_alive": False}


def test_real_users_pause_after_429_as_retry_after_says(scripted_server):
    """A 429 with Retry-After: 1 from a real socket: the user's next sends come 1 s after each
    answer, and each record carries the pause it led to (backoff_ms) - a pause is no request."""
    url, process = scripted_server(_rejection("429 Too Many Requests", "1"))
    (user,), _, fired = make_users(url, 1)
    for _ in range(3):
        user.stream_one()
    stop(process)
    records = [f["context"]["llm_record"] for f in fired]
    assert [r.error_kind for r in records] == ["http_429"] * 3 and [r.status_code for r in records] == [429] * 3
    assert [r.backoff_ms for r in records] == [1000.0] * 3
    gaps = [b.t_start_s - (a.t_start_s + a.e2e_ms / 1000) for a, b in zip(records, records[1:])]
    assert all(0.99 <= gap <= 1.1 for gap in gaps), gaps
    assert all(r.e2e_ms < 500 for r in records)  # the pause is in no latency


def test_real_users_back_off_exponentially_after_503_without_retry_after(scripted_server):
    url, process = scripted_server(_rejection("503 Service Unavailable", None))
    (user,), _, fired = make_users(url, 1)
    for _ in range(4):
        user.stream_one()
    stop(process)
    records = [f["context"]["llm_record"] for f in fired]
    assert [r.error_kind for r in records] == ["http_5xx"] * 4
    for record, (low, high) in zip(records, DOCUMENTED):
        assert low * 1000 <= record.backoff_ms <= high * 1000
    gaps = [b.t_start_s - (a.t_start_s + a.e2e_ms / 1000) for a, b in zip(records, records[1:])]
    for gap, record in zip(gaps, records):
        assert record.backoff_ms / 1000 - 0.005 <= gap <= record.backoff_ms / 1000 + 0.05
