"""From one raw :class:`~llm_locust.client.stream.Exchange` to the facts of its :class:`RequestRecord`.

Definitions (DESIGN.md "Metric definitions"; instants are ``time.perf_counter()``, intervals
are taken from the exchange's start ``t0``):

- A **token event** is an SSE event carrying generated text (``content``, reasoning or tool
  calls; role-only, empty, usage-only events and comments never are), or, after the first one,
  an event the protocol says carried a token without text (TGI's special EOS token).
- **TTFT** = first token event - ``t0``; **first answer** = first event with ``content`` - ``t0``.
  NaN when there was none (never 0).
- **E2E** = last SSE event (``[DONE]`` included) - ``t0``, or the failure's instant.
- **Output tokens**: the server's total when sent, else the per-event counts the protocol states,
  else one estimate on the joined text (``--tokenizer``, else the heuristic), never more than
  ``max_tokens``. Per-event counts come from the protocol (TGI) or from the running totals of
  ``continuous_usage_stats``; they are adjusted on the last event to add up to the total.
- **Server timings**: copied as the server sent them (``server_*`` fields), never derived.
- **Failures**: the exchange's own (timeouts, resets, in-band errors, unparseable payloads), an
  HTTP status other than 200 (with the body's message), a 200 answer holding no SSE event
  (``bad_response``), and a stream that ended without ``[DONE]`` or a finish reason
  (``truncated``). Tokens received before a failure stay in the record.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from llm_locust.client.protocols.base import error_text
from llm_locust.client.record import ErrorKind, RequestRecord, TokensSource
from llm_locust.client.stream import Exchange
from llm_locust.client.tokens import heuristic_tokens

MAX_ERROR_MESSAGE_CHARS = 200


def shorten(text: str) -> str:
    """Whitespace collapsed, at most :data:`MAX_ERROR_MESSAGE_CHARS` characters.

    >>> shorten("a\\n  b")
    'a b'
    """
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_ERROR_MESSAGE_CHARS else text[: MAX_ERROR_MESSAGE_CHARS - 1] + "…"


def http_error_message(status: int, body: bytes) -> str:
    """``"HTTP <code> <message>"`` with the message of a JSON error body when there is one.

    >>> http_error_message(400, b'{"error": {"message": "max_tokens too large", "code": 400}}')
    'HTTP 400 max_tokens too large'
    >>> http_error_message(503, b'Service Unavailable')
    'HTTP 503 Service Unavailable'
    """
    text = body.decode("utf-8", "replace").strip()
    try:
        value = json.loads(text)
        if isinstance(value, dict):
            text = error_text(value.get("error") or value)
    except ValueError:
        pass
    return shorten(f"HTTP {status} {text}")


def _completion_tokens(usage: dict | None) -> int | None:
    if not usage:
        return None
    value = usage.get("completion_tokens")
    return int(value) if isinstance(value, (int, float)) else None


def fill_record(
    record: RequestRecord,
    exchange: Exchange,
    *,
    max_tokens: int | None,
    ignore_eos: bool,
    count_tokens: Callable[[str], int] | None = None,
) -> RequestRecord:
    """Fill ``record``'s measured fields from ``exchange`` (in place) and return it.

    Parameters
    ----------
    record : RequestRecord
        The request's record, with ids and ``t_start_s`` set.
    exchange : Exchange
        What the connection delivered.
    max_tokens : int or None
        The limit the request asked for (estimates are clipped to it; the ``ignore_eos`` check).
    ignore_eos : bool
        Whether the request asked the server to ignore EOS.
    count_tokens : callable(str) -> int, optional
        A tokenizer's count; None uses :func:`~llm_locust.client.tokens.heuristic_tokens`.
    """
    t0 = exchange.t0
    record.max_tokens = max_tokens or 0
    record.status_code = exchange.status
    record.sse_events = exchange.sse_events
    record.resent = int(exchange.resent)
    if not math.isnan(exchange.connect_s):
        record.connect_ms = exchange.connect_s * 1000.0
    if not math.isnan(exchange.headers_t):
        record.headers_ms = (exchange.headers_t - t0) * 1000.0

    finish_reason = exchange.finish_reason
    usage = exchange.usage
    token_events = exchange.token_events
    record.content_events = token_events
    record.finish_reason = finish_reason
    record.response_id = str(exchange.response_id or "")
    if token_events:
        record.ttft_ms = (exchange.first_token_t - t0) * 1000.0
        record.token_times_us = " ".join(exchange.token_us)
    if not math.isnan(exchange.first_answer_t):
        record.first_answer_ms = (exchange.first_answer_t - t0) * 1000.0
    if usage and usage.get("prompt_tokens") is not None:  # checked: a whole number (stream.checked_usage)
        record.prompt_tokens = float(usage["prompt_tokens"])

    total = _completion_tokens(usage)
    per_event = None
    if token_events and len(exchange.stated) == token_events:
        per_event = [int(n) for n in exchange.stated]
        per_event[0] += exchange.pre_tokens
    elif token_events and len(exchange.running) == token_events:
        per_event, previous = [], exchange.running_before
        for n in exchange.running:
            per_event.append(max(0, n - previous))
            previous = max(previous, n)
    if total is not None:
        record.output_tokens, record.tokens_source = total, TokensSource.USAGE.value
    elif per_event is not None:
        record.output_tokens, record.tokens_source = sum(per_event), TokensSource.EVENTS.value
    else:
        text = "".join(exchange.texts)
        estimate = count_tokens(text) if count_tokens is not None else heuristic_tokens(text)
        if max_tokens:
            estimate = min(estimate, max_tokens)
        record.output_tokens = estimate
        record.tokens_source = (TokensSource.TOKENIZER if count_tokens is not None else TokensSource.HEURISTIC).value
    if per_event is not None:
        per_event[-1] += record.output_tokens - sum(per_event)
        if per_event[-1] >= 0:
            record.event_tokens = " ".join(map(str, per_event))

    if (ignore_eos and max_tokens and finish_reason and finish_reason != "length"
            and record.output_tokens < max_tokens):  # fmt: skip
        record.ignore_eos_violated = 1

    if exchange.timings:
        for name, value in exchange.timings.items():  # fields of protocols.timings.TIMING_COLUMNS
            setattr(record, name, value)

    kind, message, end_t = _outcome(exchange, finish_reason)
    record.e2e_ms = (end_t - t0) * 1000.0
    if kind is not ErrorKind.NONE:
        record.error_kind = kind.value
        record.error_message = shorten(message)
    return record


def _outcome(exchange: Exchange, finish_reason: str) -> tuple[ErrorKind, str, float]:
    """(error kind, message, end instant) of an exchange."""
    failure = exchange.failure
    if failure is not None:
        return failure.kind, failure.message, failure.t
    if exchange.status != 200:
        if not 400 <= exchange.status < 600:
            return ErrorKind.BAD_RESPONSE, f"HTTP {exchange.status} instead of a 200 stream", exchange.end_t
        return (
            ErrorKind.for_status(exchange.status),
            http_error_message(exchange.status, exchange.body_head),
            exchange.end_t,
        )
    if exchange.sse_events == 0 and exchange.body_bytes:
        head = exchange.body_head[:120].decode("utf-8", "replace")
        return ErrorKind.BAD_RESPONSE, f"no SSE event in the 200 answer: {head!r}", exchange.end_t
    if not exchange.done and not finish_reason:
        return ErrorKind.TRUNCATED, "stream ended without [DONE] or finish_reason", exchange.end_t
    return ErrorKind.NONE, "", exchange.end_t
