"""``--protocol-format FILE``: how to talk to a JSON endpoint that is not OpenAI-compatible.

The file is TOML (read with the standard library's ``tomllib``), like ``--server-log-format``::

    [request]
    path = "/generate"                # POSTed to --host + path
    [request.body]                    # the JSON body; placeholders are filled per request
    prompt = "{prompt}"
    max_new_tokens = "{max_tokens}"
    stream = "{stream}"

    [response]
    framing = "jsonl"                 # sse | jsonl | json (one body: not streamed, no TTFT)
    text = "token.text"               # JSON path of the generated text in one payload
    finish_reason = "finished"        # optional paths from here on
    tokens = "generated_tokens"       # the server's output token count (a running or final total)
    event_tokens = "n"                # tokens this payload carried
    prompt_tokens = "prompt_tokens"
    error = "error"                   # an error reported after HTTP 200
    [response.timings]                # the server's own timings (requests.csv server_* columns)
    server_prompt_ms = "timings.prefill_ms"

Placeholders: ``{prompt}``, ``{max_tokens}``, ``{stream}``, ``{temperature}``, ``{model}``,
``{ignore_eos}``. A string that is exactly one placeholder becomes the value with its JSON type
(``"{max_tokens}"`` -> ``64``, ``"{stream}"`` -> ``true``); inside a longer string it is
replaced by its text (``"User: {prompt}"``). ``{stream}`` is true unless ``framing = "json"``.

A JSON path is dot-separated keys, a whole number picking a list item: ``choices.0.text`` (or
``choices[0].text``). A path that is absent from a payload means "not in this payload".

Why own code: the format is this project's; ``tomllib`` parses it, and a path lookup of a few
keys needs no JSONPath library.
"""

from __future__ import annotations

import datetime
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm_locust.client.protocols.base import FRAMINGS, Workload
from llm_locust.client.protocols.timings import TIMING_COLUMNS

PLACEHOLDERS: tuple[str, ...] = ("prompt", "max_tokens", "stream", "temperature", "model", "ignore_eos")
"""Names a body template may use as ``{name}``."""
RESPONSE_PATHS: tuple[str, ...] = ("text", "finish_reason", "tokens", "event_tokens", "prompt_tokens", "error")
"""``[response]`` keys holding a JSON path (``text`` required)."""
_PLACEHOLDER = re.compile(r"\{([A-Za-z_]\w*)\}")
_SEGMENT = re.compile(r"^[^.\[\]]+$")

JsonPath = tuple[str | int, ...]


class FormatError(ValueError):
    """A protocol format file that cannot be used; the message names the file and the key."""


def parse_path(text: Any, *, where: str) -> JsonPath:
    """``"choices[0].delta.content"`` -> ``("choices", 0, "delta", "content")``.

    Raises
    ------
    FormatError
        Not a non-empty string of dot-separated keys (``where`` names the key in the message).

    >>> parse_path("choices[0].text", where="text")
    ('choices', 0, 'text')
    """
    if not isinstance(text, str) or not text.strip():
        raise FormatError(f'{where}: must be a JSON path such as "token.text", got {text!r}')
    parts: list[str | int] = []
    for segment in text.replace("[", ".").replace("]", "").split("."):
        if not _SEGMENT.match(segment):
            raise FormatError(f"{where}: {text!r} is not a JSON path (empty or bracketed segment)")
        parts.append(int(segment) if segment.isdigit() else segment)
    return tuple(parts)


def lookup(value: Any, path: JsonPath) -> Any:
    """The value at ``path`` in a decoded JSON value; None where the path does not lead.

    >>> lookup({"choices": [{"text": "Hi"}]}, ("choices", 0, "text"))
    'Hi'
    >>> lookup({"choices": []}, ("choices", 0, "text")) is None
    True
    """
    for key in path:
        if isinstance(key, int):
            if value.__class__ is not list or key >= len(value):
                return None
        elif value.__class__ is not dict:
            return None
        value = value[key] if isinstance(key, int) else value.get(key)
        if value is None:
            return None
    return value


@dataclass(frozen=True, kw_only=True)
class GenericFormat:
    """A parsed ``--protocol-format`` file (module docstring).

    Attributes
    ----------
    source : str
        The file, for messages.
    path : str
        Request path, starting with ``/``.
    body : dict
        Body template (placeholders unfilled).
    framing : str
        One of :data:`~llm_locust.client.protocols.base.FRAMINGS`.
    paths : dict of str to JsonPath
        ``[response]`` paths by key (:data:`RESPONSE_PATHS`; ``text`` always present).
    timings : dict of str to JsonPath
        ``[response.timings]``: record field (:data:`~.timings.TIMING_COLUMNS`) -> path.
    max_tokens_path : JsonPath or None
        Where ``"{max_tokens}"`` sits in the body (to read a verbatim body's limit back).
    """

    source: str
    path: str
    body: dict
    framing: str
    paths: dict[str, JsonPath]
    timings: dict[str, JsonPath] = field(default_factory=dict)
    max_tokens_path: JsonPath | None = None

    @property
    def uses_model(self) -> bool:
        """Whether the body names ``{model}`` (else the served model need not be looked up)."""
        return "{model}" in repr(self.body)

    def build_body(self, *, prompt: str, workload: Workload) -> dict:
        """The body for one request: the template with every placeholder filled."""
        values = {
            "prompt": prompt,
            "max_tokens": workload.max_tokens,
            "stream": self.framing != "json",
            "temperature": workload.temperature,
            "model": workload.model,
            "ignore_eos": workload.ignore_eos,
        }
        return _fill(self.body, values)


