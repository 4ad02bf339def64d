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
"""

from __future__ import annotations

from typing import Any, ClassVar

from llm_locust.protocols.base import StreamEvent, Workload, error_text


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
    path: ClassVar[str] = "/generate_stream"

    def build_body(self, *, prompt: str, workload: Workload) -> dict:
        """``{"inputs": prompt, "parameters": {...}}`` with details on (for the finish reason and
        the token count). Temperature 0 is sent as greedy decoding (``do_sample: false``), since
        TGI rejects ``temperature: 0``.
        """
        parameters: dict = {"max_new_tokens": workload.max_tokens, "details": True}
        if workload.temperature > 0:
            parameters.update(do_sample=True, temperature=workload.temperature)
        else:
            parameters["do_sample"] = False
        return {"inputs": prompt, "parameters": parameters}

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
        details = payload.get("details")
        usage = None
        finish_reason = None
        if details:
            finish_reason = details.get("finish_reason")
            generated = details.get("generated_tokens")
            if generated is not None:
                usage = {"completion_tokens": generated}
        return StreamEvent(text=text, answer=bool(text), tokens=tokens, usage=usage, finish_reason=finish_reason)

    def requested_max_tokens(self, body: dict) -> int | None:
        value = (body.get("parameters") or {}).get("max_new_tokens")
        return int(value) if isinstance(value, (int, float)) else None
