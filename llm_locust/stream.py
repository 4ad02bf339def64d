"""One streamed HTTP exchange, timed as its bytes arrive: connect, send, headers, SSE events.

:func:`run_exchange` writes one request on a connection from a
:class:`~llm_locust.connection.ConnectionPool` and reads the answer with ``recv`` as the socket
delivers it (never in fixed-size blocks: a block read would hand a short stream's events over at
its end). Every SSE event is stamped with the arrival of the bytes that completed it
(``time.perf_counter`` seconds, see :mod:`llm_locust.reader`). The body of a 200 answer is read
by the process's :class:`~llm_locust.reader.StreamReader` when there is one, else by the
request's own greenlet. HTTP framing (status line, headers, chunked transfer coding) is
geventhttpclient's C parser; SSE framing is :class:`~llm_locust.sse.SSEDecoder`.

A kept-alive connection that the server closes just as the request goes out (its FIN or RST still
on the way when the pool checked the connection) gets the request again on a new connection,
once, when no byte of a response came on it (``Exchange.resent``).

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

from geventhttpclient.response import HTTPParseError, HTTPResponse
from orjson import loads

from llm_locust.connection import ConnectionPool
from llm_locust.protocols.base import Adapter
from llm_locust.reader import RECV_BYTES, StreamReader, arrival_recv, raw_socket
from llm_locust.record import ErrorKind
from llm_locust.sse import SSEDecoder, is_done
from llm_locust.watchdog import Deadline, Expired, Watchdog

ERROR_BODY_BYTES = 65536
"""Most bytes of a non-200 body kept for its error message."""
RESEND_WINDOW_S = 0.25
"""A kept-alive connection that closes unanswered within this long of the request's write is
re-sent once: the server's close crossed the request (it arrives within a network round trip).
A later close means the server held the request, and is a ``connection_error``."""
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
        Per token event: its text; the tokens the protocol says it carried; the running
        ``usage.completion_tokens`` it carried. ``stated`` and ``running`` skip the events that
        did not say, so they are per token event only when as long as ``token_us``.
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
    resent : bool
        The request went out twice: the kept-alive connection it was first written on closed
        before any byte of the response came (the server had closed it as it was reused), and it
        was sent again on a new connection. Intervals still count from ``t0``.
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
    resent: bool = False


class _Clock:
    """The deadlines of one exchange, kept in a :class:`~llm_locust.watchdog.Deadline`."""

    __slots__ = ("limits", "ttft_t", "total_t", "stall_s", "deadline", "watchdog")

    def __init__(self, limits: Limits, t0: float, watchdog: Watchdog) -> None:
        self.limits = limits
        self.watchdog = watchdog
        self.stall_s = limits.stall_s if limits.stall_s > 0 else INF
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
        stall_t = last_event_t + self.stall_s
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


def _open(
    pool: ConnectionPool, request: bytes, clock: _Clock, out: Exchange, *, reuse: bool = True
) -> tuple[socket.socket, bool]:
    """A connection with the request written on it, and whether it was a kept-alive one."""
    sock = pool.idle_socket() if reuse else None
    if sock is not None:
        try:
            sock.sendall(request)
            return sock, True
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
    return sock, False


def run_exchange(
    pool: ConnectionPool,
    request: bytes,
    adapter: Adapter,
    limits: Limits,
    watchdog: Watchdog,
    reader: StreamReader | None = None,
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
    reader : StreamReader, optional
        Reads the body together with every other open stream of the process (one per process);
        None, or a connection it cannot read (TLS), reads it in the calling greenlet.

    Returns
    -------
    (Exchange, bool)
        The outcome, and whether the connection went back to the pool for reuse.
    """
    out = Exchange(t0=time.perf_counter())
    clock = _Clock(limits, out.t0, watchdog)
    watchdog.arm(clock.deadline)
    sock = None
    stream = None
    reusable = False
    try:
        sock, reused = _open(pool, request, clock, out)
        sent_t = time.perf_counter()
        raw = raw_socket(sock)
        try:
            parser = _read_headers(sock, raw, out)
        except _Unanswered as exc:
            held_s = time.perf_counter() - sent_t
            if not reused:
                raise
            if held_s > RESEND_WINDOW_S:  # the server held the request, then dropped it
                raise ConnectionError(f"{exc}, {held_s:.2f} s after the request on a kept-alive connection") from None
            # a kept-alive connection the server closed as the request went out (its FIN or RST
            # was still on the way when the pool checked it): the request was not answered, and
            # is sent once more on a new connection, as browsers and HTTP libraries do
            sock.close()
            sock, _ = _open(pool, request, clock, out, reuse=False)
            out.resent = True
            raw = raw_socket(sock)
            parser = _read_headers(sock, raw, out)
        if out.status != 200:
            reusable = _read_error_body(sock, parser, out)
        else:
            stream = _EventStream(parser, adapter, clock, out)
            if not stream.take(None, out.headers_t):
                if reader is not None and raw is not None:
                    reader.follow(raw, stream)
                else:
                    while not stream.take(*arrival_recv(sock, raw)):
                        pass
            reusable = stream.reusable
    except Exception as exc:
        failure = _failure_of(exc)
        if failure is None:
            raise
        if stream is not None:
            stream.settle(failure)
        else:
            out.failure = failure
            if math.isnan(out.end_t):
                out.end_t = failure[2]
        reusable = False
    finally:
        watchdog.disarm(clock.deadline)
        if sock is not None:
            pool.give_back(sock, reusable=reusable)
    return out, reusable


