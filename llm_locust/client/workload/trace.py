"""Request traces (``--trace FILE --trace-format F``): one reader per format, one row type.

A trace is a list of requests with their arrival times and lengths, replayed open-loop
(:mod:`llm_locust.client.rateuser`, ``--shape rate``). Every format is read into the same
:class:`TraceRow` list, checked whole before any load is sent: a malformed line, a missing or
ill-typed field and a timestamp earlier than the line before raise :class:`TraceError`, whose
message names the file and the line.

Formats (``--trace-format``):

``jsonl`` (llm-locust's own; one JSON object per line)
    ``timestamp_s`` (seconds, any origin: offsets count from the first line) *or*
    ``interarrival_s`` (seconds since the line before; the first line's from 0), the same key on
    every line; ``input_tokens`` and ``output_tokens`` (integers); optional ``session_id``
    (string or integer) and ``prefix_id`` (string or integer) with ``prefix_tokens`` (integer:
    how many leading tokens of the prompt are that shared prefix). Other keys are ignored.
``mooncake`` (Kimi's Mooncake traces, ``kvcache-ai/Mooncake`` ``FAST25-release/traces/*.jsonl``
    and ``mooncake_trace.jsonl``; the format is described in ``FAST25-release/README.md`` and in
    NVIDIA Dynamo's ``benchmarks/data_generator/README.md``)
    ``{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}``:
    ``timestamp`` is the arrival in milliseconds since the first request, ``hash_ids`` the ids of
    the prompt's blocks of :data:`MOONCAKE_BLOCK_TOKENS` tokens (hashes chained over the prefix,
    so two requests whose first k ids agree share their first k blocks). ``hash_ids`` may be
    absent (no shared prefix); an optional ``session_id`` (AIPerf's multi-turn extension) is kept.
``azure`` (Azure LLM inference traces, ``Azure/AzurePublicDataset``
    ``AzureLLMInferenceDataset2023.md`` and ``AzureLLMInferenceDataset2024.md``; CSV)
    Header ``TIMESTAMP,ContextTokens,GeneratedTokens``; ``TIMESTAMP`` an ISO date and time
    (2023: ``2023-11-16 18:15:46.6805900``, naive, 7 fractional digits; 2024:
    ``2024-05-10 00:00:00.009930+00:00``); offsets count from the first row. No sessions, no
    prefixes (the traces hold no prompt content).

A row's shared prefix is a tuple of *segments* ``(key, tokens)``: the prompt's first tokens are
the segments' texts in order, each text a function of its key alone
(:mod:`llm_locust.client.workload.traceprompts`), so rows that share keys share prompt text and a
prefix cache can hit. Mooncake's ``hash_ids`` are one segment of 512 tokens each (the last one
the remainder of ``input_length``); ``jsonl``'s ``prefix_id`` one segment of ``prefix_tokens``.
"""

from __future__ import annotations

import csv
import enum
import json
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

MOONCAKE_BLOCK_TOKENS = 512
"""Tokens per ``hash_ids`` block in Mooncake's traces (``FAST25-release/README.md``; Dynamo's
``data_generator`` uses the same ``block_size`` 512)."""

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
"""Columns of the Azure LLM inference traces (their ``Schema`` table), in file order."""


class TraceFormat(str, enum.Enum):
    """``--trace-format`` values (module docstring)."""

    JSONL = "jsonl"
    MOONCAKE = "mooncake"
    AZURE = "azure"


class TraceError(ValueError):
    """A trace that cannot be replayed as written; the message names the file and the line."""


class TraceRow(NamedTuple):
    """One request of a trace.

    Attributes
    ----------
    row_index : int
        Position among the trace's requests, from 0 (``requests.csv`` ``trace_row``).
    line : int
        Line of the file it was read from, from 1 (the header is line 1 of a CSV).
    offset_s : float
        Arrival, seconds after the trace's first request (trace time, before ``--trace-speed``).
    input_tokens : int
        Prompt length the trace asks for, tokens (chat template included, as the server counts).
    output_tokens : int
        Output tokens the trace's request generated (the request's ``max_tokens``).
    session_id : str
        The trace's session id, "" for none.
    prefix : tuple of (str, int)
        Shared-prefix segments ``(key, tokens)``, in prompt order (module docstring); empty for none.
    """

    row_index: int
    line: int
    offset_s: float
    input_tokens: int
    output_tokens: int
    session_id: str = ""
    prefix: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Trace:
    """A whole trace, checked.

    Attributes
    ----------
    path : str
    format : str
        A :class:`TraceFormat` value.
    rows : tuple of TraceRow
        Non-empty, ``offset_s`` non-decreasing from 0.
    """

    path: str
    format: str
    rows: tuple[TraceRow, ...]

    @property
    def span_s(self) -> float:
        """Seconds from the first request to the last (trace time)."""
        return self.rows[-1].offset_s


