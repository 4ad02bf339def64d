"""One streamed HTTP exchange, timed as its bytes arrive: connect, send, headers, SSE events.

:func:`run_exchange` writes one request on a connection from a
:class:`~llm_locust.connection.ConnectionPool` and reads the answer with ``recv`` as the socket
delivers it (never in fixed-size blocks: a block read would hand a short stream's events over at
its end). Every SSE event is stamped with the arrival of the bytes that completed it
(:func:`_arrival_recv`, ``time.perf_counter`` seconds). HTTP framing (status line, headers, chunked transfer coding) is
geventhttpclient's C parser; SSE framing is :class:`~llm_locust.sse.SSEDecoder`.

Each event is decoded when it is framed (``orjson``: measured in
``benchmarks/client_overhead.py`` at about a third of the stdlib's ``json.loads`` per event, and
faster than one stdlib call on a whole stream's payloads joined into an array).

Timeouts (``Limits``; 0 turns one off), each a failure kind of its own:

- ``connect_timeout``: no TCP/TLS connection within ``connect_s``.
- ``ttft_timeout``: no token event within ``ttft_s`` of the send (the wait for the response
  headers included).
- ``stall_timeout``: after the first token, no SSE event for ``stall_s`` (the gap between events).
- ``total_timeout``: the whole exchange took longer than ``total_s``.

The connect timeout is the socket's own; the others are kept by a
:class:`~llm_locust.watchdog.Watchdog` (one timer for all streams instead of one per ``recv``).
"""

from __future__ import annotations

import math
import socket
import time
from dataclasses import dataclass, field

import gevent
import gevent.socket
from geventhttpclient.response import HTTPParseError, HTTPResponse
from orjson import loads

from llm_locust.connection import ConnectionPool
from llm_locust.protocols.base import Adapter
from llm_locust.record import ErrorKind
from llm_locust.sse import SSEDecoder, is_done
from llm_locust.watchdog import Deadline, Expired, Watchdog

_PLAIN_SOCKET = gevent.socket.socket  # what ConnectionPool opens for http:// (gevent's)
_LOOP = gevent.get_hub().loop
_LOOP_TIME_IS_WALL = abs(_LOOP.now() - time.time()) < 60.0  # libev: wall clock; libuv: not

RECV_BYTES = 65536
"""Most bytes asked of one ``recv``."""
ERROR_BODY_BYTES = 65536
"""Most bytes of a non-200 body kept for its error message."""
AFTER_DONE_GRACE_S = 0.5
"""After ``[DONE]``, how long the end of the HTTP message is awaited (so the connection can be
kept alive); past it the connection is closed. E2E is stamped at ``[DONE]`` either way."""
INF = math.inf


@dataclass(slots=True, frozen=True, kw_only=True)
class Limits:
    """Timeouts of one request, seconds; 0 (or less) turns a timeout off.

    Defaults never fail a slow but healthy server: a TTFT of 15 minutes covers queueing at any
    sane ladder step, and a healthy stream never pauses 5 minutes between two events.
    """

    connect_s: float = 60.0
    ttft_s: float = 900.0
    stall_s: float = 300.0
    total_s: float = 0.0


@dataclass(slots=True, kw_only=True)
class Exchange:
    """Raw outcome of one exchange (all instants ``time.perf_counter()`` seconds).

    Attributes
    ----------
    t0 : float
        When the exchange started (before connecting or writing).
    connect_s : float
        Seconds to open a new connection; NaN when a kept-alive one was reused.
    headers_t : float
        When the response headers were complete (NaN if they never were).
    status : int
        HTTP status, 0 without a response.
    token_us : list of str
        When each token event arrived, whole µs after ``t0``, as decimal strings (formatted as
        they come, so the end of a stream costs one join). A token event carries generated
        text (answer, reasoning or tool calls), or, after the first one, a token the protocol
        counts without text (TGI's special EOS token).
    texts, stated, running : list
        Per token event: its text; the tokens the protocol says it carried (None if unknown);
        the running ``usage.completion_tokens`` it carried (None without usage).
    first_token_t, first_answer_t : float
        The first token event, the first event with answer text (``content``); NaN if none.
    pre_tokens, running_before : int
        Tokens stated, and the running completion tokens, on events before the first token event.
    finish_reason : str
        The last finish reason received, "" if none.
    usage : dict or None
        The last usage object received.
    response_id : str or None
        The first response id received.
    sse_events : int
        SSE events with data received, ``[DONE]`` included.
    done : bool
        ``[DONE]`` was received.
    end_t : float
        Last SSE event (``[DONE]`` included), or the end of the stream when none came.
    failure : tuple of (ErrorKind, str, float) or None
        Kind, message and instant of the failure, None when the exchange itself went well
        (``truncated`` is decided later, from the finish reason).
    body_bytes : int
        Body bytes received.
    body_head : bytes
        The first bytes of the body (kept for messages about a body that was not SSE).
    """

    t0: float
    connect_s: float = math.nan
    headers_t: float = math.nan
    status: int = 0
    token_us: list = field(default_factory=list)
    texts: list = field(default_factory=list)
    stated: list = field(default_factory=list)
    running: list = field(default_factory=list)
    first_token_t: float = math.nan
    first_answer_t: float = math.nan
    pre_tokens: int = 0
    running_before: int = 0
    finish_reason: str = ""
    usage: dict | None = None
    response_id: str | None = None
    sse_events: int = 0
    done: bool = False
    end_t: float = math.nan
    failure: tuple | None = None
    body_bytes: int = 0
    body_head: bytes = b""


