"""The one record of one streamed request, and its row in the run directory's ``requests.csv``.

A :class:`RequestRecord` holds raw facts only: where the request sits in wall-clock time, the
monotonic offsets of what happened to it, token counts and how they were obtained, status and
error kind. Every metric (TPOT, decode rate, throughput, percentiles) is derived from it in
``llm_locust/analysis/``.

Clocks: ``t_start_s`` is the wall clock (Unix seconds) read once when the request was sent, on the
master's clock (the worker's own plus its measured offset, :mod:`llm_locust.client.clock`); every ``*_ms`` field is an interval measured with ``time.perf_counter`` from that same
instant, in milliseconds.

``requests.csv`` columns are :data:`CSV_COLUMNS`, in that order: the record's fields, which
must be :data:`llm_locust.analysis.schema.REQUEST_COLUMNS` (checked at import); ``llm_locust/analysis/rundir/reader.py`` reads
them back. :class:`ErrorKind` and :class:`TokensSource` are defined in :mod:`llm_locust.analysis.schema`.
Empty cells mean "not applicable / not measured" (never zero).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from operator import attrgetter

from llm_locust.analysis.schema import REQUEST_COLUMNS, ErrorKind, TokensSource

__all__ = ["CSV_COLUMNS", "ErrorKind", "RequestRecord", "TokensSource"]


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
        ``continuous_usage_stats``); "" when it did not (``llm_locust/analysis/perrequest/itl.py`` then counts one
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
    backoff_ms : float
        The pause this request's user took after it, before its next request, ms (0 for none):
        :mod:`llm_locust.client.backoff`, after a refused connection, a 429 or a 5xx. No request
        is sent during it, and it is in no latency.
    prompt_tokens_target : float
        The prompt length the workload built for this request, as the server should count it
        (``--input-tokens``), tokens; NaN when the workload fixes none (a prompt set, a dataset).
    scheduled_s : float
        When the request was scheduled to be sent (request-rate runs, ``--shape rate``): wall
        clock on the master's clock (Unix s), fixed before the run; ``t_start_s - scheduled_s``
        is the send lag (a send is late when no user was free at its time). NaN in a closed
        loop, where a request is sent when the previous one ends.
    server_queue_ms, server_prompt_ms, server_decode_ms : float
        The server's own timings of the request, when it sent them (llama.cpp's ``timings``, a
        ``--protocol-format`` file's ``[response.timings]``): its queue wait, prefill and
        decode, ms, on the server's clock; NaN when it did not say
        (:mod:`llm_locust.client.protocols.timings`).
    server_prompt_tokens, server_decode_tokens : float
        Prompt tokens the server processed (cached ones not counted) and tokens it generated,
        per the same timings; NaN when not sent.
    session_id : str
        The multi-turn session the request is a turn of (``--session-turns``), "" for none.
    turn : int
        Its turn in the session, from 1 (its prompt holds the turns before it); 0 for none.
    trace_row : int
        Index (from 0) of the ``--trace`` row the request replays, -1 for none; with a trace,
        ``session_id`` is the row's session id.
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
    backoff_ms: float = 0.0
    prompt_tokens_target: float = math.nan
    scheduled_s: float = math.nan
    server_queue_ms: float = math.nan
    server_prompt_ms: float = math.nan
    server_prompt_tokens: float = math.nan
    server_decode_ms: float = math.nan
    server_decode_tokens: float = math.nan
    session_id: str = ""
    turn: int = 0
    trace_row: int = -1

    @property
    def ok(self) -> bool:
        """True when the request succeeded (no error kind)."""
        return self.error_kind == ErrorKind.NONE.value

    def to_row(self) -> tuple:
        """The record as a tuple in :data:`CSV_COLUMNS` order (picklable, msgpack-able)."""
        return _ROW(self)


CSV_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(RequestRecord))
"""Column names of ``requests.csv``, in file order (columns are only ever added at the end)."""

if CSV_COLUMNS != REQUEST_COLUMNS:  # the record and the schema must not drift (checked once, at import)
    raise ImportError(
        f"RequestRecord fields {CSV_COLUMNS} differ from llm_locust.analysis.schema.REQUEST_COLUMNS "
        f"{REQUEST_COLUMNS}: add a new column to both, at the end"
    )

_ROW = attrgetter(*CSV_COLUMNS)

COLUMN_INDEX: dict[str, int] = {name: i for i, name in enumerate(CSV_COLUMNS)}
"""Position of each column in a :meth:`RequestRecord.to_row` tuple."""


def row_float(row: tuple, column: str) -> float:
    """One cell of a :meth:`RequestRecord.to_row` tuple (as shipped to the master) as a float.

    None, "" and a value that is not a number become NaN ("not measured"), as an empty cell of
    ``requests.csv`` does when :mod:`llm_locust.analysis.rundir.reader` loads it.

    >>> row = RequestRecord(request_id="w-1", worker_id="w", name="chat", t_start_s=1.0, ttft_ms=20.0).to_row()
    >>> row_float(row, "ttft_ms"), row_float(row, "e2e_ms")
    (20.0, nan)
    """
    value = row[COLUMN_INDEX[column]]
    if value is None or value == "":
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def row_text(row: tuple, column: str) -> str:
    """One cell of a :meth:`RequestRecord.to_row` tuple as a string ("" for None)."""
    value = row[COLUMN_INDEX[column]]
    return "" if value is None else str(value)
