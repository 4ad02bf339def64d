"""How many prompt tokens the served model sees for a prompt: the counters prompts are sized with.

A counter is a callable ``count(content) -> int``: the prompt tokens the server counts (its
``usage.prompt_tokens``) for one request whose user text is ``content`` - chat template included
for the chat protocol, the tokenizer's special tokens included for a text prompt. Three kinds:

- :class:`ServerCounter`: asks the server itself: a non-streamed request with ``max_tokens: 1``
  and reads ``usage.prompt_tokens`` (vLLM, SGLang, llama.cpp, the embedded server). Exact by
  definition, one request per count, so it is used only while calibrating.
- :class:`LocalCounter`: a Hugging Face ``tokenizers`` tokenizer (``--tokenizer``) and, for chat,
  the model's chat template rendered as ``transformers``' ``apply_chat_template`` renders it
  (Jinja2, ``trim_blocks``/``lstrip_blocks``, ``bos_token``/``eos_token`` from
  ``tokenizer_config.json``, ``add_generation_prompt=True``), then encoded without adding special
  tokens (what vLLM's chat endpoint does); a text prompt is encoded with them (vLLM's completions
  default).
- :func:`local_counter`: picks the local counter, or - for chat with a tokenizer but no template
  next to it - counts the text locally and adds the template's tokens measured once on the
  server (:class:`OffsetCounter`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import requests

from llm_locust.auth import auth_headers

Counter = Callable[[str], int]
"""``count(content) -> prompt tokens`` (module docstring)."""

CHAT_PROTOCOL = "openai-chat"


class CountError(RuntimeError):
    """The server did not say how many prompt tokens a probe had (message says what it sent)."""


class ServerCounter:
    """Prompt tokens as the server counts them, by a probe request (``max_tokens: 1``).

    Parameters
    ----------
    host : str
        Base URL (``--host``).
    protocol : str
        ``openai-chat`` (``/v1/chat/completions``, one user message) or ``openai-completions``
        (``/v1/completions``).
    model : str
        Model name sent in the body.
    api_key : str, default ""
        Bearer token.
    timeout_s : float, default 60
        Per probe.

    Raises
    ------
    ValueError
        A protocol whose responses carry no prompt token count (``tgi``: give ``--tokenizer``).
    """

    def __init__(self, *, host: str, protocol: str, model: str, api_key: str = "", timeout_s: float = 60.0) -> None:
        if protocol not in (CHAT_PROTOCOL, "openai-completions"):
            raise ValueError(
                f"--protocol {protocol} reports no prompt token count to calibrate against: give --tokenizer"
            )
        self.chat = protocol == CHAT_PROTOCOL
        path = "/v1/chat/completions" if self.chat else "/v1/completions"
        self.url = host.rstrip("/") + path
        self.model = model
        self.headers = auth_headers(api_key)
        self.timeout_s = timeout_s
        self.probes = 0

    def __call__(self, content: str) -> int:
        """``usage.prompt_tokens`` of a probe with ``content``.

        Raises
        ------
        CountError
            Not a 200 with an integer ``usage.prompt_tokens``.
        requests.RequestException
            Connection failures, unchanged.
        """
        body: dict = {"model": self.model, "max_tokens": 1, "temperature": 0.0, "stream": False}
        if self.chat:
            body["messages"] = [{"role": "user", "content": content}]
        else:
            body["prompt"] = content
        self.probes += 1
        response = requests.post(self.url, json=body, headers=self.headers, timeout=self.timeout_s)
        try:
            tokens = response.json()["usage"]["prompt_tokens"]
        except (ValueError, KeyError, TypeError):
            tokens = None
        if response.status_code != 200 or not isinstance(tokens, int) or isinstance(tokens, bool):
            raise CountError(
                f"cannot count prompt tokens on the server: POST {self.url} (max_tokens 1) answered "
                f"{response.status_code} {response.text[:200]!r}; give --tokenizer"
            )
        return tokens


def _special(value) -> str:
    """A special token of ``tokenizer_config.json``: a string or ``{"content": ...}``."""
    if isinstance(value, dict):
        return str(value.get("content") or "")
    return value if isinstance(value, str) else ""


def find_chat_template(folder: Path) -> tuple[str | None, dict]:
    """The chat template of a model folder and its ``tokenizer_config.json``.

    Looked up as ``transformers`` does: ``chat_template.jinja``, else the ``chat_template``
    string of ``tokenizer_config.json``. Returns ``(None, config)`` when there is none.
    """
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8"), config
    template = config.get("chat_template")
    return (template if isinstance(template, str) else None), config


class LocalCounter:
    """Prompt tokens counted with a local tokenizer (module docstring).

    Parameters
    ----------
    path : str or Path
        ``tokenizer.json`` or a model folder holding it (and ``tokenizer_config.json``,
        ``chat_template.jinja``).
    chat : bool
        Count a chat prompt (template rendered) rather than a text prompt.

    Attributes
    ----------
    has_template : bool
        Whether a chat template was found (always False for a text prompt).

    Raises
    ------
    ImportError, FileNotFoundError
        As :class:`llm_locust.client.tokens.TokenizerCounter`.
    """

    def __init__(self, path: str | Path, *, chat: bool) -> None:
        from llm_locust.client.tokens import TokenizerCounter

        self._tokenizer = TokenizerCounter(path)._tokenizer
        self.chat = chat
        self._template = None
        if chat:
            source, config = find_chat_template(Path(path) if Path(path).is_dir() else Path(path).parent)
            if source is not None:
                from jinja2.sandbox import ImmutableSandboxedEnvironment

                env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
                self._template = env.from_string(source)
                self._specials = {k: _special(config.get(k)) for k in ("bos_token", "eos_token")}
        self.has_template = self._template is not None

    def content_tokens(self, content: str) -> int:
        """Tokens of ``content`` alone, without special tokens."""
        return len(self._tokenizer.encode(content, add_special_tokens=False).ids)

    def __call__(self, content: str) -> int:
        """Prompt tokens of a request with ``content`` (template or special tokens included).

        Raises
        ------
        ValueError
            Chat without a template (use :func:`local_counter`).
        """
        if not self.chat:
            return len(self._tokenizer.encode(content, add_special_tokens=True).ids)
        if self._template is None:
            raise ValueError("no chat template next to the tokenizer")
        text = self._template.render(
            messages=[{"role": "user", "content": content}], add_generation_prompt=True, **self._specials
        )
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)


class OffsetCounter:
    """Text counted locally plus a fixed number of template tokens measured once on the server.

    Parameters
    ----------
    local : LocalCounter
    server : Counter
    probe_content : str
        Text of the one server probe; ``offset = server(probe) - local.content_tokens(probe)``.
    """

    def __init__(self, local: LocalCounter, server: Counter, probe_content: str) -> None:
        self.local = local
        self.offset = server(probe_content) - local.content_tokens(probe_content)

    def __call__(self, content: str) -> int:
        return self.local.content_tokens(content) + self.offset


def local_counter(path: str, *, protocol: str, server: Callable[[], Counter], probe_content: str) -> Counter:
    """The counter for ``--tokenizer path``: local, or local text + server-measured template.

    Parameters
    ----------
    path : str
        ``--tokenizer``.
    protocol : str
        ``--protocol``.
    server : callable
        Builds a :class:`ServerCounter` (called only when a chat template is missing).
    probe_content : str
        Text of the probe that measures the template's tokens.
    """
    local = LocalCounter(path, chat=protocol == CHAT_PROTOCOL)
    if local.chat and not local.has_template:
        return OffsetCounter(local, server(), probe_content)
    return local