def _arrival_recv(sock, raw) -> tuple[bytes, float]:
    """``recv`` on ``sock`` and the instant its bytes arrived (``time.perf_counter`` seconds).

    When the bytes were not there yet, the greenlet waits for the socket to become readable and
    the arrival is the instant the event loop saw it (libev's loop time, taken when its poll
    returned), not the later instant this greenlet got its turn: with hundreds of streams woken
    by the same poll, the last one would otherwise be stamped milliseconds late. Bytes that were
    already waiting are stamped now. ``raw`` is the OS socket under a plain gevent socket; None
    (TLS, or an event loop whose time is not the wall clock) stamps after gevent's ``recv``.
    """
    if raw is None:
        data = sock.recv(RECV_BYTES)
        return data, time.perf_counter()
    while True:
        # wait first: the previous recv nearly always emptied the socket, and a failed recv costs
        # an exception; when bytes are already there the loop reports it at once
        sock._wait(sock._read_event)
        now_wall, now = time.time(), time.perf_counter()
        arrived = now - max(0.0, now_wall - _LOOP.now())
        try:
            return raw.recv(RECV_BYTES), arrived
        except BlockingIOError:  # spurious readiness: wait again
            continue


def _raw_socket(sock):
    """The OS socket to ``recv`` from directly, or None (see :func:`_arrival_recv`)."""
    if sock.__class__ is _PLAIN_SOCKET and _LOOP_TIME_IS_WALL:
        return getattr(sock, "_sock", None)
    return None


class _Clock:
    """The deadlines of one exchange, kept in a :class:`~llm_locust.watchdog.Deadline`."""

    __slots__ = ("limits", "ttft_t", "total_t", "deadline", "watchdog")

    def __init__(self, limits: Limits, t0: float, watchdog: Watchdog) -> None:
        self.limits = limits
        self.watchdog = watchdog
        self.ttft_t = t0 + limits.ttft_s if limits.ttft_s > 0 else INF
        self.total_t = t0 + limits.total_s if limits.total_s > 0 else INF
        self.deadline = Deadline()
        self.before_token()

    def before_token(self) -> None:
        """Until the first token: the TTFT timeout (or the total one, if sooner)."""
        d = self.deadline
        if self.total_t <= self.ttft_t:
            d.at, d.kind, d.message = self.total_t, ErrorKind.TOTAL_TIMEOUT, self._total_message()
        else:
            d.at, d.kind, d.message = self.ttft_t, ErrorKind.TTFT_TIMEOUT, f"no token within {self.limits.ttft_s:g} s"

    def after_event(self, last_event_t: float) -> None:
        """After the first token: the stall timeout from the last event (or the total one)."""
        stall_t = last_event_t + self.limits.stall_s if self.limits.stall_s > 0 else INF
        d = self.deadline
        if stall_t < self.total_t:
            if d.kind is not ErrorKind.STALL_TIMEOUT:
                d.kind, d.message = ErrorKind.STALL_TIMEOUT, f"no event for {self.limits.stall_s:g} s"
            earlier = stall_t < d.at
            d.at = stall_t
            if earlier:  # e.g. from the TTFT deadline to a shorter stall one: the watchdog must know
                self.watchdog.moved(d)
        elif d.kind is not ErrorKind.TOTAL_TIMEOUT:
            d.at, d.kind, d.message = self.total_t, ErrorKind.TOTAL_TIMEOUT, self._total_message()
            self.watchdog.moved(d)

    def _total_message(self) -> str:
        return f"request took longer than {self.limits.total_s:g} s"


