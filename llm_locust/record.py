"""The one record of one streamed request, and its row in the run directory's ``requests.csv``.

A :class:`RequestRecord` holds raw facts only: where the request sits in wall-clock time, the
monotonic offsets of what happened to it, token counts and how they were obtained, status and
error kind. Every metric (TPOT, decode rate, throughput, percentiles) is derived from it in
``analysis/``.

Clocks: ``t_start_s`` is the wall clock (``time.time()``, Unix seconds) read once when the request
was sent; every ``*_ms`` field is an interval measured with ``time.perf_counter`` from that same
instant, in milliseconds.

``requests.csv`` columns are :data:`CSV_COLUMNS`, in that order; ``analysis/rundir.py`` reads
them back. Empty cells mean "not applicable / not measured" (never zero).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, fields
from operator import attrgetter


class ErrorKind(str, enum.Enum):
    """Closed set of failure kinds (see DESIGN.md, "Errors").

    ``NONE`` (the empty string) marks a success.
    """

    NONE = ""
    CONNECT_TIMEOUT = "connect_timeout"
    TTFT_TIMEOUT = "ttft_timeout"
    STALL_TIMEOUT = "stall_timeout"
    TOTAL_TIMEOUT = "total_timeout"
    CONNECTION_ERROR = "connection_error"
    HTTP_4XX = "http_4xx"
    HTTP_429 = "http_429"
    HTTP_5XX = "http_5xx"
    STREAM_ERROR = "stream_error"
    TRUNCATED = "truncated"
    BAD_RESPONSE = "bad_response"

    @classmethod
    def for_status(cls, status_code: int) -> "ErrorKind":
        """Error kind of a non-2xx HTTP status: 429 apart, else 4xx or 5xx.

        >>> ErrorKind.for_status(429).value, ErrorKind.for_status(404).value
        ('http_429', 'http_4xx')
        """
        if status_code == 429:
            return cls.HTTP_429
        if 400 <= status_code < 500:
            return cls.HTTP_4XX
        return cls.HTTP_5XX


class TokensSource(str, enum.Enum):
    """Where ``output_tokens`` came from.

    ``USAGE``: the server's total (``usage.completion_tokens``, TGI ``details.generated_tokens``);
    ``EVENTS``: the sum of per-event counts the protocol states (TGI: one token per event) when no
    total came; ``TOKENIZER``: the ``--tokenizer`` run once on the joined text; ``HEURISTIC``:
    :func:`llm_locust.tokens.heuristic_tokens` on the joined text. Run directories written before
    these kinds existed hold ``chunks`` (a count of content events).
    """

    USAGE = "usage"
    EVENTS = "events"
    TOKENIZER = "tokenizer"
    HEURISTIC = "heuristic"


@dataclass(slots=True, kw_only=True)
class RequestRecord:
    """Raw facts of one request, as measured by the client.

    Attributes
    ----------
    request_id : str
        Unique over the run: ``"<worker_id>-<sequence>"``.
    worker_id : str
        Locust client id of the process that sent it.
    name : str
        Locust request name (the row in Locust's stats table).
    t_start_s : float
        Wall clock (Unix seconds) when the request was sent: after any wait for a free connection
        (``conn_wait_ms``), before connecting (when a new connection is opened) and writing.
    headers_ms : float
        Sent -> response headers received, ms (NaN if none arrived).
    ttft_ms : float
        Sent -> first SSE event carrying non-empty generated text, ms. NaN when no such event
        arrived (never 0).
    e2e_ms : float
        Sent -> last SSE event or end of the stream (or the failure), ms.
    prompt_tokens : float
        ``usage.prompt_tokens`` when the server sent it, else NaN.
    output_tokens : int
        The server's count when it sent one (``tokens_source="usage"``), else the sum of the
        per-event counts the protocol states (``"events"``), else an estimate on the joined text
        (``"tokenizer"`` or ``"heuristic"``, never more than ``max_tokens``). Tokens received
        before a failure are kept here (successes-only statistics leave them out).
    tokens_source : str
        A :class:`TokensSource` value.
    content_events : int
        Number of SSE events that carried generated text (the token events).
    finish_reason : str
        Last ``finish_reason`` the server sent, "" if none.
    status_code : int
        HTTP status, 0 when no response arrived.
    error_kind : str
        An :class:`ErrorKind` value, "" for a success.
    error_message : str
        Short description of the failure (at most 200 characters), "" for a success.
    first_answer_ms : float
        Sent -> first event carrying answer text (``content``; reasoning and tool calls do not
        count), ms. NaN when none arrived.
    conn_wait_ms : float
        Time spent waiting for a free connection before the request was sent (only with
        ``--connections`` below the number of users), ms; in no other interval.
    connect_ms : float
        Time to open a new TCP (and TLS) connection, ms, part of ``headers_ms`` and ``ttft_ms``;
        NaN when a kept-alive connection was reused.
    sse_events : int
        SSE events with data received (role, token, usage and ``[DONE]`` events alike).
    token_times_us : str
        When each token event (``content_events`` of them) arrived: offsets from the send, in
        whole microseconds, space-separated. The first is ``ttft_ms`` (rounded).
    event_tokens : str
        Tokens each token event carried, space-separated, when the server stated them (TGI, or
        ``continuous_usage_stats``); "" when it did not (``analysis/itl.py`` then counts one
        token for the first event and spreads the other ``output_tokens - 1`` evenly).
    max_tokens : int
        The output token limit the request asked for (0 when the body named none).
    ignore_eos_violated : int
        1 when ``ignore_eos`` was asked for but the server stopped early (a finish reason other
        than ``length`` with fewer than ``max_tokens`` tokens), else 0. Not a failure.
    response_id : str
        The server's id of the response (OpenAI chunk ``id``), "" if none.
    resent : int
        1 when the request went out twice: the kept-alive connection it was first written on
        closed before any byte of a response came (the server had closed it just as it was
        reused), so it was sent again on a new connection; else 0. Every interval still counts
        from the first send.
    """

    request_id: str
    worker_id: str
    name: str
    t_start_s: float
    headers_ms: float = math.nan
    ttft_ms: float = math.nan
    e2e_ms: float = math.nan
    prompt_tokens: float = math.nan
    output_tokens: int = 0
    tokens_source: str = TokensSource.HEURISTIC.value
    content_events: int = 0
    finish_reason: str = ""
    status_code: int = 0
    error_kind: str = ErrorKind.NONE.value
    error_message: str = ""
    first_answer_ms: float = math.nan
    conn_wait_ms: float = 0.0
    connect_ms: float = math.nan
    sse_events: int = 0
    token_times_us: str = ""
    event_tokens: str = ""
    max_tokens: int = 0
    ignore_eos_violated: int = 0
    response_id: str = ""
    resent: int = 0

    @property
    def ok(self) -> bool:
        """True when the request succeeded (no error kind)."""
        return self.error_kind == ErrorKind.NONE.value

    def to_row(self) -> tuple:
        """The record as a tuple in :data:`CSV_COLUMNS` order (picklable, msgpack-able)."""
        return _ROW(self)


CSV_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(RequestRecord))
"""Column names of ``requests.csv``, in file order (columns are only ever added at the end)."""

_ROW = attrgetter(*CSV_COLUMNS)
