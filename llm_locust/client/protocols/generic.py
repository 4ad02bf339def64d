"""Any JSON endpoint (``--protocol generic --protocol-format FILE``), read as its format file says.

The body is the file's template with the placeholders filled
(:class:`~llm_locust.client.protocols.genericformat.GenericFormat`); each payload the framing cuts
out of the response (an SSE event, a JSON line, or the one JSON body) is read through the
file's JSON paths. The framing, timing and accounting machinery is the one every protocol
shares (:mod:`llm_locust.client.stream`, :mod:`llm_locust.client.accounting`).

A JSON-lines or one-body answer ends with its HTTP message: a complete message is the end of
the answer (as ``[DONE]`` is for SSE), a connection closed mid-message a ``connection_error``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from llm_locust.client.protocols.base import StreamEvent, Workload, error_text, prompt_text
from llm_locust.client.protocols.genericformat import GenericFormat, lookup
from llm_locust.client.protocols.timings import number


class GenericAdapter:
    """Adapter driven by a protocol format file.

    Parameters
    ----------
    fmt : GenericFormat
        The parsed ``--protocol-format`` file.

    >>> from llm_locust.client.protocols.genericformat import parse_path
    >>> fmt = GenericFormat(source="f", path="/generate", body={"prompt": "{prompt}"}, framing="jsonl",
    ...                     paths={"text": parse_path("token", where=""), "tokens": parse_path("n", where="")})
    >>> GenericAdapter(fmt=fmt).interpret({"token": "Hi", "n": 3})[:4]
    ('Hi', True, None, {'completion_tokens': 3})
    """

    name: ClassVar[str] = "generic"
    text_opaque: ClassVar[bool] = True  # the text path's value is taken as it is; answer: is it empty

    def __init__(self, *, fmt: GenericFormat) -> None:
        self.fmt = fmt
        self.path = fmt.path
        self.framing = fmt.framing
        paths = fmt.paths
        self._text = paths["text"]
        self._finish = paths.get("finish_reason")
        self._tokens = paths.get("tokens")
        self._event_tokens = paths.get("event_tokens")
        self._prompt_tokens = paths.get("prompt_tokens")
        self._error = paths.get("error")
        self._timings = tuple(fmt.timings.items())

    def build_body(self, *, prompt: str | list[dict], workload: Workload) -> dict:
        """The format file's body template, filled for ``prompt`` (a chat ``messages`` list is
        sent as its contents joined by newlines)."""
        return self.fmt.build_body(prompt=prompt_text(prompt), workload=workload)

    def interpret(self, payload: Any) -> StreamEvent:
        """Read one payload through the format's paths.

        Raises
        ------
        ValueError
            The payload is not a JSON object or list, or a count is not a number.
        """
        if payload.__class__ is not dict and payload.__class__ is not list:
            raise ValueError(f"payload is not a JSON object: {str(payload)[:80]!r}")
        if self._error is not None:
            error = lookup(payload, self._error)
            if error:
                return StreamEvent(error=error_text(error))
        text = lookup(payload, self._text)
        usage = None
        if self._tokens is not None:
            total = lookup(payload, self._tokens)
            if total is not None:
                usage = {"completion_tokens": total}
        if self._prompt_tokens is not None:
            prompt = lookup(payload, self._prompt_tokens)
            if prompt is not None:
                usage = {**(usage or {}), "prompt_tokens": prompt}
        tokens = None
        if self._event_tokens is not None:
            stated = lookup(payload, self._event_tokens)
            if stated is not None:
                if stated.__class__ is not int or stated < 0:
                    raise ValueError(f"event token count is not a whole number: {stated!r:.40}")
                tokens = stated
        finish = lookup(payload, self._finish) if self._finish is not None else None
        timings = None
        if self._timings:
            found = {field: number(lookup(payload, path)) for field, path in self._timings}
            timings = {k: v for k, v in found.items() if v == v} or None  # NaN: not in this payload
        return StreamEvent(
            text="" if text is None else text,
            answer=bool(text),
            tokens=tokens,
            usage=usage,
            finish_reason=None if finish in (None, False, "") else str(finish),
            timings=timings,
        )

    def requested_max_tokens(self, body: dict) -> int | None:
        """The limit at the template's ``{max_tokens}`` place in a (verbatim) body."""
        if self.fmt.max_tokens_path is None:
            return None
        value = lookup(body, self.fmt.max_tokens_path)
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
