"""The process's StreamReader: many streams read by one greenlet, each request's own outcome.

Streams that share the reader must not disturb one another: a stream that stalls until its
timeout, a request whose greenlet is killed, a consumer that raises — the other streams go on and
their timings stay those of the server's writes.
"""

from __future__ import annotations

import socket
import time

import gevent
import pytest

from llm_locust.connection import ConnectionPool, Target
from llm_locust.protocols import get_adapter
from llm_locust.reader import StreamReader
from llm_locust.stream import Limits, run_exchange
from llm_locust.watchdog import Watchdog
from tests.conftest import STAMP_TOLERANCE_MS, server_log, stop
from tests.scripted_server import sse_script
from tests.sse_payloads import DONE, chat, sse

REQUEST = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
ADAPTER = get_adapter("openai-chat")
GAP_S = 0.05
TOKENS = [(0.02, sse(chat(role=True)))] + [(GAP_S, sse(chat(f"t{i}"))) for i in range(8)] + [
    (0.0, sse(chat("", finish="length"))), (0.0, DONE)]  # fmt: skip

pytestmark = pytest.mark.skipif(not StreamReader.available(), reason="StreamReader needs Linux epoll")


def exchange_on(url: str, reader: StreamReader, watchdog: Watchdog, limits: Limits = Limits()):
    return run_exchange(ConnectionPool(Target(url)), REQUEST, ADAPTER, limits, watchdog, reader)[0]


def test_concurrent_streams_each_timed_by_their_own_writes(scripted_server):
    url, process = scripted_server(sse_script(TOKENS))
    reader, watchdog = StreamReader(), Watchdog()

    started = time.perf_counter()
    greenlets = [gevent.spawn(exchange_on, url, reader, watchdog) for _ in range(20)]
    gevent.joinall(greenlets, timeout=10)
    elapsed = time.perf_counter() - started
    stop(process)

    exchanges = [g.value for g in greenlets]
    assert all(e is not None and e.failure is None and e.done for e in exchanges)
    assert [e.texts for e in exchanges] == [[f"t{i}" for i in range(8)]] * 20
    assert elapsed < 0.02 + 8 * GAP_S + 1.0  # read side by side, not one after the other
    for e in exchanges:  # the script's own gaps, 50 ms, between token events
        gaps_ms = [(int(b) - int(a)) / 1000 for a, b in zip(e.token_us, e.token_us[1:])]
        assert gaps_ms == pytest.approx([GAP_S * 1000] * 7, abs=2 * STAMP_TOLERANCE_MS)
    assert not reader._streams  # every stream left the reader


def test_a_stalled_stream_times_out_while_the_others_go_on(scripted_server):
    stalled_url, stalled = scripted_server(sse_script([(0.02, sse(chat("a"))), (3.0, DONE)]))
    healthy_url, healthy = scripted_server(sse_script(TOKENS))
    reader, watchdog = StreamReader(), Watchdog()

    slow = gevent.spawn(exchange_on, stalled_url, reader, watchdog, Limits(stall_s=0.2))
    fine = [gevent.spawn(exchange_on, healthy_url, reader, watchdog, Limits(stall_s=0.2)) for _ in range(3)]
    gevent.joinall([slow, *fine], timeout=10)
    stop(stalled)
    log = server_log(stalled)
    stop(healthy)

    kind, _, failed_at = slow.value.failure
    assert kind.value == "stall_timeout" and slow.value.texts == ["a"]  # the token before it is kept
    first_token_s = log["sent"][1] - time.time() + time.perf_counter()  # as perf_counter
    assert (failed_at - first_token_s) * 1000 == pytest.approx(200, abs=4 * STAMP_TOLERANCE_MS)
    assert all(g.value.failure is None and len(g.value.texts) == 8 for g in fine)
    assert not reader._streams


def test_killing_a_request_greenlet_leaves_the_reader_working(scripted_server):
    url, process = scripted_server(sse_script(TOKENS))
    reader, watchdog = StreamReader(), Watchdog()

    doomed = gevent.spawn(exchange_on, url, reader, watchdog)
    gevent.sleep(0.15)  # mid-stream: in the reader
    assert len(reader._streams) == 1
    doomed.kill()
    assert not reader._streams
    after = exchange_on(url, reader, watchdog)
    stop(process)

    assert after.failure is None and len(after.texts) == 8


class _Exploding:
    """A consumer with a bug: its first take raises."""

    def take(self, data, t):
        raise RuntimeError("consumer bug")

    def fail(self, exc):
        raise AssertionError("not reached")

    def release(self):
        self.released = True


def test_an_unexpected_consumer_error_surfaces_in_its_own_greenlet_only():
    reader = StreamReader()
    left, right = socket.socketpair()
    left.setblocking(False)
    consumer = _Exploding()

    def follow():
        with pytest.raises(RuntimeError, match="consumer bug"):
            reader.follow(left, consumer)
        return "raised here"

    g = gevent.spawn(follow)
    gevent.sleep(0.01)
    right.send(b"x")
    assert g.get(timeout=5) == "raised here"
    assert consumer.released and not reader._streams
    left.close()
    right.close()
