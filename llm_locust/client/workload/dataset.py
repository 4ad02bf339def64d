"""``--dataset FILE``: prompts (and per-item output lengths) of a real workload, checked up front.

Formats, told apart by the first non-blank character:

- ``[`` - ShareGPT JSON (as ``ShareGPT_V3_unfiltered_cleaned_split.json``, the file vLLM's
  ``benchmarks/benchmark_serving.py`` samples): a list of ``{"conversations": [{"from":
  "human"|"gpt", "value": text}, ...]}``. Each entry gives its first human (or ``user``) turn as
  the prompt and asks for as many output tokens as the reply after it holds (counted with the
  output counter: ``--tokenizer``, else ``ceil(characters / 4)``). Entries without such a pair are
  skipped (as vLLM's benchmark does) and counted.
- ``{`` - JSON Lines: one object per line, ``{"prompt": text}`` or ``{"messages": [{"role",
  "content"}, ...]}``, optionally ``"max_tokens": n`` (else ``--max-tokens``).
- anything else - plain text, one prompt per non-blank line.

Every problem names the file and its line (:class:`DatasetError`); the launcher reads the file
before any process starts, so nothing is sent before it is checked.

Sampling: the items in a seeded random order (``--seed``, the same order in every process); each
process walks it from its own seeded start.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from llm_locust.argtypes import MAX_INT
from llm_locust.client.workload.source import WorkItem

HUMAN_ROLES = ("human", "user")
REPLY_ROLES = ("gpt", "assistant", "chatgpt", "bing", "bard")


class DatasetError(ValueError):
    """A dataset file that cannot be used (message: ``FILE line N: what is wrong``)."""


@dataclass(frozen=True)
class DatasetItem:
    """One prompt of a dataset: text or chat messages, and its output tokens (None: the default)."""

    prompt: str | list[dict]
    max_tokens: int | None


@dataclass(frozen=True)
class Dataset:
    """A checked dataset file.

    Attributes
    ----------
    items : tuple of DatasetItem
    format : str
        ``"sharegpt"``, ``"jsonl"`` or ``"text"``.
    sha256 : str
        Hex SHA-256 of the file's bytes.
    skipped : int
        ShareGPT entries without a human turn followed by a reply.
    """

    items: tuple[DatasetItem, ...]
    format: str
    sha256: str
    skipped: int = 0

    @property
    def has_messages(self) -> bool:
        """Whether any item is a chat ``messages`` list."""
        return any(not isinstance(item.prompt, str) for item in self.items)


def _sharegpt(path: Path, text: str, count_output: Callable[[str], int]) -> tuple[list[DatasetItem], int]:
    decoder = json.JSONDecoder()
    items, skipped = [], 0
    pos = text.index("[") + 1
    line, seen = 1, 0  # line number at offset `seen`, advanced incrementally (no quadratic recount)
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        line += text.count("\n", seen, pos)
        seen = pos
        if pos >= len(text):
            raise DatasetError(f"{path} line {line}: the JSON list is not closed")
        if text[pos] == "]":
            break
        try:
            entry, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path} line {exc.lineno}: not JSON ({exc.msg})") from None
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list) or not all(
            isinstance(t, dict) and isinstance(t.get("value"), str) and isinstance(t.get("from"), str) for t in turns
        ):
            raise DatasetError(
                f"{path} line {line}: a ShareGPT entry must be an object with a list 'conversations' "
                'of {"from": ..., "value": text} turns'
            )
        pair = next(
            (
                (a["value"], b["value"])
                for a, b in zip(turns, turns[1:])
                if a["from"].lower() in HUMAN_ROLES and b["from"].lower() in REPLY_ROLES and a["value"].strip()
            ),
            None,
        )
        if pair is None:
            skipped += 1
        else:
            items.append(DatasetItem(pair[0], max(1, count_output(pair[1]))))
        pos = end
    return items, skipped


def _jsonl_item(path: Path, number: int, line: str) -> DatasetItem:
    where = f"{path} line {number}"
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{where}: not JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise DatasetError(f"{where}: each line must be a JSON object with 'prompt' or 'messages'")
    max_tokens = value.get("max_tokens")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_INT
    ):
        raise DatasetError(f"{where}: 'max_tokens' must be an integer from 1 to {MAX_INT}, got {max_tokens!r}")
    prompt, messages = value.get("prompt"), value.get("messages")
    if (prompt is None) == (messages is None):
        raise DatasetError(f"{where}: give exactly one of 'prompt' (text) and 'messages' (a chat list)")
    if prompt is not None:
        if not isinstance(prompt, str) or not prompt.strip():
            raise DatasetError(f"{where}: 'prompt' must be a non-empty string")
        return DatasetItem(prompt, max_tokens)
    if not (
        isinstance(messages, list)
        and messages
        and all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages)
    ):  # fmt: skip
        raise DatasetError(f'{where}: \'messages\' must be a non-empty list of {{"role": str, "content": str}}')
    return DatasetItem(messages, max_tokens)


def load_dataset(path: str | Path, *, count_output: Callable[[str], int] | None = None) -> Dataset:
    """Read and check a dataset file (formats in the module docstring).

    Parameters
    ----------
    path : str or Path
    count_output : callable, optional
        Tokens of a ShareGPT reply (its output length); default ``ceil(characters / 4)``
        (:func:`llm_locust.client.tokens.heuristic_tokens`).

    Raises
    ------
    DatasetError
        Not UTF-8, malformed (naming the line), or no usable item.
    OSError
        The file cannot be read.
    """
    from llm_locust.client.tokens import heuristic_tokens

    path = Path(path)
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise DatasetError(f"{path} line {line}: not UTF-8") from None
    stripped = text.lstrip()
    skipped = 0
    if stripped.startswith("["):
        items, skipped = _sharegpt(path, text, count_output or heuristic_tokens)
        kind = "sharegpt"
    elif stripped.startswith("{"):
        lines = text.splitlines()
        items = [_jsonl_item(path, n, line) for n, line in enumerate(lines, 1) if line.strip()]
        kind = "jsonl"
    else:
        items = [DatasetItem(line, None) for line in text.splitlines() if line.strip()]
        kind = "text"
    if not items:
        raise DatasetError(
            f"{path}: no usable prompt in the file" + (f" ({skipped} entries skipped)" if skipped else "")
        )
    return Dataset(tuple(items), kind, hashlib.sha256(raw).hexdigest(), skipped)


class DatasetPrompts:
    """A dataset's items in a seeded order; :meth:`next_request` per request.

    Parameters
    ----------
    dataset : Dataset
    max_tokens : int
        For items that name no output length.
    seed : int, default 0
        Order of the items (the same in every process).
    stream : str, default "0"
        Which process this is: where in the order it starts.
    """

    def __init__(self, dataset: Dataset, *, max_tokens: int, seed: int = 0, stream: str = "0") -> None:
        self.items = list(dataset.items)
        random.Random(f"{seed}:dataset").shuffle(self.items)
        self.index = random.Random(f"{seed}:{stream}:start").randrange(len(self.items))
        self.max_tokens = max_tokens

    def next_request(self) -> WorkItem:
        item = self.items[self.index]
        self.index = (self.index + 1) % len(self.items)
        return WorkItem(item.prompt, item.max_tokens or self.max_tokens)