def _fill(template: Any, values: dict[str, Any]) -> Any:
    if isinstance(template, dict):
        return {key: _fill(item, values) for key, item in template.items()}
    if isinstance(template, list):
        return [_fill(item, values) for item in template]
    if isinstance(template, str) and "{" in template:
        whole = _PLACEHOLDER.fullmatch(template)
        if whole:
            return values[whole.group(1)]
        return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), template)
    return template


def _check_template(template: Any, where: str, found: dict[str, JsonPath], at: JsonPath = ()) -> None:
    """Reject unknown placeholders and values JSON has not (a TOML date or time, a float that is
    nan or inf), naming the key; note where each placeholder sits."""
    if isinstance(template, (datetime.date, datetime.time)):  # datetime is a date
        raise FormatError(f"{where}: a TOML date or time is not a JSON value; write it as a string")
    if isinstance(template, float) and not math.isfinite(template):
        raise FormatError(f"{where}: {template} is not a JSON number")
    if isinstance(template, dict):
        for key, item in template.items():
            _check_template(item, f"{where}.{key}", found, (*at, key))
    elif isinstance(template, list):
        for i, item in enumerate(template):
            _check_template(item, f"{where}[{i}]", found, (*at, i))
    elif isinstance(template, str):
        for name in _PLACEHOLDER.findall(template):
            if name not in PLACEHOLDERS:
                raise FormatError(f"{where}: unknown placeholder {{{name}}}; known: {', '.join(PLACEHOLDERS)}")
            if _PLACEHOLDER.fullmatch(template):
                found.setdefault(name, at)
            else:
                found.setdefault(name + " (in text)", at)


def _table(data: dict, key: str, allowed: tuple[str, ...], where: str) -> dict:
    value = data.get(key)
    if not isinstance(value, dict):
        raise FormatError(f"[{where}]: missing table (see the format in llm_locust/client/protocols/genericformat.py)")
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise FormatError(f"[{where}]: unknown key {unknown[0]!r}; known: {', '.join(allowed)}")
    return value


def load_format(path: str | Path) -> GenericFormat:
    """Read and check a protocol format file.

    Raises
    ------
    FormatError
        The file is missing, not TOML, or a key is missing, unknown or of the wrong kind; the
        message starts with the file and names the key (``[response] framing: …``).
    """
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise FormatError(f"protocol format {path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        from llm_locust.analysis.server.userformat import toml_hint

        raise FormatError(f"protocol format {path}: not TOML: {exc}{toml_hint(exc)}") from None
    try:
        return _parse(data, str(path))
    except FormatError as exc:
        raise FormatError(f"protocol format {path}: {exc}") from None


def _parse(data: dict, source: str) -> GenericFormat:
    unknown = sorted(set(data) - {"request", "response"})
    if unknown:
        raise FormatError(f"unknown table [{unknown[0]}]; known: [request], [response]")
    request = _table(data, "request", ("path", "body"), "request")
    response = _table(data, "response", ("framing", *RESPONSE_PATHS, "timings"), "response")
    url_path = request.get("path")
    if not isinstance(url_path, str) or not url_path.startswith("/"):
        raise FormatError(f"[request] path: must be a string starting with '/', got {url_path!r}")
    body = request.get("body")
    if not isinstance(body, dict):
        raise FormatError("[request] body: missing table [request.body] (the JSON body template)")
    found: dict[str, JsonPath] = {}
    _check_template(body, "[request.body]", found)
    if "prompt" not in found and "prompt (in text)" not in found:
        raise FormatError("[request.body]: no {prompt} placeholder (where does the prompt go?)")
    framing = response.get("framing")
    if framing not in FRAMINGS:
        raise FormatError(f"[response] framing: must be one of {', '.join(FRAMINGS)}, got {framing!r}")
    if "text" not in response:
        raise FormatError("[response] text: missing (the JSON path of the generated text)")
    paths = {key: parse_path(response[key], where=f"[response] {key}") for key in RESPONSE_PATHS if key in response}
    timings_table = response.get("timings", {})
    if not isinstance(timings_table, dict):
        raise FormatError("[response] timings: must be a table [response.timings]")
    bad = sorted(set(timings_table) - set(TIMING_COLUMNS))
    if bad:
        raise FormatError(f"[response.timings] unknown key {bad[0]!r}; known: {', '.join(TIMING_COLUMNS)}")
    timings = {key: parse_path(value, where=f"[response.timings] {key}") for key, value in timings_table.items()}
    return GenericFormat(
        source=source,
        path=url_path,
        body=body,
        framing=framing,
        paths=paths,
        timings=timings,
        max_tokens_path=found.get("max_tokens"),
    )
