"""The fixed prompt set a run sends, and its fingerprint.

A run sends the same prompts in the same order from every user (each user starts at its own
offset), so two runs with the same prompt set and workload are comparable. The fingerprint is the
SHA-256 of the prompts joined by NUL bytes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

DEFAULT_PROMPTS: tuple[str, ...] = (
    "Write a short story about a robot that learns to paint.",
    "Explain how a continuous-batching inference server schedules requests.",
    "List five practical tips for writing maintainable Python code.",
    "Describe the water cycle to a ten-year-old.",
    "Summarise the plot of a heist movie you would like to see.",
    "What are the trade-offs between latency and throughput in a web service?",
    "Write a haiku about the sea at night, then explain its imagery.",
    "Give step-by-step instructions for making a cup of tea.",
)


def load_prompts(path: str | Path | None) -> tuple[str, ...]:
    """Prompts from ``path`` (a JSON list of strings, or one prompt per line), or the defaults.

    A file whose first non-blank character is ``[`` is read as JSON.

    Raises
    ------
    ValueError
        The file holds no prompt; it starts with ``[`` but is not valid JSON (the message names
        the line and column), or is a JSON value that is not a list of strings (it names the
        first item that is not); a byte is not UTF-8 (it names the byte offset).
    OSError
        The file cannot be read.
    """
    if path is None or str(path) == "":
        return DEFAULT_PROMPTS
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ValueError(f"{path}: not UTF-8 text: byte offset {exc.start} (line {line})") from None
    if text.lstrip().startswith("["):
        try:
            prompts = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{path}: starts with '[' but is not a JSON list: {exc.msg} at line {exc.lineno} column {exc.colno} "
                "(a prompt per line must not start the file with '[': put such prompts in a JSON list)"
            ) from None
        bad = next((i for i, p in enumerate(prompts) if not isinstance(p, str)), None)
        if bad is not None:
            raise ValueError(
                f"{path}: a JSON prompt file must be a list of strings; item {bad} is {prompts[bad]!r:.60}"
            )
    else:
        prompts = [line for line in text.splitlines() if line.strip()]
    if not prompts:
        raise ValueError(f"{path}: no prompt in the file")
    return tuple(prompts)


def prompt_set_sha256(prompts: tuple[str, ...]) -> str:
    """Hex SHA-256 of the prompts joined by NUL bytes (order matters)."""
    return hashlib.sha256("\0".join(prompts).encode("utf-8")).hexdigest()
