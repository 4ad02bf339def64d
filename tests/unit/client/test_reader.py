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

from llm_locust.client.connection import ConnectionPool, Target
from llm_locust.client.protocols import get_adapter
from llm_locust.client.reader import StreamReader
from llm_locust.client.stream import Limits, run_exchange
from llm_locust.client.watchdog import Watchdog
from tests.conftest import STAMP_TOLERANCE_MS, LoopLag, server_log, stop
from tests.scripted_server import sse_script
from tests.sse_payloads import DONE, chat, sse

REQUEST = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
ADAPTER = get_adapter("openai-chat")
GAP_S = 0.05
TOKENS = [(0.02, sse(chat(role=True)))] + [(GAP_S, sse(chat(f"t{i}"))) for i in range(8)] + [
    (0.0, sse(chat("", finish="length"))), (0.0, DONE)]  # fmt: skip

pytestmark = pytest.mark.skipif(not StreamReader.available(), reason="StreamReader needs Linux epoll")


def exchange_on(url: str, reader: StreamReader | None, watchdog: Watchdog, limits: Limits | None = None):
    return run_exchange(ConnectionPool(Target(url)), REQUEST, ADAPTER, limits or Limits(), watchdog, reader)[0]


def test_concurrent_streams_each_timed_by_their_own_writes(scripted_server):
    url, process = scripted_server(sse_script(TOKENS))
    reader, watchdog = StreamReader(), Watchdog()

    started = time.perf_counter()
    greenlets = [gevent.spawn(exchange_on, url, reader, watchdog) for _ in range(20)]
    gevent.joinall(greenlets, timeout=10)
    elapsed = time.perf_counter() - started
    stop(process)
    sent = server_log(process)["sent_by_connection"]

    exchanges = [g.value for g in greenlets]
    assert all(e is not None and e.failure is None and e.done for e in exchanges)
    assert ["".join(e.texts) for e in exchanges] == ["".join(f"t{i}" for i in range(8))] * 20
    assert [e.token_events for e in exchanges] == [8] * 20
    assert elapsed < 0.02 + 8 * GAP_S + 1.0  # read side by side, not one after the other
    # The gaps the server really left between its token writes (writes 2..9 carry t0..t7): about
    # the script's 50 ms, later when one of its 20 threads woke late on a busy machine.
    server_gaps_ms = [[(stamps[i + 1] - stamps[i]) * 1000 for i in range(2, 9)] for stamps in sent.values()]
    assert len(server_gaps_ms) == 20
    for e in exchanges:  # each stream's gaps are those of one connection's writes
        stamps_us = " ".join(e.token_us).split()
        gaps_ms = [(int(b) - int(a)) / 1000 for a, b in zip(stamps_us, stamps_us[1:])]
        assert any(gaps_ms == pytest.approx(g, abs=2 * STAMP_TOLERANCE_MS) for g in server_gaps_ms), (
            gaps_ms,
            server_gaps_ms,
        )
    assert not reader._streams  # every stream left the reader


def test_a_stalled_stream_times_out_while_the_others_go_on(scripted_server):
    stalled_url, stalled = scripted_server(sse_script([(0.02, sse(chat("a"))), (3.0, DONE)]))
    healthy_url, healthy = scripted_server(sse_script(TOKENS))
    reader, watchdog = StreamReader(), Watchdog()

    with LoopLag() as lag:
        slow = gevent.spawn(exchange_on, stalled_url, reader, watchdog, Limits(stall_s=0.2))
        fine = [gevent.spawn(exchange_on, healthy_url, reader, watchdog, Limits(stall_s=0.2)) for _ in range(3)]
        gevent.joinall([slow, *fine], timeout=10)
    stop(stalled)
    log = server_log(stalled)
    stop(healthy)

    kind, failed_at = slow.value.failure.kind, slow.value.failure.t
    assert kind.value == "stall_timeout" and "".join(slow.value.texts) == "a"  # the token before it is kept
    first_token_s = log["sent"][1] - time.time() + time.perf_counter()  # as perf_counter
    assert (failed_at - first_token_s) * 1000 == pytest.approx(200, abs=4 * STAMP_TOLERANCE_MS + lag.max_ms)
    assert all(g.value.failure is None and g.value.token_events == 8 for g in fine)
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

    assert after.failure is None and after.token_events == 8


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


def test_a_read_is_stamped_when_the_kernel_received_its_bytes_not_when_it_was_read():
    from llm_locust.client.reader import enable_kernel_stamps, stamped_recv

    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    try:
        assert enable_kernel_stamps(client)
        server.sendall(b"first")
        time.sleep(0.05)
        server.sendall(b"second")
        sent_second = time.perf_counter()  # just after the newest bytes left
        time.sleep(0.1)  # read 100 ms after they arrived
        data, stamp = stamped_recv(client, loop_t=-1.0)
        read_at = time.perf_counter()
        assert data == b"firstsecond"
        # the newest bytes' arrival: at most the send's return, never the read 100 ms later
        assert sent_second - 0.02 <= stamp <= sent_second + 0.001
        assert read_at - stamp >= 0.09

        plain = socket.create_connection(listener.getsockname())  # stamps not asked for
        other, _ = listener.accept()
        other.sendall(b"x")
        time.sleep(0.01)
        assert stamped_recv(plain, loop_t=123.0) == (b"x", 123.0)  # the loop's time, as given
        plain.close()
        other.close()
    finally:
        for s in (client, server, listener):
            s.close()


def test_finished_streams_are_freed_without_the_cycle_collector(scripted_server):
    # an exchange's objects must go when it ends, not wait for the collector: a reference cycle
    # (the stall deadline's renewal refers back to its stream) held 6.5 KB more per open stream
    # at 1,000 streams (benchmarks/client_overhead.py)
    import gc

    from llm_locust.client.stream import _EventStream

    url, process = scripted_server(sse_script([(0.0, piece) for _, piece in TOKENS]))
    reader, watchdog = StreamReader(), Watchdog()
    gc.collect()
    gc.disable()
    before = sum(1 for o in gc.get_objects() if type(o) is _EventStream)  # other tests' ones, still held
    try:
        for per_greenlet in (False, True):  # read by the reader, and in the request's own greenlet
            for _ in range(5):
                exchange = exchange_on(url, None if per_greenlet else reader, watchdog)
                assert exchange.failure is None and exchange.token_events == 8
        alive = sum(1 for o in gc.get_objects() if type(o) is _EventStream) - before
    finally:
        gc.enable()
        stop(process)
    assert alive == 0
