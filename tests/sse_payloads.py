"""SSE payloads as servers send them, for the measurement tests (numbers chosen to check by hand)."""

from __future__ import annotations

import json


def chat(content=None, *, role=False, finish=None, reasoning=None, usage=None, tool=None, rid="chatcmpl-1") -> dict:
    """One ``chat.completion.chunk`` object."""
    delta: dict = {"role": "assistant", "content": ""} if role else {}
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta["reasoning_content"] = reasoning
    if tool is not None:
        delta["tool_calls"] = [{"index": 0, "function": {"name": tool, "arguments": "{}"}}]
    chunk = {
        "id": rid,
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def usage(prompt: int, completion: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def usage_chunk(prompt: int, completion: int) -> dict:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": usage(prompt, completion)}


def sse(obj, *, space: bool = True, eol: str = "\n") -> str:
    """``data: <json>`` and the blank line, with the given line end."""
    return ("data: " if space else "data:") + json.dumps(obj, ensure_ascii=False) + eol + eol


DONE = "data: [DONE]\n\n"


def tgi(text: str, *, index: int, special: bool = False, details: dict | None = None) -> dict:
    event = {"index": index, "token": {"id": index, "text": text, "logprob": -0.1, "special": special},
             "generated_text": None, "details": None}  # fmt: skip
    if details is not None:
        event["details"] = details
        event["generated_text"] = "full text"
    return event
