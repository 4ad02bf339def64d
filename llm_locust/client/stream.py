"""One streamed HTTP exchange, timed as its bytes arrive: connect, send, headers, SSE events.

:func:`run_exchange` writes one request on a connection from a
:class:`~llm_locust.client.connection.ConnectionPool` and reads the answer with ``recv`` as the socket
delivers it (never in fixed-size blocks: a block read would hand a short stream's events over at
its end). Every SSE event is stamped with the arrival of the bytes that completed it
(``time.perf_counter`` seconds, see :mod:`llm_locust.client.reader`). The body of a 200 answer is read
by the process's :class:`~llm_locust.client.reader.StreamReader` when there is one, else by the
request's own greenlet. HTTP framing (status line, headers, chunked transfer coding) is
geventhttpclient's C parser; SSE framing is :class:`~llm_locust.client.sse.SSEDecoder`.

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
:class:`~llm_locust.client.watchdog.Watchdog` (one timer for all streams instead of one per ``recv``).

A ``GreenletExit`` thrown into the exchange (Locust stopping the user: a time limit, Ctrl-C, a
stop timeout that ran out) ends it as ``interrupted``, with what had arrived kept; the exception
is handed back in ``Exchange.interrupt`` for the caller to record the request, then re-raise it.
"""

from __future__ import annotations

import math
import re
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gevent import GreenletExit
from geventhttpclient._parser import HTTPResponseParser
from geventhttpclient.response import HTTPParseError, HTTPResponse
from orjson import dumps, loads

from llm_locust.client.connection import ConnectionPool
from llm_locust.client.failure import Failure
from llm_locust.client.framing import make_decoder
from llm_locust.client.protocols.base import Adapter
from llm_locust.client.reader import RECV_BYTES, StreamReader, arrival_recv, raw_socket
from llm_locust.client.record import ErrorKind
from llm_locust.client.sse import DONE, is_done
from llm_locust.client.watchdog import Deadline, Expired, Watchdog

if TYPE_CHECKING:
    # a stream's learned template (prefix, suffix, len(prefix), -len(suffix)), see _EventStream._learn: slices
    # of the event that taught it (bytearray ones when the SSE decoder was fed the parser's buffer)
    _Template = tuple[bytes | bytearray, bytes | bytearray, int, int]

