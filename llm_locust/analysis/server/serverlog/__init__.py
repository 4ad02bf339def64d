"""Server logs -> the normalised server series, the startup config and error lines by kind.

One parser per family (``vllm``, ``sglang``, ``tgi``, ``llamacpp``) and a user-regex parser
(``generic``, :mod:`llm_locust.analysis.server.serverlog.user`); all return a :class:`ServerLogResult` with the
same series columns as :mod:`llm_locust.analysis.server.prometheus`. Each family module is a
:class:`LogParser` (``MARKERS``, ``KEEP``, ``parse(log, clock)``, ``place(log, lines, clock)``) and names
the source file and version its formats are copied from; a user format file becomes one through
:class:`UserLogParser`. Entry point: :func:`parse_server_log`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Protocol

import numpy as np

from llm_locust.analysis.server.families import ServerFamily, parse_family
from llm_locust.analysis.server.serverlog import llamacpp, sglang, tgi, user, vllm
from llm_locust.analysis.server.serverlog.base import (
    MAX_LINE_CHARS,
    LogClock,
    LogText,
    ServerLogResult,
    TimeSource,
)
from llm_locust.analysis.server.serverlog.errors import ERROR_KINDS, KEYWORDS, count_by_kind, scan_errors
from llm_locust.analysis.server.serverlog.reader import KeepRule, read_log
from llm_locust.analysis.server.userformat import UserFormat


class LogParser(Protocol):
    """One log format (a family module such as :mod:`llm_locust.analysis.server.serverlog.vllm`, or a
    :class:`UserLogParser`)."""

    @property
    def MARKERS(self) -> tuple[str, ...]:  # read-only: a module constant or a frozen field
        """Strings typical of this format's lines (:func:`detect_log_family` counts them)."""
        ...

    @property
    def KEEP(self) -> tuple[str, ...]:
        """Literals of its data lines: past the log's head only lines holding one are kept
        (:func:`keep_rule`)."""
        ...

    def parse(self, log: LogText, clock: LogClock) -> ServerLogResult:
        """The whole log: series, startup configuration, notes, unplaced data lines."""
        ...

    def place(self, log: LogText, lines: np.ndarray, clock: LogClock) -> np.ndarray:
        """Wall clock (Unix s, NaN when unknown) of the given 0-based line indices."""
        ...


@dataclasses.dataclass(frozen=True)
class UserLogParser:
    """The :class:`LogParser` of a user format file's ``[[log.series]]`` patterns
    (:mod:`llm_locust.analysis.server.serverlog.user`)."""

    fmt: UserFormat
    MARKERS: tuple[str, ...] = ()
    KEEP: tuple[str, ...] = ()  # its patterns are kept by keep_rule(user_format)

    def parse(self, log: LogText, clock: LogClock) -> ServerLogResult:
        return user.parse(log, clock, self.fmt)

    def place(self, log: LogText, lines: np.ndarray, clock: LogClock) -> np.ndarray:
        return user.place(log, lines, clock, self.fmt)


PARSERS: dict[ServerFamily, LogParser] = {
    ServerFamily.VLLM: vllm,
    ServerFamily.SGLANG: sglang,
    ServerFamily.TGI: tgi,
    ServerFamily.LLAMACPP: llamacpp,
}
"""Built-in log parser per family (explicit map); ``generic`` is a :class:`UserLogParser`."""

__all__ = [
    "ERROR_KINDS",
    "PARSERS",
    "KeepRule",
    "LogClock",
    "LogParser",
    "LogText",
    "ServerLogResult",
    "TimeSource",
    "UserLogParser",
    "count_by_kind",
    "detect_log_family",
    "keep_rule",
    "parse_server_log",
    "read_log",
]


def keep_rule(user_format: UserFormat | None = None) -> KeepRule:
    """The lines any parser can use beyond the log's head: the error keywords, the user
    format's patterns, and the data-line literals (``KEEP``) of every family whose markers occur
    in the head (of every family when none does)."""
    lower = tuple(dict.fromkeys(word for words in KEYWORDS.values() for word in words))
    patterns: tuple = ()
    if user_format is not None:
        patterns = (
            *user_format.series_patterns,
            *user_format.batch_patterns,
            *(c.regex for c in user_format.config_patterns),
            *(re.compile(pattern) for _, pattern in user_format.error_patterns),
        )

    def literals(parsers) -> tuple[str, ...]:
        return tuple(dict.fromkeys(word for parser in parsers for word in parser.KEEP))

    def narrow(head: str) -> KeepRule:
        named = [p for p in PARSERS.values() if any(marker in head for marker in p.MARKERS)]
        return KeepRule(literals=literals(named or PARSERS.values()), lower_literals=lower, patterns=patterns)

    return KeepRule(literals=literals(PARSERS.values()), lower_literals=lower, patterns=patterns, narrow=narrow)


