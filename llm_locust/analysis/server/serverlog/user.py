"""The user-regex parser (family ``generic``): any server, through a user format file.

Every ``[[log.series]]`` pattern is searched in each line (``re.search``); its named groups give
the series columns (``running``, ``waiting``, ``kv_usage_ratio`` or ``kv_usage_percent``,
``gen_tps``, ``prompt_tps``, ``preemptions_per_s``) and, optionally, ``ts`` the line's stamp.
Otherwise the stamp comes from ``[log] timestamp`` (a regex with a ``ts`` group, matched at the
line start) read by ``timestamp_format``: ``iso`` (with or without date and zone: ``MM-DD
HH:MM:SS`` takes its year from the run), ``epoch``, ``epoch_ms``, or a ``strptime`` format.
Lines are samples: each holds until the next, at most ``max_hold_s`` (default: three times the
median gap between lines). See :mod:`llm_locust.analysis.server.userformat` for the file.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re

import numpy as np

from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.server.families import ServerFamily
from llm_locust.analysis.server.serverlog.base import (
    USER_PATTERN_CHARS,
    LogClock,
    LogText,
    ServerLogResult,
    hold_limit_s,
    keyed_series,
)
from llm_locust.analysis.server.serverlog.clock import parse_tz, place_with_date, place_without_year, resolve
from llm_locust.analysis.server.userformat import CONFIG_GROUPS, UserFormat

_MONTH_DAY_RE = re.compile(r"^\d\d-\d\d \d\d:\d\d:\d\d")


def _clock(clock: LogClock, fmt: UserFormat) -> LogClock:
    return dataclasses.replace(clock, tz=fmt.timezone) if fmt.timezone else clock


def stamps_to_s(stamps: list[str], fmt: UserFormat, clock: LogClock) -> np.ndarray:
    """Unix s of the ``ts`` texts under the format's ``timestamp_format``."""
    out = np.full(len(stamps), np.nan)
    if not stamps:
        return out
    kind = fmt.timestamp_format
    if kind in ("epoch", "epoch_ms"):
        scale = 1e-3 if kind == "epoch_ms" else 1.0
        for k, text in enumerate(stamps):
            try:
                out[k] = float(text) * scale
            except ValueError:
                pass
        return out
    if kind == "iso":
        md = [k for k, s in enumerate(stamps) if _MONTH_DAY_RE.match(s)]
        full = [k for k in range(len(stamps)) if k not in set(md)]
        if md:
            out[md] = place_without_year([stamps[k] for k in md], clock)
        if full:
            out[full] = place_with_date([stamps[k] for k in full], clock)
        return out
    tz = parse_tz(clock.tz)
    for k, text in enumerate(stamps):
        try:
            when = dt.datetime.strptime(text, kind)
        except ValueError:
            continue
        out[k] = (when if when.tzinfo else when.replace(tzinfo=tz)).timestamp()
    return out


def own_times(
    log: LogText, lines: np.ndarray, clock: LogClock, fmt: UserFormat, inline: dict[int, str] | None = None
) -> np.ndarray:
    """Unix s from each line's stamp (a series pattern's ``ts`` group, else ``[log] timestamp``)."""
    texts, where = [], []
    for k, number in enumerate(lines):
        stamp = (inline or {}).get(int(number))
        if stamp is None and fmt.timestamp is not None:
            match = fmt.timestamp.match(log.line(int(number))[:USER_PATTERN_CHARS])
            stamp = match.group("ts") if match else None
        if stamp is not None:
            texts.append(stamp)
            where.append(k)
    out = np.full(len(lines), np.nan)
    if texts:
        out[np.array(where, int)] = stamps_to_s(texts, fmt, _clock(clock, fmt))
    return out


def place(log: LogText, lines: np.ndarray, clock: LogClock, fmt: UserFormat) -> np.ndarray:
    """Unix s of arbitrary lines under the clock's policy."""
    return resolve(own_times(log, lines, clock, fmt), lines, log, clock)[0]


def parse(log: LogText, clock: LogClock, fmt: UserFormat) -> ServerLogResult:
    """Series patterns -> samples -> normalised series; config patterns -> ServerConfig."""
    hits: dict[int, dict[str, str]] = {}
    for number, text in zip(log.kept_lines().tolist(), log.kept_texts()):
        text = text[:USER_PATTERN_CHARS]
        for regex in fmt.series_patterns:
            match = regex.search(text)
            if match:
                hits.setdefault(number, {}).update({k: v for k, v in match.groupdict().items() if v is not None})
    numbers = np.array(sorted(hits), dtype=np.int64)
    inline = {n: hits[n]["ts"] for n in hits if "ts" in hits[n]}
    times, how = resolve(own_times(log, numbers, clock, fmt, inline), numbers, log, clock)
    columns = {}
    for name in ("running", "waiting", "kv_usage_ratio", "gen_tps", "prompt_tps", "preemptions_per_s"):
        values = [_float(hits[n].get(name)) for n in numbers]
        if name == "kv_usage_ratio":
            pct = [_float(hits[n].get("kv_usage_percent")) / 100.0 for n in numbers]
            values = [v if np.isfinite(v) else p for v, p in zip(values, pct)]
        columns[name] = np.array(values, float)
    columns = {c: v for c, v in columns.items() if np.isfinite(v).any()}
    hold = fmt.max_hold_s if fmt.max_hold_s is not None else hold_limit_s(times)
    series = keyed_series(times, np.zeros(len(numbers)), columns, max_hold_s=hold)
    return ServerLogResult(
        family=ServerFamily.GENERIC,
        series=series,
        config=config(log, fmt),
        data_lines=len(numbers),
        unplaced_lines=tuple(int(n) + 1 for n in numbers[~np.isfinite(times)]),
        time_source=how,
        notes=(f"read with the user format {fmt.source} ({fmt.name})",),
    )