def _open(pool: ConnectionPool, request: bytes, clock: _Clock, out: Exchange) -> socket.socket:
    """A connection with the request written on it (a kept-alive one when the pool has one)."""
    sock = pool.idle_socket()
    if sock is not None:
        try:
            sock.sendall(request)
            return sock
        except OSError:  # the server closed the idle connection: the request never reached it
            sock.close()
    at = clock.deadline.at
    remaining = at - time.perf_counter()
    limit = clock.limits.connect_s if clock.limits.connect_s > 0 else INF
    budget = min(limit, remaining)
    started = time.perf_counter()
    try:
        sock = pool.connect(None if budget == INF else max(budget, 1e-3))
    except TimeoutError:
        if limit <= remaining:
            raise Expired(ErrorKind.CONNECT_TIMEOUT, f"no connection within {limit:g} s") from None
        raise Expired(clock.deadline.kind, clock.deadline.message) from None
    out.connect_s = time.perf_counter() - started
    sock.settimeout(None)  # from here on the watchdog keeps the time
    try:
        sock.sendall(request)
    except BaseException:
        sock.close()
        raise
    return sock


def run_exchange(
    pool: ConnectionPool, request: bytes, adapter: Adapter, limits: Limits, watchdog: Watchdog
) -> tuple[Exchange, bool]:
    """Send ``request`` (a whole HTTP/1.1 request) and read its streamed answer.

    Parameters
    ----------
    pool : ConnectionPool
        Where the connection comes from and goes back to (the caller holds a slot).
    request : bytes
        Request line, headers and body.
    adapter : Adapter
        Interprets the SSE payloads.
    limits : Limits
        Timeouts.
    watchdog : Watchdog
        Keeps the TTFT, stall and total deadlines (one per process).

    Returns
    -------
    (Exchange, bool)
        The outcome, and whether the connection went back to the pool for reuse.
    """
    out = Exchange(t0=time.perf_counter())
    clock = _Clock(limits, out.t0, watchdog)
    watchdog.arm(clock.deadline)
    sock = None
    reusable = False
    try:
        sock = _open(pool, request, clock, out)
        reusable = _read_response(sock, adapter, clock, out)
    except Exception as exc:
        out.failure = _failure_of(exc)
        if out.failure is None:
            raise
        if math.isnan(out.end_t):
            out.end_t = out.failure[2]
    finally:
        watchdog.disarm(clock.deadline)
        if sock is not None:
            pool.give_back(sock, reusable=reusable)
    return out, reusable


def _read_response(sock: socket.socket, adapter: Adapter, clock: _Clock, out: Exchange) -> bool:
    """Read headers and body into ``out``; return whether the connection may be reused."""
    parser = HTTPResponse(method="POST")
    raw = _raw_socket(sock)
    while not parser.headers_complete or parser.get_code() < 200:
        data, out.headers_t = _arrival_recv(sock, raw)
        parser.feed(data)
        if not data:
            raise ConnectionError("connection closed before the response headers")
    out.status = parser.status_code
    if out.status != 200:
        return _read_error_body(sock, parser, out)
    return _read_events(sock, raw, parser, adapter, clock, out)


def _failure_of(exc: BaseException) -> tuple | None:
    """(kind, message, now) of an exception raised while reading; None for an unexpected one."""
    now = time.perf_counter()
    if isinstance(exc, Expired):
        return (exc.kind, str(exc), now)
    if isinstance(exc, HTTPParseError):
        if "ncomplete" in str(exc) or "closed" in str(exc):
            return (ErrorKind.CONNECTION_ERROR, f"connection closed mid-stream (HTTP: {exc})", now)
        return (ErrorKind.BAD_RESPONSE, f"HTTP: {exc}", now)
    if isinstance(exc, OSError):  # resets, refused writes, closed mid-message
        return (ErrorKind.CONNECTION_ERROR, repr(exc), now)
    return None


