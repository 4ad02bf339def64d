"""Error lines of a server log, counted by kind.

Kinds (:data:`ERROR_KINDS`): ``out_of_memory``, ``queue_full``, ``connection_reset``,
``timeout``, ``rejected``, ``dropped``. Each has a pattern (:data:`DEFAULT_PATTERNS`); a user
format file adds its own patterns, tried first and free to name new kinds. A line counts once,
under the first pattern it matches. The log is searched for the built-in patterns' keywords
(:data:`KEYWORDS`, a fast literal search) and for each user pattern; only the lines found are
matched against the patterns, so a day of log costs a few passes at memory speed.
"""

from __future__ import annotations

import re
import urllib.parse

import numpy as np
import pandas as pd

from llm_locust.analysis.server.serverlog.base import USER_PATTERN_CHARS, LogText

ERROR_KINDS: tuple[str, ...] = ("out_of_memory", "queue_full", "connection_reset", "timeout", "rejected", "dropped")
"""Built-in kinds, in matching order."""

DEFAULT_PATTERNS: tuple[tuple[str, str], ...] = (
    ("out_of_memory", r"(?i:out of memory|OutOfMemoryError|\bOOM\b|failed to allocate)"),
    (
        "queue_full",
        r"(?i:queue (?:is )?full|too many (?:pending|waiting|queued) requests"
        r"|model is overloaded|server (?:is )?overloaded)",
    ),
    (
        "connection_reset",
        r"(?i:connection reset|ConnectionResetError|broken pipe|ECONNRESET"
        r"|connection closed by peer)",
    ),
    ("timeout", r"(?i:\btimed? ?out\b(?![=:])|TimeoutError|deadline exceeded)"),
    ("rejected", r"(?i:\brejected\b|\brejecting\b|too many requests)|\" (?:429|503) "),
    (
        "dropped",
        r"(?i:\bdropped\b|\bdropping\b|client disconnected|\baborted request\b"
        r"|\bcancel(?:l?ed)? (?:request|task)\b)",
    ),
)
"""(kind, regex) pairs, in matching order (the first that matches a line decides its kind).

Examples they match: ``torch.OutOfMemoryError: CUDA out of memory`` (out_of_memory), TGI's
``Model is overloaded`` (queue_full), an access line ``"POST /v1/chat/completions HTTP/1.1" 429``
(rejected), vLLM's ``Aborted request chatcmpl-…`` and llama.cpp's ``stop: cancel task``
(dropped)."""


KEYWORDS: dict[str, tuple[str, ...]] = {
    "out_of_memory": ("out of memory", "outofmemory", "oom", "failed to allocate"),
    "queue_full": (
        "queue full",
        "queue is full",
        "too many pending",
        "too many waiting",
        "too many queued",
        "overloaded",
    ),
    "connection_reset": ("connection reset", "connectionreset", "broken pipe", "econnreset", "closed by peer"),
    "timeout": ("timed out", "timeout", "time out", "timedout", "deadline exceeded"),
    "rejected": ("reject", "too many requests", '" 429 ', '" 503 '),
    "dropped": ("dropp", "client disconnected", "aborted request", "cancel"),
}
"""Lower-case literals, one of which every match of a built-in pattern contains: the whole log
is searched for these (fast literal search), and only the lines found are tried against the
patterns."""


def compile_patterns(patterns: tuple[tuple[str, str], ...]) -> list[tuple[str, re.Pattern]]:
    """``(kind, compiled regex)`` pairs.

    Raises
    ------
    re.error
        If a pattern is not a valid regular expression.
    """
    return [(kind, re.compile(pattern)) for kind, pattern in patterns]


def _candidate_lines(log: LogText, user: list[tuple[str, re.Pattern]]) -> set[int]:
    """Lines that may match: those holding a built-in keyword, or matching a user pattern."""
    text, found = log.text, set()
    keywords = {k for words in KEYWORDS.values() for k in words}
    lower = ""
    if log.keyword_lines is not None and keywords <= set(log.keywords):  # the reader found them
        found = set(log.keyword_lines.tolist())
        keywords = set()
    elif len(lower := text.lower()) != len(text):  # a character whose lower case changes length: line by line
        lowered = zip(log.kept_lines().tolist(), (line.lower() for line in log.kept_texts()))
        found = {number for number, low in lowered if any(k in low for k in keywords)}
        keywords = set()
    for keyword in keywords:
        pos = lower.find(keyword)
        while pos >= 0:
            found.add(int(log.line_no(pos)))
            end = text.find("\n", pos)
            if end < 0:
                break
            pos = lower.find(keyword, end + 1)
    if user:
        for number, line in zip(log.kept_lines().tolist(), log.kept_texts()):
            line = line[:USER_PATTERN_CHARS]
            if any(regex.search(line) for _, regex in user):
                found.add(number)
    return found


