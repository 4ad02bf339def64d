"""The adapter interface shared by every protocol, and the typed event it produces.

An adapter knows one wire protocol: where to POST, what body to send, and what one SSE event's
decoded JSON payload means (:meth:`Adapter.interpret`). Decoding the JSON is shared
(:func:`parse_payload`), so the user can decode a whole stream's payloads in one ``json.loads``
call and hand each object to the adapter (see :mod:`llm_locust.stream`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Protocol

from llm_locust.sse import is_done


@dataclass(slots=True, frozen=True, kw_only=True)
class Workload:
    """What every request of a run asks for (the run's workload fingerprint, minus the prompts).

    Attributes
    ----------
    model : str
        Model name sent in the body.
    max_tokens : int
        Output token limit per request.
    ignore_eos : bool
        Ask the server to generate exactly ``max_tokens`` (vLLM's ``ignore_eos`` extension).
    temperature : float
        Sampling temperature (0 = greedy, the default for reproducible load).
    include_usage : bool
        Ask for a final usage chunk (``stream_options.include_usage``). False leaves
        ``stream_options`` out of the body altogether (for servers that reject it).
    continuous_usage : bool
        Also ask for usage on every chunk (vLLM's ``stream_options.continuous_usage_stats``), which
        gives the tokens each chunk carried.
    """

    model: str
    max_tokens: int = 64
    ignore_eos: bool = True
    temperature: float = 0.0
    include_usage: bool = True
    continuous_usage: bool = False


class StreamEvent(NamedTuple):
    """What one SSE event carried, protocol-independent (immutable).

    Built once per SSE event, so it is a named tuple: built positionally with ``tuple.__new__``
    (as the chat adapter does for a token chunk) it costs a fifth of a keyword-built dataclass.

    Attributes
    ----------
    text : str
        Generated text in this event (answer, reasoning or tool-call text); "" if none.
    answer : bool
        True when ``text`` includes answer text (``content``), not only reasoning or tool calls.
    tokens : int or None
        Tokens this event carried, when the protocol says so (TGI: one per token event); None
        when unknown.
    usage : dict or None
        The server's usage object (``prompt_tokens``, ``completion_tokens``) when present; with
        continuous usage stats every chunk carries the running totals.
    finish_reason : str or None
        Finish reason when the event carried one.
    error : str or None
        An error reported inside the stream (after HTTP 200).
    done : bool
        True for the end-of-stream sentinel (``[DONE]``).
    response_id : str or None
        The server's id of the response (OpenAI ``id``), when present.
    """

    text: str = ""
    answer: bool = False
    tokens: int | None = None
    usage: dict | None = None
    finish_reason: str | None = None
    error: str | None = None
    done: bool = False
    response_id: str | None = None


DONE_EVENT = StreamEvent(done=True)


def error_text(error: Any) -> str:
    """The message of an error object as servers send it (``{"message": …}``, a string, …).

    >>> error_text({"message": "engine died", "type": "InternalServerError"})
    'engine died'
    >>> error_text("queue full")
    'queue full'
    """
    if isinstance(error, dict):
        for key in ("message", "detail", "error", "msg"):
            value = error.get(key)
            if value:
                return error_text(value)
        return json.dumps(error)
    return str(error)


class Adapter(Protocol):
    """One wire protocol: where to POST, what to send, what one decoded SSE payload means."""

    name: ClassVar[str]
    path: ClassVar[str]

    def build_body(self, *, prompt: str, workload: Workload) -> dict:
        """JSON body for one streamed request."""

    def interpret(self, payload: Any) -> StreamEvent:
        """Turn one SSE event's decoded JSON payload into a :class:`StreamEvent`.

        Raises ``ValueError`` when the value is not the protocol's (e.g. not a JSON object).
        """

    def requested_max_tokens(self, body: dict) -> int | None:
        """The output token limit a (verbatim) body asks for, None if it names none."""


def parse_payload(adapter: Adapter, data: bytes | str) -> StreamEvent:
    """Decode one SSE ``data`` payload and let ``adapter`` interpret it.

    Raises
    ------
    ValueError
        Not JSON (``json.JSONDecodeError``), or not the protocol's JSON.
    """
    if isinstance(data, str):
        data = data.encode("utf-8")
    if is_done(data):
        return DONE_EVENT
    return adapter.interpret(json.loads(data))
