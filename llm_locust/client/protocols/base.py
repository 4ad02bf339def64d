"""The adapter interface shared by every protocol, and the typed event it produces.

An adapter knows one wire protocol: where to POST, what body to send, and what one SSE event's
decoded JSON payload means (:meth:`Adapter.interpret`). Decoding the JSON and recognising the
``[DONE]`` sentinel happen once for every protocol, in :mod:`llm_locust.client.stream`, which
hands each decoded object to the adapter.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Protocol


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
    stream : bool
        Ask for a streamed answer (``--no-stream`` sets False: one JSON body, no TTFT).
    """

    model: str
    max_tokens: int = 64
    ignore_eos: bool = True
    temperature: float = 0.0
    include_usage: bool = True
    continuous_usage: bool = False
    stream: bool = True


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
    response_id : str or None
        The server's id of the response (OpenAI ``id``), when present.
    timings : dict or None
        The server's own timings of the request (:mod:`llm_locust.client.protocols.timings`:
        ``server_prompt_ms`` …), when the event carried them (llama.cpp's ``timings``).
    """

    text: str = ""
    answer: bool = False
    tokens: int | None = None
    usage: dict | None = None
    finish_reason: str | None = None
    error: str | None = None
    response_id: str | None = None
    timings: dict | None = None


FRAMINGS: tuple[str, ...] = ("sse", "jsonl", "json")
"""How a response body is cut into payloads: Server-Sent Events, one JSON value per line, or
the whole body as one JSON value (a non-streamed answer: no token instants, so no TTFT)."""


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


def prompt_text(prompt: str | list[dict]) -> str:
    """The text of a prompt: itself, or a ``messages`` list's contents joined by newlines.

    >>> prompt_text([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    'Be brief.\\nHi'
    """
    if isinstance(prompt, str):
        return prompt
    return "\n".join(str(message.get("content") or "") for message in prompt)


class Adapter(Protocol):
    """One wire protocol: where to POST, what to send, what one decoded payload means.

    An adapter may also define ``header_timings(header) -> dict | None``: the server's timings
    of the request read from the 200 answer's headers (``header(name)`` gives a value or None),
    as TGI sends them; :func:`llm_locust.client.stream.run_exchange` calls it when present.
    """

    name: ClassVar[str]
    path: str
    framing: str
    """One of :data:`FRAMINGS`."""
    text_opaque: ClassVar[bool]
    """True when :meth:`interpret` reads the generated text's string value only as is (the
    event's ``text`` is that string) and otherwise only for whether it is empty: then two
    payloads that differ only in that non-empty string give events that differ only in ``text``,
    and :class:`llm_locust.client.stream._EventStream` may read a token chunk by its template
    instead of decoding it. False (or absent) keeps every payload decoded."""

    def build_body(self, *, prompt: str | list[dict], workload: Workload) -> dict:
        """JSON body for one request: ``prompt`` is the user text, or a chat ``messages`` list
        (sent as is by the chat protocol; the others send the contents joined by newlines)."""

    def interpret(self, payload: Any) -> StreamEvent:
        """Turn one SSE event's decoded JSON payload into a :class:`StreamEvent`.

        Raises ``ValueError`` when the value is not the protocol's (e.g. not a JSON object).
        """

    def requested_max_tokens(self, body: dict) -> int | None:
        """The output token limit a (verbatim) body asks for, None if it names none."""