def scan_errors(
    log: LogText, *, extra: tuple[tuple[str, str], ...] = (), settings: tuple[str, ...] = ()
) -> pd.DataFrame:
    """Error lines of ``log`` by kind (``t_s`` left NaN: the family's parser places them).

    Parameters
    ----------
    log : LogText
    extra : tuple of (kind, regex)
        User patterns, tried before the built-in ones.
    settings : tuple of str, optional
        The setting each of ``extra`` names, in its order (""; a format file's ``[[log.errors]]
        setting``, :attr:`~llm_locust.analysis.server.userformat.UserFormat.error_pattern_settings`).

    Returns
    -------
    pandas.DataFrame
        Columns ``t_s`` (float64), ``line`` (int64, 1-based), ``kind`` (str), ``path`` (str: the
        request path a user pattern's ``path`` group read, "" otherwise), ``setting`` (str: the
        setting of the user pattern that matched, "" otherwise), ``text`` (the line, at most 200
        characters).
    """
    user = compile_patterns(tuple(extra))
    named = tuple(settings) + ("",) * (len(user) - len(settings))
    builtin = compile_patterns(DEFAULT_PATTERNS)
    rows: dict[int, tuple[str, str, str]] = {}
    for number in sorted(_candidate_lines(log, user)):
        line = log.line(number)
        head = line[:USER_PATTERN_CHARS]  # all a user pattern sees (bounds a slow one)
        found = next(
            ((kind, match, named[i]) for i, (kind, regex) in enumerate(user) if (match := regex.search(head))), None
        )
        if found is not None:
            path = found[1].groupdict().get("path") or ""
            rows[number] = (found[0], path, found[2])
            continue
        kind = next((kind for kind, regex in builtin if regex.search(line)), None)
        if kind is not None:
            rows[number] = (kind, "", "")
    numbers = np.array(sorted(rows), dtype=np.int64)
    return pd.DataFrame(
        {
            "t_s": np.full(len(numbers), np.nan),
            "line": numbers + 1,
            "kind": [rows[n][0] for n in numbers],
            "path": [rows[n][1] for n in numbers],
            "setting": [rows[n][2] for n in numbers],
            "text": [log.line(int(n))[:200] for n in numbers],
        }
    ).astype({"t_s": "float64", "line": "int64", "kind": str, "path": str, "setting": str, "text": str})


def scraper_lines(errors: pd.DataFrame, scraped_urls) -> pd.Series:
    """Which error lines are the scraper's own requests: their ``path`` is the path of one of
    ``scraped_urls`` (a gateway in front of the server refuses or times out the scraper's
    ``GET /metrics`` like a user's request). Lines without a path are never the scraper's.

    Returns
    -------
    pandas.Series
        bool, same index as ``errors``.

    >>> frame = pd.DataFrame({"path": ["/metrics", "/v1/chat/completions", ""]})
    >>> scraper_lines(frame, ["http://127.0.0.1:8080/metrics"]).tolist()
    [True, False, False]
    """
    paths = {urllib.parse.urlsplit(str(url)).path or "/" for url in scraped_urls}
    column = errors["path"] if "path" in errors.columns else pd.Series("", index=errors.index)
    return (column.astype(str).isin(paths) & (column.astype(str) != "")).astype(bool)


def count_by_kind(errors: pd.DataFrame) -> dict[str, int]:
    """``{kind: lines}`` in :data:`ERROR_KINDS` order, then user kinds alphabetically."""
    counts = errors["kind"].value_counts().to_dict()
    order = [k for k in ERROR_KINDS if k in counts] + sorted(set(counts) - set(ERROR_KINDS))
    return {kind: int(counts[kind]) for kind in order}