_FEED = HTTPResponseParser.feed
"""The C parser's own ``feed``: ``HTTPResponse.feed`` wraps it in Python only to forgive a body
after a HEAD response's headers (this client sends POST), 0.17 µs per read (measured)."""
ERROR_BODY_BYTES = 65536
"""Most bytes of a non-200 body kept for its error message."""
RESEND_WINDOW_S = 0.25
"""A kept-alive connection that closes unanswered within this long of the request's write is
re-sent once: the server's close crossed the request (it arrives within a network round trip).
A later close means the server held the request, and is a ``connection_error``."""
AFTER_DONE_GRACE_S = 0.5
"""After ``[DONE]``, how long the end of the HTTP message is awaited (so the connection can be
kept alive); past it the connection is closed. E2E is stamped at ``[DONE]`` either way."""
MAX_EVENT_BYTES = 1 << 20
"""Most bytes of one SSE event not yet complete that a stream may hold (1 MiB). An LLM server's
events are a few hundred bytes (a vLLM chunk with 20 top logprobs a few KB); a server that sends a
larger one, or bytes that never end a line, fails the request as ``bad_response`` and its
connection is closed, so a worker's memory stays bounded (at most this plus one read,
:data:`~llm_locust.client.reader.RECV_BYTES`, per stream) and the user goes on."""
COMPACT_PIECES = 16
"""A stream's per-token pieces (stamps, texts) are joined into one string when this many are
held: an open stream keeps about 8 bytes per token (a stamp's digits, its text) instead of a
string object and a list slot per token (about 60 bytes each), at one join per 16 pieces.
Measured with tracemalloc on a 256-token stream, one event per read: 5-7 KB per open stream
in all, against 18-34 KB with one string per token (``benchmarks/client_overhead.py``)."""
INF = math.inf
TEMPLATE_PROBE = b"llm-locust probe"
"""The string body put in place of a token's text to check a stream's template (see
:meth:`_EventStream._learn`): no quote, backslash or control byte, not empty."""
_NOT_PLAIN = re.compile(rb'["\\\x00-\x1f]').search
"""Finds a byte that a JSON string body cannot hold as itself (quote, backslash: an escape or the
string's end; a control byte: orjson refuses it)."""
INTERRUPTED_MESSAGE = "the test stopped while the request was in flight"
"""Message of an ``interrupted`` failure (Locust's failure table shows ``"interrupted: <this>"``)."""


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
    retry_after : str
        The ``Retry-After`` header of a response other than 200, "" without one.
    token_us : list of str
        When each token event arrived, whole µs after ``t0``, as pieces of the record's
        ``token_times_us`` (each piece one or more space-separated decimal stamps: a read's token
        events share one stamp, formatted once; the pieces are joined every
        :data:`COMPACT_PIECES`): ``" ".join(token_us)`` is the column. A token event carries
        generated text (answer, reasoning or tool calls), or, after the first one, a token the
        protocol counts without text (TGI's special EOS token).
    token_events : int
        Token events received (the stamps in ``token_us``).
    texts : list of str
        The token events' text, in pieces joined every :data:`COMPACT_PIECES` (``"".join(texts)``
        is the generated text).
    stated, running : list
        Per token event: the tokens the protocol says it carried; the running
        ``usage.completion_tokens`` it carried. Both skip the events that did not say, so they
        are per token event only when as long as ``token_events``.
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
    failure : Failure or None
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
    interrupt : GreenletExit or None
        The exception that stopped the exchange midway (the failure is then ``interrupted``);
        the caller records the request, then re-raises it so the greenlet ends as asked.
    timings : dict or None
        The server's own timings of the request (record field -> value), merged over the events
        that carried any (:mod:`llm_locust.client.protocols.timings`).
    """

    t0: float
    connect_s: float = math.nan
    headers_t: float = math.nan
    status: int = 0
    retry_after: str = ""
    token_us: list[str] = field(default_factory=list)
    token_events: int = 0
    texts: list[str] = field(default_factory=list)
    stated: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
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
    failure: Failure | None = None
    body_bytes: int = 0
    body_head: bytes = b""
    resent: bool = False
    interrupt: BaseException | None = None
    timings: dict | None = None


class _Clock:
    """The deadlines of one exchange, kept in a :class:`~llm_locust.client.watchdog.Deadline`."""

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


def _send(sock: socket.socket, raw: socket.socket | None, request: bytes) -> None:
    """Write ``request`` on ``sock``: on its OS socket ``raw`` (None: TLS) in one ``send`` when
    the socket takes it all, as it nearly always does (gevent's ``sendall`` costs a
    ``getsockopt`` system call and a few µs of Python per request), else gevent's ``sendall``
    for the rest (it waits while the socket is full).

    Raises
    ------
    OSError
        The connection is closed or reset.
    """
    if raw is not None:
        try:
            sent = raw.send(request)
        except BlockingIOError:
            sent = 0
        if sent == len(request):
            return
        request = request[sent:]
    sock.sendall(request)


def _open(
    pool: ConnectionPool, request: bytes, clock: _Clock, out: Exchange, *, reuse: bool = True
) -> tuple[socket.socket, socket.socket | None, bool]:
    """A connection with the request written on it, its OS socket (:func:`raw_socket`; None for
    TLS) and whether it was a kept-alive one."""
    sock = pool.idle_socket() if reuse else None
    if sock is not None:
        raw = raw_socket(sock, ask_stamps=False)  # asked for when it was opened
        try:
            _send(sock, raw, request)
            return sock, raw, True
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
    raw = raw_socket(sock)
    try:
        _send(sock, raw, request)
    except BaseException:
        sock.close()
        raise
    return sock, raw, False


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
        The outcome, and whether the connection went back to the pool for reuse. When a
        ``GreenletExit`` stopped it, the outcome is ``interrupted`` and carries the exception in
        ``interrupt`` (the caller must re-raise it).
    """
    out = Exchange(t0=time.perf_counter())
    clock = _Clock(limits, out.t0, watchdog)
    watchdog.arm(clock.deadline)
    sock = None
    stream = None
    reusable = False
    try:
        sock, raw, reused = _open(pool, request, clock, out)
        sent_t = time.perf_counter()
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
            sock, raw, _ = _open(pool, request, clock, out, reuse=False)
            out.resent = True
            parser = _read_headers(sock, raw, out)
        if out.status != 200:
            retry_after = parser.get("retry-after")
            out.retry_after = retry_after if isinstance(retry_after, str) else ",".join(retry_after or ())
            reusable = _read_error_body(sock, parser, out)
        else:
            header_timings = getattr(adapter, "header_timings", None)
            if header_timings is not None:  # timings a server sends as headers (TGI's x-* ones)
                out.timings = header_timings(parser.get)
            stream = _EventStream(parser, adapter, clock, out)
            if not stream.take(None, out.headers_t):
                if reader is not None and raw is not None:
                    reader.follow(raw, stream)
                else:
                    while not stream.take(*arrival_recv(sock, raw)):
                        pass
            reusable = stream.reusable
    except (Exception, GreenletExit) as exc:
        failure: Failure | None  # an annotation only
        if isinstance(exc, GreenletExit):  # Locust stopped the user mid-request
            out.interrupt = exc
            failure = Failure(ErrorKind.INTERRUPTED, INTERRUPTED_MESSAGE, time.perf_counter())
        else:
            failure = _failure_of(exc)
            if failure is None:
                raise
        if stream is not None:
            stream.settle(failure)
        else:
            out.failure = failure
            if math.isnan(out.end_t):
                out.end_t = failure.t
        reusable = False
    finally:
        watchdog.disarm(clock.deadline)
        if sock is not None:
            pool.give_back(sock, reusable=reusable)
    return out, reusable