def _fail(path: str, line: int, message: str) -> TraceError:
    return TraceError(f"{path} line {line}: {message}")


def _count(path: str, line: int, value, name: str, *, minimum: int = 0) -> int:
    """An integer field >= ``minimum`` (JSON ``12`` or ``12.0``; a CSV cell's text)."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise _fail(path, line, f"{name!r} must be an integer, got {value!r}") from None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value != int(value)
    ):
        raise _fail(path, line, f"{name!r} must be an integer, got {value!r}")
    if value < minimum:
        raise _fail(path, line, f"{name!r} must be >= {minimum}, got {int(value)}")
    return int(value)


def _seconds(path: str, line: int, value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise _fail(path, line, f"{name!r} must be a number >= 0, got {value!r}")
    return float(value)


def _identifier(path: str, line: int, value, name: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise _fail(path, line, f"{name!r} must be a string or an integer, got {value!r}")
    return str(value)


def _json_lines(path: str):
    """``(line number, object)`` of every non-blank line of a JSON Lines file."""
    with open(path, encoding="utf-8") as handle:
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                value = json.loads(text)
            except ValueError as exc:
                raise _fail(path, number, f"not JSON ({exc})") from None
            if not isinstance(value, dict):
                raise _fail(path, number, f"expected a JSON object, got {type(value).__name__}")
            yield number, value


def _need(path: str, line: int, item: dict, name: str):
    if name not in item:
        raise _fail(path, line, f"missing {name!r} (has {sorted(item)})")
    return item[name]


def _read_jsonl(path: str) -> list[tuple[int, float, int, int, str, tuple]]:
    rows, clock_key, t_s = [], None, 0.0
    for line, item in _json_lines(path):
        key = "timestamp_s" if "timestamp_s" in item else "interarrival_s" if "interarrival_s" in item else None
        if key is None:
            raise _fail(path, line, f"missing 'timestamp_s' or 'interarrival_s' (has {sorted(item)})")
        if clock_key is None:
            clock_key = key
        elif key != clock_key:
            raise _fail(path, line, f"has {key!r} where the lines before have {clock_key!r}: give one of them")
        value = _seconds(path, line, item[key], key)
        t_s = value if key == "timestamp_s" else t_s + value
        input_tokens = _count(path, line, _need(path, line, item, "input_tokens"), "input_tokens", minimum=1)
        output_tokens = _count(path, line, _need(path, line, item, "output_tokens"), "output_tokens")
        session = _identifier(path, line, item["session_id"], "session_id") if "session_id" in item else ""
        prefix: tuple = ()
        if "prefix_id" in item:
            prefix_id = _identifier(path, line, item["prefix_id"], "prefix_id")
            tokens = _count(path, line, _need(path, line, item, "prefix_tokens"), "prefix_tokens", minimum=1)
            if tokens > input_tokens:
                raise _fail(path, line, f"'prefix_tokens' ({tokens}) exceeds 'input_tokens' ({input_tokens})")
            prefix = ((f"p:{prefix_id}", tokens),)
        elif "prefix_tokens" in item:
            raise _fail(path, line, "'prefix_tokens' without 'prefix_id': name the prefix it is")
        rows.append((line, t_s, input_tokens, output_tokens, session, prefix))
    return rows


def _read_mooncake(path: str) -> list[tuple[int, float, int, int, str, tuple]]:
    rows = []
    for line, item in _json_lines(path):
        t_s = _seconds(path, line, _need(path, line, item, "timestamp"), "timestamp") / 1000.0
        input_tokens = _count(path, line, _need(path, line, item, "input_length"), "input_length", minimum=1)
        output_tokens = _count(path, line, _need(path, line, item, "output_length"), "output_length")
        hash_ids = item.get("hash_ids", [])
        if not isinstance(hash_ids, list):
            raise _fail(path, line, f"'hash_ids' must be a list of integers, got {hash_ids!r:.80}")
        blocks = []
        for k, block in enumerate(hash_ids):
            block_id = _count(path, line, block, f"hash_ids[{k}]")
            tokens = min(MOONCAKE_BLOCK_TOKENS, input_tokens - k * MOONCAKE_BLOCK_TOKENS)
            if tokens <= 0:
                break  # more ids than the prompt has blocks: the rest cover no token
            blocks.append((f"m:{block_id}", tokens))
        session = _identifier(path, line, item["session_id"], "session_id") if "session_id" in item else ""
        rows.append((line, t_s, input_tokens, output_tokens, session, tuple(blocks)))
    return rows


def _read_azure(path: str) -> list[tuple[int, float, int, int, str, tuple]]:
    rows, first = [], None
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None or [h.strip() for h in header[:3]] != list(AZURE_COLUMNS):
            raise _fail(path, 1, f"expected the header {','.join(AZURE_COLUMNS)}, got {','.join(header or [])!r:.120}")
        for cells in reader:
            line = reader.line_num
            if not any(c.strip() for c in cells):
                continue
            if len(cells) < 3:
                raise _fail(path, line, f"expected 3 cells ({','.join(AZURE_COLUMNS)}), got {len(cells)}")
            try:
                stamp = datetime.fromisoformat(cells[0].strip())
            except ValueError:
                raise _fail(path, line, f"'TIMESTAMP' is not a date and time: {cells[0]!r}") from None
            if first is None:
                first = stamp
            elif (stamp.tzinfo is None) != (first.tzinfo is None):
                raise _fail(path, line, "'TIMESTAMP' mixes times with and without a UTC offset")
            input_tokens = _count(path, line, cells[1], "ContextTokens", minimum=1)
            output_tokens = _count(path, line, cells[2], "GeneratedTokens")
            rows.append((line, (stamp - first).total_seconds(), input_tokens, output_tokens, "", ()))
    return rows


_READERS = {TraceFormat.JSONL: _read_jsonl, TraceFormat.MOONCAKE: _read_mooncake, TraceFormat.AZURE: _read_azure}


def read_trace(path: str | Path, trace_format: str) -> Trace:
    """Read and check a whole trace.

    Parameters
    ----------
    path : str or Path
    trace_format : str
        A :class:`TraceFormat` value (module docstring for each format and where it is documented).

    Returns
    -------
    Trace
        Offsets from the first request (its ``offset_s`` is 0).

    Raises
    ------
    TraceError
        An unknown format, an empty trace, a line that is not JSON (or a CSV row without its
        cells), a missing or ill-typed field, or a timestamp earlier than the line before's;
        the message names the file and the line.
    OSError
        The file cannot be read.

    >>> import tempfile, os
    >>> with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
    ...     _ = f.write('{"timestamp": 1000, "input_length": 600, "output_length": 8, "hash_ids": [7, 9]}\\n')
    ...     _ = f.write('{"timestamp": 1500, "input_length": 100, "output_length": 4, "hash_ids": [7]}\\n')
    >>> trace = read_trace(f.name, "mooncake")
    >>> [(r.offset_s, r.input_tokens, r.prefix) for r in trace.rows]
    [(0.0, 600, (('m:7', 512), ('m:9', 88))), (0.5, 100, (('m:7', 100),))]
    >>> os.unlink(f.name)
    """
    path = str(path)
    try:
        reader = _READERS[TraceFormat(trace_format)]
    except ValueError:
        raise TraceError(
            f"unknown trace format {trace_format!r}; known: {', '.join(f.value for f in TraceFormat)}"
        ) from None
    try:
        raw = reader(path)
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not raw:
        raise TraceError(f"{path}: no requests in the trace")
    origin = raw[0][1]
    rows, previous = [], origin
    for index, (line, t_s, input_tokens, output_tokens, session, prefix) in enumerate(raw):
        if t_s < previous:
            raise _fail(path, line, f"timestamp {t_s - origin:g} s (from the first request) is earlier than the line "
                        f"before's ({previous - origin:g} s): a trace must be in arrival order")  # fmt: skip
        previous = t_s
        rows.append(TraceRow(index, line, t_s - origin, input_tokens, output_tokens, session, prefix))
    return Trace(path=path, format=TraceFormat(trace_format).value, rows=tuple(rows))
