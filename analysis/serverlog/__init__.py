"""Server logs -> the normalised server series, the startup config and error lines by kind.

One parser per family (``vllm``, ``sglang``, ``tgi``, ``llamacpp``) and a user-regex parser
(``generic``, :mod:`analysis.serverlog.user`); all return a :class:`ServerLogResult` with the
same series columns as :mod:`analysis.prometheus`. Each family module offers
``parse(log, clock)`` and ``place(log, lines, clock)``, and names the source file and version
its formats are copied from. Entry point: :func:`parse_server_log`.
"""

from __future__ import annotations

import dataclasses
from types import ModuleType

from analysis.families import ServerFamily, parse_family
from analysis.serverlog import llamacpp, sglang, tgi, user, vllm
from analysis.serverlog.base import LogClock, LogText, ServerLogResult, TimeSource
from analysis.serverlog.errors import ERROR_KINDS, count_by_kind, scan_errors
from analysis.userformat import UserFormat

PARSERS: dict[ServerFamily, ModuleType] = {
    ServerFamily.VLLM: vllm, ServerFamily.SGLANG: sglang, ServerFamily.TGI: tgi,
    ServerFamily.LLAMACPP: llamacpp,
}
"""Built-in log parser per family (explicit map)."""

__all__ = ["ERROR_KINDS", "PARSERS", "LogClock", "LogText", "ServerLogResult", "TimeSource",
           "count_by_kind", "detect_log_family", "parse_server_log"]


def detect_log_family(log: LogText) -> ServerFamily | None:
    """The family whose marker strings occur most in the first 2 MB of the log, or None."""
    head = log.text[:2_000_000]
    scores = {family: sum(head.count(marker) for marker in module.MARKERS)
              for family, module in PARSERS.items()}
    best = max(scores, key=scores.get)
    return best if scores[best] > 0 else None


def parse_server_log(log: LogText, *, clock: LogClock | None = None,
                     family: ServerFamily | str | None = None,
                     user_format: UserFormat | None = None) -> ServerLogResult:
    """Parse a server log.

    Parameters
    ----------
    log : LogText
        The log and, when it was captured during a run, its arrival stamps.
    clock : LogClock, optional
        Year reference, time zone and time-source policy (default: UTC, no reference, auto).
    family : ServerFamily or str, optional
        Parser to use; default: the user format's when it has log patterns, else detected.
    user_format : UserFormat, optional
        A user format file: its log patterns (family ``generic``) and its error patterns (added
        for every family).

    Returns
    -------
    ServerLogResult
        With ``errors`` filled; ``family`` None (and only errors) when no parser fits.

    Raises
    ------
    ValueError
        If ``family`` is unknown, or ``generic`` without a user format with log patterns.
    """
    clock = clock or LogClock()
    family = parse_family(family)
    if family is None:
        if user_format is not None and user_format.series_patterns:
            family = ServerFamily.GENERIC
        else:
            family = detect_log_family(log)
    extra = user_format.error_patterns if user_format is not None else ()
    errors = scan_errors(log, extra=extra)
    if family is None:
        return ServerLogResult(family=None, errors=errors, notes=(
            "no log parser recognised this log: name the engine (--server-family) or give a "
            "format file (--server-log-format)",))
    if family is ServerFamily.GENERIC:
        if user_format is None or not user_format.series_patterns:
            raise ValueError("family 'generic' needs a user format file with [[log.series]] "
                             "patterns")
        module_parse = lambda lg, ck: user.parse(lg, ck, user_format)  # noqa: E731
        module_place = lambda lg, ln, ck: user.place(lg, ln, ck, user_format)  # noqa: E731
    elif family in PARSERS:
        module_parse, module_place = PARSERS[family].parse, PARSERS[family].place
    else:
        raise ValueError(f"no log parser for family {family.value!r}; known: "
                         f"{[f.value for f in PARSERS] + ['generic']}")
    result = module_parse(log, clock)
    if len(errors):
        errors = errors.assign(t_s=module_place(log, errors["line"].to_numpy() - 1, clock))
    notes = list(result.notes)
    if result.unplaced_lines:
        first = ", ".join(map(str, result.unplaced_lines[:5]))
        notes.append(f"{len(result.unplaced_lines)} data line(s) could not be placed in time "
                     f"and were left out (first: line {first})")
    return dataclasses.replace(result, errors=errors, notes=tuple(notes))


def lines_placed_fraction(result: ServerLogResult) -> float:
    """Share of data lines placed in time (1.0 when there were none)."""
    if result.data_lines == 0:
        return 1.0
    return 1.0 - len(result.unplaced_lines) / result.data_lines


def errors_in_window(result: ServerLogResult, start_s: float, end_s: float) -> dict[str, int]:
    """Error lines by kind placed in ``[start_s, end_s)``."""
    errors = result.errors
    inside = errors[(errors["t_s"] >= start_s) & (errors["t_s"] < end_s)]
    return count_by_kind(inside) if len(inside) else {}