def detect_log_family(log: LogText) -> ServerFamily | None:
    """The family whose marker strings occur most in the first 2 MB of the log, or None."""
    head = log.text[:2_000_000]
    scores = {family: sum(head.count(marker) for marker in parser.MARKERS) for family, parser in PARSERS.items()}
    best = max(scores, key=scores.__getitem__)
    return best if scores[best] > 0 else None


def parse_server_log(
    log: LogText,
    *,
    clock: LogClock | None = None,
    family: ServerFamily | str | None = None,
    user_format: UserFormat | None = None,
) -> ServerLogResult:
    """Parse a server log.

    Parameters
    ----------
    log : LogText
        The log and, when it was captured during a run, its arrival stamps.
    clock : LogClock, optional
        Year reference, time zone and time-source policy (default: UTC, no reference, auto).
    family : ServerFamily or str, optional
        Parser to use; default: the user format's when it has series patterns, else detected,
        else the user format's when it stamps its lines (``[log] timestamp``: a log of error
        lines only, such as a gateway's).
    user_format : UserFormat, optional
        A user format file: its log patterns (family ``generic``) and its error patterns (added
        for every family).

    Returns
    -------
    ServerLogResult
        With ``errors`` filled, and ``format_check`` with a user format; ``family`` None (and
        only errors) when no parser fits.

    Raises
    ------
    ValueError
        If ``family`` is unknown, or ``generic`` without a user format with log patterns.
    """
    clock = clock or LogClock()
    family = parse_family(family)
    if family is None:
        if user_format is not None and user_format.has_log_patterns:
            family = ServerFamily.GENERIC
        else:
            family = detect_log_family(log)
    if family is None and user_format is not None and user_format.timestamp is not None:
        family = ServerFamily.GENERIC  # a log of stamped error lines only (a gateway's: nginx-error)
    extra = user_format.error_patterns if user_format is not None else ()
    settings = user_format.error_pattern_settings if user_format is not None else ()
    errors = scan_errors(log, extra=extra, settings=settings)
    checked = user.format_check(log, user_format) if user_format is not None else ()
    if family is None:
        return ServerLogResult(
            family=None,
            errors=errors,
            format_check=checked,
            notes=(
                "no log parser recognised this log: name the engine (--server-family) or give a "
                "format file (--server-log-format)"
                if user_format is None
                else f"no log parser recognised this log, and the format file {user_format.source} has no "
                "[[log.series]], [[log.batches]] or [[log.config]] pattern for it",
                *input_notes(log),
            ),
        )
    if family is ServerFamily.GENERIC:
        if user_format is None or not (user_format.has_log_patterns or user_format.timestamp is not None):
            raise ValueError(
                "family 'generic' needs a user format file with [[log.series]], [[log.batches]] or "
                "[[log.config]], or a [log] timestamp (a log of error lines only)"
            )
        parser: LogParser = UserLogParser(user_format)
    elif family in PARSERS:
        parser = PARSERS[family]
    else:
        raise ValueError(
            f"no log parser for family {family.value!r}; known: {[f.value for f in PARSERS] + ['generic']}"
        )
    result = parser.parse(log, clock)
    if len(errors):
        errors = errors.assign(t_s=parser.place(log, errors["line"].to_numpy() - 1, clock))
    notes = list(result.notes) + input_notes(log)
    if result.unplaced_lines:
        first = ", ".join(map(str, result.unplaced_lines[:5]))
        notes.append(
            f"{len(result.unplaced_lines)} data line(s) could not be placed in time "
            f"and were left out (first: line {first})"
        )
    return dataclasses.replace(result, errors=errors, notes=tuple(notes), format_check=checked)


def input_notes(log: LogText) -> list[str]:
    """What reading the log cut or replaced, in words (over-long lines, bytes not UTF-8)."""
    notes = []
    if log.over_long_lines:
        first = ", ".join(str(n + 1) for n in log.over_long_lines[:5])
        notes.append(
            f"{len(log.over_long_lines)} over-long line(s) cut to their first "
            f"{MAX_LINE_CHARS:,} characters (first: line {first})"
        )
    if log.non_utf8_lines:
        notes.append(f"{log.non_utf8_lines} line(s) read with bytes that are not UTF-8 (replaced)")
    return notes