def _read_headers(sock: socket.socket, raw: socket.socket | None, out: Exchange) -> HTTPResponse:
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


def _failure_of(exc: BaseException) -> Failure | None:
    """The failure an exception raised while reading stands for, stamped now; None for an
    unexpected one (a bug of ours: it propagates)."""
    now = time.perf_counter()
    if isinstance(exc, Expired):
        return Failure(exc.kind, str(exc), now)
    if isinstance(exc, HTTPParseError):
        if "ncomplete" in str(exc) or "closed" in str(exc):
            return Failure(ErrorKind.CONNECTION_ERROR, f"connection closed mid-stream (HTTP: {exc})", now)
        return Failure(ErrorKind.BAD_RESPONSE, f"HTTP: {exc}", now)
    if exc.__class__ in (ConnectionError, _Unanswered):  # raised here, with our own messages
        return Failure(ErrorKind.CONNECTION_ERROR, str(exc), now)
    if isinstance(exc, OSError):  # resets, refused writes, closed mid-message
        return Failure(ErrorKind.CONNECTION_ERROR, repr(exc), now)
    return None


def _read_error_body(sock: socket.socket, parser: HTTPResponse, out: Exchange) -> bool:
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


def checked_usage(usage: Any) -> int | None:
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
    reads the socket (the request's own, or the process's :class:`~llm_locust.client.reader.StreamReader`);
    it never blocks and never raises for what the server sent. Every SSE event is decoded
    (``orjson``) and stamped with its read's instant.

    After ``[DONE]`` the end of the HTTP message is awaited for :data:`AFTER_DONE_GRACE_S` (so the
    connection can be kept alive): the deadline then carries no kind, and its expiry only closes
    the connection.

    The adapter's ``framing`` picks the decoder (:func:`~llm_locust.client.framing.make_decoder`).
    With JSON lines or one JSON body the complete HTTP message ends the answer (as ``[DONE]``
    does for SSE). A one-body answer was not streamed: its text and counts are kept, but it
    has no token instants, so TTFT and first answer stay NaN (never the body's arrival).
    """

    __slots__ = ("out", "parser", "body", "decoder", "interpret", "clock", "first_token", "first_answer",
                 "need_id", "last_event_t", "draining", "reusable", "message_ends", "streamed", "last_t",
                 "template", "sse", "run_head", "run_tail", "run_sep", "renewing")  # fmt: skip

    def __init__(self, parser: HTTPResponse, adapter: Adapter, clock: _Clock, out: Exchange) -> None:
        self.out = out
        self.parser = parser
        self.body = parser._body_buffer  # the C parser appends decoded body bytes here
        # ... through its ``_on_body`` callback, looked up on the parser at each chunk: a C method
        # in place of HTTPResponse's Python one (``+=`` on the same buffer) saves 0.19 µs per read
        parser._on_body = self.body.extend  # type: ignore[method-assign, assignment]  # (same effect as the Python one)
        self.decoder = make_decoder(adapter.framing)
        self.message_ends = adapter.framing != "sse"
        self.streamed = adapter.framing != "json"
        self.interpret = adapter.interpret
        self.clock = clock
        self.first_token = False
        self.first_answer = True
        self.need_id = True
        self.last_event_t = math.nan
        self.draining = False
        self.reusable = False
        self.last_t = -INF
        self.template: _Template | bool | None = None if getattr(adapter, "text_opaque", False) else False
        """None: not learned yet; False: none (the adapter's text is not opaque, or the first token
        chunk did not fit); else (prefix, suffix, len(prefix), -len(suffix)): see :meth:`_learn`."""
        self.sse = self.decoder if adapter.framing == "sse" else None
        self.run_head = b""
        """With a template whose events are one-line SSE ones: ``b"data: " + prefix`` (see
        :meth:`_run_of`), else empty."""
        self.run_tail: bytes | bytearray = b""  # (a bytearray one from a bytearray template)
        """With such a template: ``suffix + b"\\n\\n"``."""
        self.run_sep: bytes | bytearray = b""
        """With such a template: ``run_tail + run_head``, what separates two texts of a run."""
        self.renewing = False
        """The deadline is the stall one, renewed by the watchdog (:meth:`_renew`)."""

    def take(self, data: bytes | None, t: float) -> bool:
        """Take one read's bytes (``b""``: the peer closed; None: only what the parser holds).

        Returns
        -------
        bool
            True when the exchange is over: ``[DONE]`` and the end of the message, the end of
            the message, the connection closed, or a failure (in ``out.failure``).
        """
        parser = self.parser
        if t < self.last_t:  # arrivals are in order: two estimates of the loop's poll instant
            t = self.last_t  # (reader._loop_arrival), or two rounds' clock offsets, may differ by a fraction of a µs
        self.last_t = t
        try:
            if data is not None:
                _FEED(parser, data)
                if not data and not parser.message_complete:
                    raise ConnectionError("connection closed mid-stream")
            if self.draining:
                return parser.message_complete and self._message_ended()
            if self.body:
                failure = self._events(t)
                if failure is None and self.decoder.pending_bytes > MAX_EVENT_BYTES:
                    failure = self._oversized(t)
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
        if self.message_ends and parser.message_complete and not out.done:
            failure = self._dispatch(self.decoder.close(), t)
            if failure is not None:
                self.settle(failure)
                return True
            self._answer_ended()
        if out.done:
            self.settle(None)
            if parser.message_complete:
                return self._message_ended()
            self.draining = True
            deadline = self.clock.deadline
            deadline.at, deadline.kind, deadline.message, deadline.renew = (
                time.perf_counter() + AFTER_DONE_GRACE_S,
                None,
                "after [DONE]",
                None,
            )
            self.clock.watchdog.moved(deadline)
            return False
        if parser.message_complete:
            self.settle(None)
            return self._message_ended()
        if self.first_token and not self.renewing:  # from the first token on: the stall deadline
            self.renewing = True
            self._renew()
            self.clock.deadline.renew = self._renew  # later events move it without a word
        return False

    def _renew(self) -> None:
        """The deadline after the first token, as of the last event (:meth:`_Clock.after_event`):
        ``Deadline.renew`` while the stream is under way (see :mod:`~llm_locust.client.watchdog`)."""
        self.clock.after_event(self.last_event_t)

    def _answer_ended(self) -> None:
        """The complete message ended a JSON-lines or one-body answer; a one-body answer keeps
        no token instants (not streamed: no TTFT)."""
        out = self.out
        out.done = True
        if not self.streamed:
            out.first_token_t = out.first_answer_t = math.nan
            out.token_us.clear()
            out.token_events = 0

    def _oversized(self, t: float) -> Failure:
        """The event being framed outgrew :data:`MAX_EVENT_BYTES`: a ``bad_response`` at ``t``."""
        return Failure(
            ErrorKind.BAD_RESPONSE,
            f"SSE event longer than {MAX_EVENT_BYTES} bytes without its end "
            f"({self.decoder.pending_bytes} bytes held after {self.out.sse_events} events)",
            t,
        )

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

    def settle(self, failure: Failure | None) -> None:
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
            out.end_t = failure.t

    def _events(self, t: float) -> Failure | None:
        """Frame and interpret the body bytes held; the failure they carry, else None."""
        out = self.out
        body = self.body
        if not out.body_bytes:
            out.body_head = bytes(body[:200])
        out.body_bytes += len(body)
        tail = self.run_tail
        if tail and body.endswith(tail) and self.sse.at_event_start():  # type: ignore[union-attr]
            texts = self._run_texts(body, tail)
            if texts is not None:  # a read of template token chunks only: what _dispatch gives
                del body[:]
                out.texts.append(texts[0])
                out.sse_events += texts[1]
                self.last_event_t = t
                self._stamp_tokens(texts[1], t)
                return None
        framed = self.decoder.feed(body)  # the decoder copies what it keeps
        del body[:]
        if not framed:
            return None
        return self._dispatch(framed, t)

    def _dispatch(self, framed: Sequence[tuple[str, bytes | bytearray]], t: float) -> Failure | None:
        """Interpret framed payloads that arrived at ``t``; the failure they carry, else None.

        Per event: ``orjson.loads``, the adapter's ``interpret``, then bookkeeping in locals (the
        event unpacked once, no attribute reads per field). A token chunk of a stream under way
        whose bytes are the stream's template with another plain string in the text's place
        (:meth:`_learn`) is read without either: its text is that string. Per read: the token
        events' stamp is formatted once and stored once for all of them
        (:attr:`Exchange.token_us`), and the text pieces are joined every :data:`COMPACT_PIECES`
        (memory per open stream).
        """
        if not framed:
            return None
        template = self.template
        if template:
            prefix, suffix, text_from, text_to = template  # type: ignore[misc]
        out = self.out
        texts = out.texts
        interpret = self.interpret
        first_token = self.first_token
        first_answer = self.first_answer
        need_id = self.need_id
        watching = first_answer or need_id  # a first answer or a response id still to note
        token_events = 0
        n_events = 0
        failure = None
        usage: Any  # an annotation only: the event's usage object, then its completion_tokens
        for event_type, data in framed:
            if event_type != "message":
                if event_type == "error":
                    failure = Failure(ErrorKind.STREAM_ERROR, "event: error " + data.decode("utf-8", "replace"), t)
                    break
                continue  # other named events carry nothing we measure
            n_events += 1
            if template and data.startswith(prefix) and data.endswith(suffix):
                plain = data[text_from:text_to]  # empty when prefix and suffix overlap
                if plain and not _NOT_PLAIN(plain):
                    try:
                        text = plain.decode()
                    except UnicodeDecodeError:  # orjson refuses it too: the slow path says so
                        pass
                    else:
                        token_events += 1  # the common case below, proven without decoding
                        texts.append(text)
                        continue
            if data == DONE:  # once per stream: cheaper told apart here than by orjson's error
                out.done = True
                break
            try:
                payload = loads(data)
            except ValueError as exc:  # the rare payloads that are not JSON are told apart only here
                if is_done(data):
                    out.done = True
                    break
                if not data.strip():
                    n_events -= 1
                    continue  # "data:" keep-alive
                failure = Failure(ErrorKind.BAD_RESPONSE, f"unparseable event {data[:80]!r}: {exc}", t)
                break
            try:  # only the adapter's reading of the payload: its errors are the server's
                text, answer, tokens, usage, finish_reason, error, response_id, timings = interpret(payload)
                if text.__class__ is not str:
                    raise ValueError(f"generated text is not a string: {text!r:.40}")
                if usage is not None:
                    out.usage, usage = usage, checked_usage(usage)
            except Exception as exc:
                failure = Failure(
                    ErrorKind.BAD_RESPONSE, f"unparseable event {data[:80]!r}: {type(exc).__name__}: {exc}", t
                )
                break
            if text or (first_token and tokens):
                if (first_token and not watching and tokens is None and usage is None and not finish_reason
                        and timings is None and error is None):  # fmt: skip
                    token_events += 1  # the common case: one more token of a stream under way
                    texts.append(text)
                    if template is None:
                        template = self.template = self._learn(data, payload)
                        if template:
                            prefix, suffix, text_from, text_to = template  # type: ignore[misc]
                            self._run_of(prefix, suffix)
                    continue
                if not first_token:
                    first_token = self.first_token = True
                    out.first_token_t = t
                if first_answer and answer:
                    first_answer = self.first_answer = False
                    out.first_answer_t = t
                    watching = need_id
                token_events += 1
                texts.append(text)
                if tokens is not None:
                    out.stated.append(tokens)
                if usage is not None:
                    out.running.append(usage)
            elif not first_token:
                out.pre_tokens += tokens or 0
                if usage is not None:
                    out.running_before = usage
            if finish_reason:
                out.finish_reason = finish_reason
            if need_id and response_id:
                out.response_id = response_id
                need_id = self.need_id = False
                watching = first_answer
            if timings is not None:
                out.timings = {**out.timings, **timings} if out.timings else timings
            if error is not None:
                failure = Failure(ErrorKind.STREAM_ERROR, error, t)
                break
        if token_events:
            self._stamp_tokens(token_events, t)
        if n_events:
            out.sse_events += n_events
            self.last_event_t = t
        return failure

    def _stamp_tokens(self, token_events: int, t: float) -> None:
        """Store the stamp of a read's ``token_events`` token events (their texts are stored) and
        compact the pieces (:data:`COMPACT_PIECES`)."""
        out = self.out
        # the read's token events share its instant: formatted once, stored once
        t_us = str(int((t - out.t0) * 1e6 + 0.5))
        token_us = out.token_us
        token_us.append(t_us if token_events == 1 else " ".join([t_us] * token_events))
        out.token_events += token_events
        if len(token_us) >= COMPACT_PIECES:
            token_us[:] = [" ".join(token_us)]
        texts = out.texts
        if len(texts) >= COMPACT_PIECES:
            texts[:] = ["".join(texts)]

    def _run_of(self, prefix: bytes | bytearray, suffix: bytes | bytearray) -> None:
        """Set :attr:`run_head` and :attr:`run_tail` for a learned template, when its events are
        SSE one-line ones (prefix and suffix hold no line end).

        A read's body that is nothing but events ``run_head + s + run_tail`` (``s`` a plain string
        body: not empty, no quote, backslash or control byte) is read by :meth:`_run_texts`
        instead of the SSE decoder and the per-event loop of :meth:`_dispatch`: the SSE framing of
        such a body (the decoder holding nothing) is these events, one data line each, and each
        is a template hit of :meth:`_dispatch` with text ``s``.
        """
        if self.sse is None or b"\n" in prefix + suffix or b"\r" in prefix + suffix:
            return
        self.run_head = b"data: " + prefix
        self.run_tail = suffix + b"\n\n"
        self.run_sep = self.run_tail + self.run_head

    def _run_texts(self, body: bytearray, tail: bytes | bytearray) -> tuple[str, int] | None:
        """The texts of ``body`` joined and their number, when it is nothing but template events
        (:meth:`_run_of`); else None (the SSE decoder reads it), as when one text is not valid
        UTF-8 (the per-event way then tells the failure).

        ``body`` ends with ``tail`` (the caller checked). When it starts with ``run_head``, what
        lies between is the texts joined by ``run_tail + run_head``: a plain text (no quote)
        cannot hold that separator (``run_tail`` begins with the text's closing quote), so the
        split gives back exactly the texts, and the body is those events when each is a plain
        string body, not empty. Anything else between two events (a comment line, a second
        data line) puts a quote or a line end into a "text" and fails that test. C calls only:
        no Python loop over the events (0.25 µs less per read of four events than one).
        """
        head = self.run_head
        if not body.startswith(head):
            return None
        found = body[len(head) : -len(tail)].split(self.run_sep)
        if b"" in found:
            return None
        joined = b"".join(found)
        if _NOT_PLAIN(joined):
            return None
        if joined.isascii():
            return joined.decode("ascii"), len(found)
        try:
            return "".join([piece.decode() for piece in found]), len(found)
        except UnicodeDecodeError:
            return None

    def _learn(self, data: bytes | bytearray, payload: Any) -> _Template | bool:
        """The stream's template, from its first token chunk read the common way, or False.

        The chunk's text, encoded as orjson encodes it, must occur exactly once in its bytes:
        ``prefix + text + suffix`` (the quotes in prefix and suffix). The template holds when the
        adapter reads ``prefix + TEMPLATE_PROBE + suffix`` as the same event with the probe as its
        text. Then for any later chunk ``prefix + s + suffix``, with ``s`` a plain string body (no
        quote, backslash or control byte; valid UTF-8; not empty), JSON's grammar gives the same
        value with ``s`` in the probe's place, and the adapter, whose text is opaque
        (``Adapter.text_opaque``: read as is, and otherwise only whether it is empty), gives the
        same common token event with text ``s``: decoding and interpreting it can be skipped.
        A server whose chunks differ in anything else (a running usage, a changing id or
        timestamp) gets no template, or misses it per chunk and takes the common way.
        """
        try:
            reference = self.interpret(payload)
            encoded = dumps(reference.text)
            at = data.find(encoded)
            if at < 0 or data.find(encoded, at + 1) >= 0:
                return False
            prefix, suffix = data[: at + 1], data[at + len(encoded) - 1 :]
            event = self.interpret(loads(prefix + TEMPLATE_PROBE + suffix))
        except Exception:  # the probe read otherwise: no template
            return False
        if event != reference._replace(text=TEMPLATE_PROBE.decode()):
            return False
        return prefix, suffix, len(prefix), -len(suffix)