def _read_headers(sock, raw, out: Exchange) -> HTTPResponse:
    """Read up to the end of the final response headers; the parser holds the body bytes read so far.

    Raises
    ------
    ConnectionError
        The connection closed before the headers were complete.
    """
    parser = HTTPResponse(method="POST")
    received = False
    while not parser.headers_complete or parser.get_code() < 200:
        try:
            data, out.headers_t = arrival_recv(sock, raw)
        except ConnectionError as exc:
            if received:
                raise
            raise _Unanswered(f"connection reset before any byte of the response: {exc!r}") from exc
        if not data:
            message = "connection closed before the response headers"
            raise ConnectionError(message) if received else _Unanswered(message + " (no byte of the response)")
        received = True
        parser.feed(data)
    out.status = parser.status_code
    return parser


class _Unanswered(ConnectionError):
    """The connection closed or was reset before any byte of the response arrived."""


def _failure_of(exc: BaseException) -> tuple | None:
    """(kind, message, now) of an exception raised while reading; None for an unexpected one."""
    now = time.perf_counter()
    if isinstance(exc, Expired):
        return (exc.kind, str(exc), now)
    if isinstance(exc, HTTPParseError):
        if "ncomplete" in str(exc) or "closed" in str(exc):
            return (ErrorKind.CONNECTION_ERROR, f"connection closed mid-stream (HTTP: {exc})", now)
        return (ErrorKind.BAD_RESPONSE, f"HTTP: {exc}", now)
    if exc.__class__ in (ConnectionError, _Unanswered):  # raised here, with our own messages
        return (ErrorKind.CONNECTION_ERROR, str(exc), now)
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


MAX_TOKEN_COUNT = 2**31 - 1
"""Largest token count a usage object may state."""


def checked_usage(usage) -> int | None:
    """``usage.completion_tokens`` of a usage object, after checking its counts.

    >>> checked_usage({"prompt_tokens": 7, "completion_tokens": 3})
    3
    >>> checked_usage({"prompt_tokens": 7}) is None
    True

    Raises
    ------
    ValueError
        ``usage`` is not a JSON object, or ``prompt_tokens``/``completion_tokens`` is present but
        not a whole number from 0 to :data:`MAX_TOKEN_COUNT` (a server bug: recorded as
        ``bad_response``, never as a count).
    """
    if usage.__class__ is not dict:
        raise ValueError(f"usage is not a JSON object: {usage!r:.60}")
    for key in ("prompt_tokens", "completion_tokens"):
        value = usage.get(key)
        if value is not None and (value.__class__ is not int or not 0 <= value <= MAX_TOKEN_COUNT):
            raise ValueError(f"usage.{key} is not a token count: {value!r:.60}")
    return usage.get("completion_tokens")