def _read_error_body(sock, parser: HTTPResponse, out: Exchange) -> bool:
    body = parser._body_buffer
    while not parser.message_complete and len(body) < ERROR_BODY_BYTES:
        data = sock.recv(RECV_BYTES)
        parser.feed(data)
        if not data:
            break
    out.body_bytes = len(body)
    out.body_head = bytes(body[:ERROR_BODY_BYTES])
    out.end_t = time.perf_counter()
    return parser.message_complete and parser.should_keep_alive()


def _read_events(sock, raw, parser: HTTPResponse, adapter: Adapter, clock: _Clock, out: Exchange) -> bool:
    """The SSE loop: every event decoded (``orjson``) and stamped with its read's instant."""
    body = parser._body_buffer  # the C parser appends decoded body bytes here
    decoder = SSEDecoder()
    token_us, texts, stated, running = out.token_us, out.texts, out.stated, out.running
    t0 = out.t0
    interpret = adapter.interpret
    first_token = False
    first_answer = True
    need_id = True
    t = out.headers_t
    t_us = None
    n_events = 0
    body_bytes = 0
    last_event_t = math.nan
    failure = None
    try:
        while True:
            if body:
                if not body_bytes:
                    out.body_head = bytes(body[:200])
                body_bytes += len(body)
                framed = decoder.feed(body)  # the decoder copies what it keeps
                del body[:]
                for event_type, data in framed:
                    if event_type != "message":
                        if event_type == "error":
                            failure = (ErrorKind.STREAM_ERROR, "event: error " + data.decode("utf-8", "replace"), t)
                            break
                        continue  # other named events carry nothing we measure
                    if not data or data.isspace():
                        continue  # "data:" keep-alive
                    n_events += 1
                    last_event_t = t
                    if data[0] != 123 and is_done(data):  # not b"{": only then the real test
                        out.done = True
                        break
                    try:
                        event = interpret(loads(data))
                    except (ValueError, AttributeError, TypeError) as exc:
                        failure = (ErrorKind.BAD_RESPONSE, f"unparseable event {data[:80]!r}: {exc}", t)
                        break
                    # bookkeeping as events come (not in one burst at the end of the stream),
                    # into lists of atoms the garbage collector never has to walk
                    usage = event.usage
                    if usage is not None:
                        out.usage = usage
                        usage = usage.get("completion_tokens")
                    if event.finish_reason:
                        out.finish_reason = event.finish_reason
                    if need_id and event.response_id:
                        out.response_id, need_id = event.response_id, False
                    text = event.text
                    if text or (first_token and event.tokens):
                        if not first_token:
                            first_token = True
                            out.first_token_t = t
                        if event.answer and first_answer:
                            first_answer = False
                            out.first_answer_t = t
                        if t_us is None:  # formatted once per read (its events share the instant), not at the end
                            t_us = str(int((t - t0) * 1e6 + 0.5))
                        token_us.append(t_us)
                        texts.append(text)
                        stated.append(event.tokens)
                        running.append(usage)
                    elif not first_token:
                        out.pre_tokens += event.tokens or 0
                        if usage is not None:
                            out.running_before = usage
                    if event.error is not None:
                        failure = (ErrorKind.STREAM_ERROR, event.error, t)
                        break
                if failure is not None or out.done:
                    break
                if first_token:
                    clock.after_event(last_event_t)
            if parser.message_complete:
                break
            data, t = _arrival_recv(sock, raw)
            t_us = None
            parser.feed(data)
            if not data and not parser.message_complete:
                raise ConnectionError("connection closed mid-stream")
    except Exception as exc:  # a timeout, reset or close: what came before it is kept
        failure = _failure_of(exc)
        if failure is None:
            raise
    out.sse_events = n_events
    out.body_bytes = body_bytes
    out.end_t = last_event_t if n_events else time.perf_counter()
    if failure is not None:
        out.failure = failure
        out.end_t = failure[2]
        return False
    if out.done and not parser.message_complete:
        _await_end(sock, parser)
    return parser.message_complete and parser.should_keep_alive() and not decoder.pending_bytes


def _await_end(sock, parser: HTTPResponse) -> None:
    """After ``[DONE]``: read the end of the HTTP message for a short while (for keep-alive)."""
    try:
        with gevent.Timeout(AFTER_DONE_GRACE_S, False):
            while not parser.message_complete:
                data = sock.recv(RECV_BYTES)
                parser.feed(data)
                if not data:
                    return
    except (OSError, HTTPParseError, Expired):
        return
