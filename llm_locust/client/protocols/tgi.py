"""Hugging Face text-generation-inference (``POST /generate_stream``).

Stream format (TGI ``router/src/server.rs``, ``generate_stream``): one event per generated token,
``data:{"index": i, "token": {"id": …, "text": …, "logprob": …, "special": false},
"generated_text": null, "details": null}``; the last token's event also carries the whole
``generated_text`` and, when asked (``parameters.details``), ``details`` with ``finish_reason``
(``length``, ``eos_token``, ``stop_sequence``) and ``generated_tokens``. No ``[DONE]``: the
HTTP message ends after that event. Errors arrive as ``{"error": …, "error_type": …}``.

Every token event carries exactly one token, so tokens are counted per event (``tokens=1``); a
special token (EOS) counts as a token but not as text. ``ignore_eos`` has no TGI equivalent and
is not sent; an early ``eos_token`` finish is flagged on the record like any other.

Not streamed (``stream=False``, ``--no-stream``): ``POST /generate`` answers one body
``{"generated_text": …, "details": {…}}`` and the server's timings as headers
(``router/src/server.rs`` ``generate``): ``x-queue-time`` (ms in the queue), ``x-prompt-tokens``,
``x-generated-tokens`` are recorded (:meth:`TGIAdapter.header_timings`); ``x-inference-time``
(prefill and decode together) fits neither server column and is not.
"""

from __future__ import annotations

from typing import Any, ClassVar

from llm_locust.client.protocols.base import StreamEvent, Workload, error_text, prompt_text
from llm_locust.client.protocols.timings import number

HEADER_TIMINGS: dict[str, str] = {
    "x-queue-time": "server_queue_ms",
    "x-prompt-tokens": "server_prompt_tokens",
    "x-generated-tokens": "server_decode_tokens",
}
"""TGI response header -> record field (values are whole numbers as text: ms, tokens)."""


class TGIAdapter:
    """Adapter for TGI's ``/generate_stream``.

    >>> a = TGIAdapter()
    >>> e = a.interpret({"index": 1, "token": {"id": 5, "text": "Hi", "special": False}})
    >>> e.text, e.tokens
    ('Hi', 1)
    >>> a.interpret({"token": {"id": 2, "text": "</s>", "special": True}, "generated_text": "Hi",
    ...              "details": {"finish_reason": "eos_token", "generated_tokens": 2}}).usage
    {'completion_tokens': 2}
    """

    name: ClassVar[str] = "tgi"
    text_opaque: ClassVar[bool] = True  # token.text is taken as it is; answer: is it empty

    def __init__(self, *, stream: bool = True) -> None:
        self.path = "/generate_stream" if stream else "/generate"
        self.framing = "sse" if stream else "json"

    def build_body(self, *, prompt: str | list[dict], workload: Workload) -> dict:
        """``{"inputs": prompt, "parameters": {...}}`` with details on (for the finish reason and
        the token count). Temperature 0 is sent as greedy decoding (``do_sample: false``), since
        TGI rejects ``temperature: 0``.
        """
        parameters: dict = {"max_new_tokens": workload.max_tokens, "details": True}
        if workload.temperature > 0:
            parameters.update(do_sample=True, temperature=workload.temperature)
        else:
            parameters["do_sample"] = False
        return {"inputs": prompt_text(prompt), "parameters": parameters}

    def interpret(self, payload: Any) -> StreamEvent:
        """Read one decoded event.

        Raises
        ------
        ValueError
            The payload is not a JSON object.
        """
        if payload.__class__ is not dict:
            raise ValueError(f"TGI event is not a JSON object: {str(payload)[:80]!r}")
        error = payload.get("error")
        if error:
            return StreamEvent(error=error_text(error))
        token = payload.get("token")
        text = ""
        tokens = None
        if token:
            tokens = 1
            if not token.get("special"):
                text = token.get("text") or ""
        elif payload.get("generated_text").__class__ is str:  # the one body of /generate
            text = payload["generated_text"]
        details = payload.get("details")
        usage = None
        finish_reason = None
        if details:
            finish_reason = details.get("finish_reason")
            generated = details.get("generated_tokens")
            if generated is not None:
                usage = {"completion_tokens": generated}
        return StreamEvent(text=text, answer=bool(text), tokens=tokens, usage=usage, finish_reason=finish_reason)

    def header_timings(self, header) -> dict[str, float] | None:
        """The server's timings from the response headers (:data:`HEADER_TIMINGS`), None when it
        sent none; ``header(name)`` gives a header's value or None. A value that is not a
        non-negative number is left out.

        >>> TGIAdapter(stream=False).header_timings({"x-queue-time": "12", "x-prompt-tokens": "7"}.get)
        {'server_queue_ms': 12.0, 'server_prompt_tokens': 7.0}
        """
        found = {}
        for name, field in HEADER_TIMINGS.items():
            value = header(name)
            if value is not None:
                try:
                    found[field] = number(float(value))
                except ValueError:
                    continue
        return {k: v for k, v in found.items() if v == v} or None

    def requested_max_tokens(self, body: dict) -> int | None:
        value = (body.get("parameters") or {}).get("max_new_tokens")
        return int(value) if isinstance(value, (int, float)) else None