class _EventStream:
    """The body of one 200 answer: bytes in as they are read, the :class:`Exchange` filled as events come.

    :meth:`take` is called with each read's bytes and their arrival instant, by whichever greenlet
    reads the socket (the request's own, or the process's :class:`~llm_locust.reader.StreamReader`);
    it never blocks and never raises for what the server sent. Every SSE event is decoded
    (``orjson``) and stamped with its read's instant.

    After ``[DONE]`` the end of the HTTP message is awaited for :data:`AFTER_DONE_GRACE_S` (so the
    connection can be kept alive): the deadline then carries no kind, and its expiry only closes
    the connection.
    """

    __slots__ = ("out", "parser", "body", "decoder", "interpret", "clock", "first_token", "first_answer",
                 "need_id", "last_event_t", "draining", "reusable")  # fmt: skip

    def __init__(self, parser: HTTPResponse, adapter: Adapter, clock: _Clock, out: Exchange) -> None:
        self.out = out
        self.parser = parser
        self.body = parser._body_buffer  # the C parser appends decoded body bytes here
        self.decoder = SSEDecoder()
        self.interpret = adapter.interpret
        self.clock = clock
        self.first_token = False
        self.first_answer = True
        self.need_id = True
        self.last_event_t = math.nan
        self.draining = False
        self.reusable = False

    def take(self, data: bytes | None, t: float) -> bool:
        """Take one read's bytes (``b""``: the peer closed; None: only what the parser holds).

        Returns
        -------
        bool
            True when the exchange is over: ``[DONE]`` and the end of the message, the end of
            the message, the connection closed, or a failure (in ``out.failure``).
        """
        parser = self.parser
        try:
            if data is not None:
                parser.feed(data)
                if not data and not parser.message_complete:
                    raise ConnectionError("connection closed mid-stream")
            if self.draining:
                return parser.message_complete and self._message_ended()
            if self.body:
                failure = self._events(t)
                if failure is not None:
                    self.settle(failure)
                    return True
        except Exception as exc:  # a reset or close, a malformed message: what came before is kept
            failure = _failure_of(exc)
            if failure is None:
                raise
            self.settle(failure)
            return True
        out = self.out
        if out.done:
            self.settle(None)
            if parser.message_complete:
                return self._message_ended()
            self.draining = True
            deadline = self.clock.deadline
            deadline.at, deadline.kind, deadline.message = time.perf_counter() + AFTER_DONE_GRACE_S, None, "after [DONE]"
            self.clock.watchdog.moved(deadline)
            return False
        if parser.message_complete:
            self.settle(None)
            return self._message_ended()
        if self.first_token:
            self.clock.after_event(self.last_event_t)
        return False

    def _message_ended(self) -> bool:
        """The HTTP message is complete: reusable when the server keeps it alive and no event is
        half-read. Returns True (the exchange is over)."""
        self.reusable = self.parser.should_keep_alive() and not self.decoder.pending_bytes
        return True

    def fail(self, exc: OSError) -> None:
        """Reading the socket raised ``exc`` (a reset): the stream is over."""
        self.settle(_failure_of(exc))

    def release(self) -> None:
        """The stream is over: its deadline no longer applies."""
        self.clock.watchdog.disarm(self.clock.deadline)

    def settle(self, failure: tuple | None) -> None:
        """Close the books: E2E's end and the failure (kind, message, instant), if any.

        A failure after ``[DONE]`` (the message's end never came) is no failure: the connection is
        only not reused.
        """
        out = self.out
        self.reusable = False
        if self.draining:
            return
        out.end_t = self.last_event_t if out.sse_events else time.perf_counter()
        if failure is not None and not out.done:
            out.failure = failure
            out.end_t = failure[2]

    def _events(self, t: float) -> tuple | None:
        """Frame and interpret the body bytes held; the failure they carry, else None."""
        out = self.out
        body = self.body
        if not out.body_bytes:
            out.body_head = bytes(body[:200])
        out.body_bytes += len(body)
        framed = self.decoder.feed(body)  # the decoder copies what it keeps
        del body[:]
        if not framed:
            return None
        token_us, texts, stated, running = out.token_us, out.texts, out.stated, out.running
        interpret = self.interpret
        first_token = self.first_token
        first_answer = self.first_answer
        need_id = self.need_id
        t_us = None
        n_events = 0
        failure = None
        for event_type, data in framed:
            if event_type != "message":
                if event_type == "error":
                    failure = (ErrorKind.STREAM_ERROR, "event: error " + data.decode("utf-8", "replace"), t)
                    break
                continue  # other named events carry nothing we measure
            n_events += 1
            try:
                payload = loads(data)
            except ValueError as exc:  # the rare payloads that are not JSON are told apart only here
                if is_done(data):
                    out.done = True
                    break
                if not data.strip():
                    n_events -= 1
                    continue  # "data:" keep-alive
                failure = (ErrorKind.BAD_RESPONSE, f"unparseable event {data[:80]!r}: {exc}", t)
                break
            try:  # the adapter reads what the server sent: any error of it is the payload's
                text, answer, tokens, usage, finish_reason, error, _, response_id = interpret(payload)
                if text.__class__ is not str:
                    raise ValueError(f"generated text is not a string: {text!r:.40}")
                if usage is not None:
                    out.usage, usage = usage, checked_usage(usage)
            except Exception as exc:
                failure = (ErrorKind.BAD_RESPONSE, f"unparseable event {data[:80]!r}: {type(exc).__name__}: {exc}", t)
                break
            # bookkeeping as events come (not in one burst at the end of the stream),
            # into lists of atoms the garbage collector never has to walk
            if finish_reason:
                out.finish_reason = finish_reason
            if need_id and response_id:
                out.response_id = response_id
                need_id = self.need_id = False
            if text or (first_token and tokens):
                if not first_token:
                    first_token = self.first_token = True
                    out.first_token_t = t
                if answer and first_answer:
                    first_answer = self.first_answer = False
                    out.first_answer_t = t
                if t_us is None:  # formatted once per read (its events share the instant), not at the end
                    t_us = str(int((t - out.t0) * 1e6 + 0.5))
                token_us.append(t_us)
                texts.append(text)
                if tokens is not None:
                    stated.append(tokens)
                if usage is not None:
                    running.append(usage)
            elif not first_token:
                out.pre_tokens += tokens or 0
                if usage is not None:
                    out.running_before = usage
            if error is not None:
                failure = (ErrorKind.STREAM_ERROR, error, t)
                break
        if n_events:
            out.sse_events += n_events
            self.last_event_t = t
        return failure
