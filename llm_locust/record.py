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
from dataclasses import astuple, dataclass, fields


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
    """Where ``output_tokens`` came from: the server's ``usage`` or a count of content chunks."""

    USAGE = "usage"
    CHUNKS = "chunks"


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
        Wall clock (Unix seconds) when the request was sent.
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
        ``usage.completion_tokens`` when sent (``tokens_source="usage"``), else the number of
        content-carrying events (``"chunks"``).
    tokens_source : str
        A :class:`TokensSource` value.
    content_events : int
        Number of SSE events that carried generated text.
    finish_reason : str
        Last ``finish_reason`` the server sent, "" if none.
    status_code : int
        HTTP status, 0 when no response arrived.
    error_kind : str
        An :class:`ErrorKind` value, "" for a success.
    error_message : str
        Short description of the failure (at most 200 characters), "" for a success.
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
    tokens_source: str = TokensSource.CHUNKS.value
    content_events: int = 0
    finish_reason: str = ""
    status_code: int = 0
    error_kind: str = ErrorKind.NONE.value
    error_message: str = ""

    @property
    def ok(self) -> bool:
        """True when the request succeeded (no error kind)."""
        return self.error_kind == ErrorKind.NONE.value

    def to_row(self) -> tuple:
        """The record as a tuple in :data:`CSV_COLUMNS` order (picklable, msgpack-able)."""
        return astuple(self)


CSV_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(RequestRecord))
"""Column names of ``requests.csv``, in file order."""