def format_check(log: LogText, fmt: UserFormat) -> tuple[str, ...]:
    """The format file checked against the log: how many lines each of its patterns matched.

    Every pattern of each table (``[[log.series]]``, ``[[log.batches]]``, ``[[log.config]]``,
    ``[[log.errors]]``) is searched in every kept line's first ``USER_PATTERN_CHARS``
    characters, as the parsers search them; a line counts once per pattern it matches.

    Returns
    -------
    tuple of str
        ``"<file>: lines of <log> matched per pattern: [[log.series]] #1 40; [[log.errors]] #1 0
        (queue_full)"`` (tables in that order, only those the file has; an error pattern's kind in
        brackets), then ``"warning: ..."`` for each series, batch or config pattern that matched
        no line (a pattern written for other lines, or quoted so that TOML changed it). An error
        pattern that matched nothing gets no warning: a run without that failure is the usual
        case. Empty when the file has no log pattern.
    """
    tables: list[tuple[str, list[tuple[re.Pattern, str]]]] = [
        ("[[log.series]]", [(regex, "") for regex in fmt.series_patterns]),
        ("[[log.batches]]", [(regex, "") for regex in fmt.batch_patterns]),
        ("[[log.config]]", [(pattern.regex, "") for pattern in fmt.config_patterns]),
        ("[[log.errors]]", [(re.compile(pattern), kind) for kind, pattern in fmt.error_patterns]),
    ]
    tables = [(name, patterns) for name, patterns in tables if patterns]
    if not tables:
        return ()
    regexes = [regex for _, patterns in tables for regex, _ in patterns]
    counts = [0] * len(regexes)
    for text in log.kept_texts():
        text = text[:USER_PATTERN_CHARS]
        for k, regex in enumerate(regexes):
            if regex.search(text):
                counts[k] += 1
    parts, warnings, k = [], [], 0
    for name, patterns in tables:
        items = []
        for number, (regex, kind) in enumerate(patterns, start=1):
            items.append(f"#{number} {counts[k]}" + (f" ({kind})" if kind else ""))
            if counts[k] == 0 and name != "[[log.errors]]":
                warnings.append(
                    f"warning: {fmt.source} {name} #{number} matched no line of {log.name} ({regex.pattern!r})"
                )
            k += 1
        parts.append(f"{name} {', '.join(items)}")
    return (f"{fmt.source}: lines of {log.name} matched per pattern: {'; '.join(parts)}", *warnings)


def _float(text: str | None) -> float:
    try:
        return float(text) if text is not None else np.nan
    except ValueError:
        return np.nan


def _first_match(log: LogText, regex: re.Pattern) -> tuple[re.Match | None, int]:
    """The first kept line ``regex`` matches (its first ``USER_PATTERN_CHARS`` characters)."""
    for number, text in zip(log.kept_lines().tolist(), log.kept_texts()):
        match = regex.search(text[:USER_PATTERN_CHARS])
        if match:
            return match, number
    return None, -1


def _config_value(kind: type, text: str | None):
    """A config group's text as ``kind``; None when it is not one (``"abc"`` for an int)."""
    if text is None:
        return None
    if kind is bool:
        return text.strip().lower() in ("1", "true", "yes", "on")
    if kind is str:
        return text
    number = _float(text)
    if not np.isfinite(number):
        return None
    return int(number) if kind is int else kind(number)


def config(log: LogText, fmt: UserFormat) -> ServerConfig:
    """The first match of each ``[[log.config]]`` group; the format's name is the engine's
    unless the file reads no server data (a gateway's error log: nginx is not the engine)."""
    out = ServerConfig(engine=fmt.name if fmt.series_patterns or fmt.config_patterns or fmt.batch_patterns else None)
    for pattern in fmt.config_patterns:
        match, number = _first_match(log, pattern.regex)
        if not match:
            continue
        src = f"{log.name} line {number + 1}"
        for name, text in match.groupdict().items():
            value = _config_value(CONFIG_GROUPS[name], text)
            if value is None:
                continue
            extra = {f"{name}_name": pattern.names[f"{name}_name"]} if f"{name}_name" in pattern.names else {}
            out = out.with_value(name, value, src, **extra)
    return out
