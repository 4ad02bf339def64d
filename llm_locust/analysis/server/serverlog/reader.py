"""Reading a server log file in chunks, in bounded memory, whatever bytes it holds.

A server log can be large (a day of stats lines), hostile or broken (binary garbage, NUL bytes,
bytes that are not UTF-8, a line of 100 MB, a last line cut mid-write). :func:`read_log` reads
the file in chunks of :data:`CHUNK_BYTES` and keeps:

- of each line, at most its first :data:`~llm_locust.analysis.server.serverlog.base.MAX_LINE_CHARS`
  characters: the rest of an over-long line is skipped as it is read (never held whole), and
  the line is counted (:attr:`LogText.over_long_lines`);
- every line of the first :data:`HEAD_CHARS` characters (startup configuration, family
  detection) and the last line (the end of the log);
- after that, only the lines a parser can use (:class:`KeepRule`: a literal anchor of a
  family's data lines, an error keyword, a match of a user pattern), with their file line
  numbers.

So memory grows with the lines kept (which the series holds anyway), not with the file: a 1 GB
log of garbage and 100 MB lines is read in a few MB. Bytes that are not UTF-8 become U+FFFD
(kept lines counted), ``\\r`` is dropped (lines end at ``\\n``, as the run's capture counts
them), ANSI colour codes are removed. Written here rather than with :mod:`io`'s line iteration
because a text file's ``readline`` holds a whole line, however long, in memory.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from llm_locust.analysis.server.serverlog.base import MAX_LINE_CHARS, USER_PATTERN_CHARS, LogText

ANSI_BYTES_RE = re.compile(rb"\x1b\[[0-9;]*[A-Za-z]")
"""Terminal colour and cursor codes (SGLang, TGI and llama.cpp colour their logs on a tty)."""

CHUNK_BYTES = 1 << 20
"""Bytes read at a time."""

HEAD_CHARS = 4_000_000
"""Every line of the log's first this many characters is kept (the parsers read startup lines
there)."""


@dataclass(frozen=True, kw_only=True)
class KeepRule:
    """Which lines after the head a parser can use.

    Attributes
    ----------
    literals : tuple of str
        A line holding one of these (case-sensitive) is kept.
    lower_literals : tuple of str
        Lower-case literals looked for in the lower-cased line.
    patterns : tuple of re.Pattern
        A line (its first :data:`USER_PATTERN_CHARS` characters) matching one is kept.
    narrow : callable, optional
        Called once with the head's text when the head is read; returns the rule for the rest
        (e.g. only the literals of the families the head names: fewer searches).
    """

    literals: tuple[str, ...] = ()
    lower_literals: tuple[str, ...] = ()
    patterns: tuple[re.Pattern, ...] = ()
    narrow: Callable[[str], KeepRule] | None = None


def read_log(
    source: BinaryIO | Path | str,
    *,
    name: str = "server.log",
    keep: KeepRule | None = None,
    chunk_bytes: int = CHUNK_BYTES,
    head_chars: int = HEAD_CHARS,
) -> LogText:
    """Read a log file (or a binary stream) in chunks into a :class:`LogText`.

    Parameters
    ----------
    source : binary file object, Path or str
        The log (a path is opened and closed here).
    name : str, default "server.log"
        How the log is cited in reports.
    keep : KeepRule, optional
        Lines to keep after the head; None keeps every line.
    chunk_bytes : int, default :data:`CHUNK_BYTES`
    head_chars : int, default :data:`HEAD_CHARS`

    Returns
    -------
    LogText
        Arrival stamps not set (see :func:`llm_locust.analysis.server.files.read_server_files`).

    Raises
    ------
    OSError
        If the file cannot be read.
    """
    if isinstance(source, (str, Path)):
        with open(source, "rb") as stream:
            return read_log(stream, name=name, keep=keep, chunk_bytes=chunk_bytes, head_chars=head_chars)
    state = _State(keep=keep, head_chars=head_chars)
    carry, skipping = b"", False
    while chunk := source.read(chunk_bytes):
        if skipping:  # the rest of a line already cut: drop it up to its newline
            newline = chunk.find(b"\n")
            if newline < 0:
                continue
            chunk, skipping = chunk[newline + 1 :], False
            state.next_line += 1
        data = carry + chunk if carry else chunk
        end = data.rfind(b"\n")
        if end >= 0:
            state.add_block(data[: end + 1])
            data = data[end + 1 :]
        if len(data) > MAX_LINE_CHARS:  # an over-long line: keep its head, skip the rest
            state.add_block(data[:MAX_LINE_CHARS] + b"\n", cut=True)
            state.next_line -= 1  # it ends at its newline, further on
            carry, skipping = b"", True
        else:
            carry = data
    if skipping:
        state.next_line += 1
    elif carry:  # a last line without its newline
        state.add_block(carry + b"\n")
    return state.log(name)


class _State:
    """Lines kept so far; see :func:`read_log`."""

    def __init__(self, *, keep: KeepRule | None, head_chars: int) -> None:
        self.keep, self.head_chars = keep, head_chars
        self.pieces: list[str] = []
        self.numbers: list[int] = []
        self.over_long: list[int] = []
        self.keyword_lines: list[int] = []
        self.non_utf8 = 0
        self.next_line = 0
        self.chars_seen = 0
        self.last: tuple[int, str] | None = None

    def add_block(self, block: bytes, *, cut: bool = False) -> None:
        """Add the complete lines of ``block`` (bytes ending with ``\\n``)."""
        if b"\r" in block:
            block = block.replace(b"\r", b"")
        if b"\x1b" in block:
            block = ANSI_BYTES_RE.sub(b"", block)
        if self.keep is not None and self.chars_seen >= self.head_chars:
            if self.keep.narrow is not None:
                self.keep = self.keep.narrow("\n".join(self.pieces))
            if not cut and not self.keep.patterns:
                ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)  # every line's "\n"
                if not len(ends) or int(np.diff(ends, prepend=-1).max()) <= MAX_LINE_CHARS:
                    self._add_found(block, ends)
                    return
        self._add_split(self._decode(block, lines=True), cut=cut)

    def _decode(self, data: bytes, *, lines: bool = False) -> str:
        """``data`` as text, bytes that are not UTF-8 replaced (and the lines holding them
        counted: ``data`` is one line unless ``lines``)."""
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode("utf-8", errors="replace")
            self.non_utf8 += sum("\ufffd" in line for line in text.split("\n")) if lines else 1
            return text

    def _add_split(self, text: str, *, cut: bool) -> None:
        """Add a block line by line (the head, user patterns, over-long lines)."""
        lines = text.split("\n")
        lines.pop()  # the empty string after the last newline
        first = self.next_line
        if cut:
            self.over_long.append(first)
        elif len(text) > MAX_LINE_CHARS:
            for k, line in enumerate(lines):
                if len(line) > MAX_LINE_CHARS:
                    lines[k] = line[:MAX_LINE_CHARS]
                    self.over_long.append(first + k)
        chosen, keyword_hits = self._choose(lines)
        for k in chosen:
            self.pieces.append(lines[k])
            self.numbers.append(first + k)
        self.keyword_lines.extend(first + k for k in keyword_hits)
        self.chars_seen += len(text)
        self.next_line += len(lines)
        if lines:
            self.last = (self.next_line - 1, lines[-1])

    def _choose(self, lines: list[str]) -> tuple[Iterable[int], list[int]]:
        """Indices of the lines of a block to keep, in order, and of those holding a lower-case
        literal."""
        if self.keep is None:
            return range(len(lines)), []
        budget, chosen, keyword_hits = self.head_chars - self.chars_seen, set(), []
        for k, line in enumerate(lines):
            if budget <= 0:
                break
            budget -= len(line) + 1
            chosen.add(k)
        words, lower_words = self.keep.literals, self.keep.lower_literals
        for k, line in enumerate(lines):
            low = line.lower() if lower_words else ""
            if any(word in low for word in lower_words):
                keyword_hits.append(k)
                chosen.add(k)
            elif k not in chosen and (
                any(word in line for word in words)
                or any(p.search(line[:USER_PATTERN_CHARS]) for p in self.keep.patterns)
            ):
                chosen.add(k)
        return sorted(chosen), keyword_hits

    def _add_found(self, block: bytes, ends: np.ndarray) -> None:
        """Add the lines of a block (no line over-long; ``ends``: the offset of each line's
        newline) that hold a literal: each block's lines searched at once for every literal
        (:func:`_lines_holding`), then only the lines found are decoded."""
        keep = self.keep
        assert keep is not None
        offsets = np.empty(len(ends) + 1, dtype=np.int64)  # line k: block[offsets[k]:ends[k]]
        offsets[0] = 0
        offsets[1:] = ends + 1
        lines = _binary_lines(block, offsets)
        found = np.zeros(len(ends), dtype=bool)
        keyword = found
        if keep.literals:
            found = _lines_holding(lines, keep.literals, ignore_case=False)
        if keep.lower_literals:
            keyword = _lines_holding(lines, keep.lower_literals, ignore_case=True)
            found = found | keyword
        first = self.next_line
        for k in np.flatnonzero(found).tolist():
            self.pieces.append(self._decode(block[offsets[k] : ends[k]]))
            self.numbers.append(first + k)
            if keyword[k]:
                self.keyword_lines.append(first + k)
        n_lines = len(ends)
        self.chars_seen += len(block)
        self.next_line += n_lines
        if n_lines:
            self.last = (self.next_line - 1, block[offsets[-2] : ends[-1]].decode("utf-8", errors="replace"))

    def log(self, name: str) -> LogText:
        if self.last is not None and (not self.numbers or self.numbers[-1] != self.last[0]):
            self.numbers.append(self.last[0])
            self.pieces.append(self.last[1])
        lengths = np.fromiter((len(p) + 1 for p in self.pieces), dtype=np.int64, count=len(self.pieces))
        starts = (
            np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
            if len(lengths)
            else np.zeros(1, dtype=np.int64)
        )
        dense = len(self.numbers) == self.next_line
        return LogText(
            text="\n".join(self.pieces),
            line_starts=starts,
            name=name,
            numbers=None if dense else np.array(self.numbers, dtype=np.int64),
            total_lines=self.next_line,
            over_long_lines=tuple(self.over_long),
            non_utf8_lines=self.non_utf8,
            keywords=self.keep.lower_literals if self.keep is not None else (),
            keyword_lines=np.array(sorted(set(self.keyword_lines)), dtype=np.int64)
            if self.keep is not None and self.keep.lower_literals
            else None,
        )


_RE2_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")


def _binary_lines(block: bytes, offsets: np.ndarray):
    """The lines of ``block`` as a pyarrow ``large_binary`` array on its bytes (no copy): line
    ``k`` is ``block[offsets[k]:offsets[k + 1]]``, its newline included."""
    import pyarrow as pa

    return pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(block)]
    )


def _lines_holding(lines, words: tuple[str, ...], *, ignore_case: bool) -> np.ndarray:
    """Which of ``lines`` (:func:`_binary_lines`) hold one of ``words``.

    One pass of RE2 over a block's lines for all the words at once (pyarrow's
    ``match_substring_regex``), where ``bytes.find`` took one pass per word (31 error keywords:
    1.8 s of a 24-hour log's 2.4 s read). ``ignore_case`` matches ASCII letters in either case
    (RE2's case folding, which also folds a few non-ASCII letters: a line found that way only
    goes on to the real patterns).

    Returns
    -------
    numpy.ndarray
        bool, one per line.
    """
    import pyarrow.compute as pc

    pattern = "|".join(_RE2_SPECIAL.sub(r"\\\1", word) for word in words)
    return pc.match_substring_regex(lines, pattern=pattern, ignore_case=ignore_case).to_numpy(zero_copy_only=False)
