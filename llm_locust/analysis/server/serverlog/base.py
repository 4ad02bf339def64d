"""What every log parser shares: the indexed log text, its clock, and the result type.

A log is handled as one string (ANSI colour codes removed) plus the offset of each line, so
parsers find their lines with fast whole-text searches (a literal anchor, then one regex on
the line) instead of a Python loop over every line. Every line is cut to
:data:`MAX_LINE_CHARS` characters, so the work of any regex on a line is bounded; the built-in
patterns are also written to run in time linear in the line (a literal anchor or a fixed-width
look-behind before any repeated class: no nested or adjacent unbounded repeats).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import io
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.server.families import ServerFamily
from llm_locust.analysis.server.series import empty_series, hold_limit_s  # noqa: F401 (parsers import it from here)

MAX_LINE_CHARS = 65_536
"""A line is cut to its first this many characters (the longest real line, vLLM's engine
config, is about 10,000); the cut lines are counted (:attr:`LogText.over_long_lines`) and
reported."""

USER_PATTERN_CHARS = 8_192
"""A user pattern (format file) sees at most the first this many characters of a line, which
bounds the time a slow pattern can take per line (see :mod:`llm_locust.analysis.server.userformat`)."""


class TimeSource(str, enum.Enum):
    """Which clock places a log line in time.

    ``AUTO``: the arrival stamp taken when the line was captured during the run (same clock as
    the requests) when there is one, else the line's own stamp - except where the own stamp is
    exact (TGI's UTC microsecond stamps; llama.cpp's time since start, anchored on the arrival
    stamps), which comes first. ``ARRIVAL``: arrival stamps only. ``LINE``: own stamps only.
    """

    AUTO = "auto"
    ARRIVAL = "arrival"
    LINE = "line"


@dataclass(frozen=True, kw_only=True)
class LogClock:
    """How to turn a line's own stamp into Unix seconds.

    Attributes
    ----------
    reference_s : float or None
        A wall-clock instant near the log (the run start, Unix s): stamps without a year take
        the year that puts them nearest to it (so a run over New Year reads "12-31" and "01-01"
        right). None: such stamps cannot be placed.
    tz : str
        Time zone of stamps that carry none (vLLM, SGLang): ``"UTC"``, ``"+05:30"``, an IANA
        name (``"Europe/Paris"``) or ``"local"`` (this machine's).
    time_source : TimeSource
    """

    reference_s: float | None = None
    tz: str = "UTC"
    time_source: TimeSource = TimeSource.AUTO


@dataclass(frozen=True)
class LogText:
    """A server log, indexed by line; every line cut to :data:`MAX_LINE_CHARS`.

    Built by :func:`llm_locust.analysis.server.serverlog.reader.read_log` from a file (streamed: only the
    lines a parser can use are kept, see there) or by :meth:`from_text` from a string (every
    line kept). Line numbers are always those of the file (0-based).

    Attributes
    ----------
    text : str
        The kept lines, ANSI codes removed, joined by newlines.
    line_starts : numpy.ndarray
        Offset of each kept line's first character in ``text`` (int64).
    arrival_s : numpy.ndarray or None
        Per kept line, the wall clock (Unix s) when it was captured during the run; NaN for lines
        already in the file when capture started (``backlog``) or never stamped.
    name : str
        How the log is cited in reports (``server.log``).
    numbers : numpy.ndarray or None
        File line number of each kept line (int64, increasing); None when every line is kept.
    total_lines : int or None
        Lines in the file (None: ``len(line_starts)``).
    over_long_lines : tuple of int
        0-based numbers of the lines longer than :data:`MAX_LINE_CHARS` (their first
        ``MAX_LINE_CHARS`` characters are kept, the rest is never read into memory).
    non_utf8_lines : int
        Kept lines holding bytes that are not UTF-8 (each replaced by U+FFFD); lines skipped
        after the head are not decoded, so not counted.
    capture_end_s : float or None
        The last arrival stamp of the whole log (None: the last of ``arrival_s``).
    keywords : tuple of str
        Lower-case literals the reader looked for in every line (the error keywords).
    keyword_lines : numpy.ndarray or None
        File line numbers (int64) of the lines holding one of ``keywords`` (lower-cased); None
        when the reader looked for none (then a parser searches ``text`` itself).
    """

    text: str
    line_starts: np.ndarray
    arrival_s: np.ndarray | None = None
    name: str = "server.log"
    numbers: np.ndarray | None = None
    total_lines: int | None = None
    over_long_lines: tuple[int, ...] = ()
    non_utf8_lines: int = 0
    capture_end_s: float | None = None
    keywords: tuple[str, ...] = ()
    keyword_lines: np.ndarray | None = None

    @classmethod
    def from_text(cls, text: str, *, arrival_s: np.ndarray | None = None, name: str = "server.log") -> LogText:
        """Index ``text`` (every line kept, each cut to :data:`MAX_LINE_CHARS`); ``arrival_s``
        (one value per line, NaN = none) is kept as given.

        Raises
        ------
        ValueError
            If ``arrival_s`` does not have one value per line.
        """
        from llm_locust.analysis.server.serverlog.reader import read_log  # it builds LogTexts: import here

        log = read_log(io.BytesIO(text.encode("utf-8", errors="surrogatepass")), name=name)
        if arrival_s is not None:
            arrival_s = np.asarray(arrival_s, float)
            if len(arrival_s) != log.n_lines:
                raise ValueError(f"{name}: {len(arrival_s)} arrival stamps for {log.n_lines} lines")
            log = dataclasses.replace(log, arrival_s=arrival_s)
        return log

    @property
    def n_lines(self) -> int:
        """Number of lines of the file."""
        if self.total_lines is not None:
            return self.total_lines
        return len(self.line_starts) if self.text else 0

    def kept_lines(self) -> np.ndarray:
        """File line numbers of the kept lines (int64, increasing)."""
        if self.numbers is not None:
            return self.numbers
        return np.arange(len(self.line_starts) if self.text else 0, dtype=np.int64)

    def _index(self, lines) -> np.ndarray:
        """Index into the kept lines of each file line number; -1 where it was not kept."""
        lines = np.asarray(lines, dtype=np.int64)
        if self.numbers is None:
            n_kept = len(self.line_starts) if self.text else 0
            return np.where((lines >= 0) & (lines < n_kept), lines, -1)
        if not len(self.numbers):
            return np.full(lines.shape, -1, dtype=np.int64)
        at = np.clip(np.searchsorted(self.numbers, lines), 0, len(self.numbers) - 1)
        return np.where(self.numbers[at] == lines, at, -1)

    @functools.cached_property
    def _kept_index(self) -> dict[int, int]:
        """``{file line number: index among the kept lines}`` (sparse logs)."""
        return {n: k for k, n in enumerate(self.kept_lines().tolist())}

    def line_no(self, offset: int | np.ndarray) -> int | np.ndarray:
        """0-based file line number of the line holding character ``offset`` of ``text``."""
        index = np.searchsorted(self.line_starts, offset, side="right") - 1
        return index if self.numbers is None else self.numbers[index]

    def line(self, number: int) -> str:
        """File line ``number`` (0-based) without its newline; "" when it was not kept."""
        number = int(number)
        if self.numbers is None:
            index = number if 0 <= number < (len(self.line_starts) if self.text else 0) else -1
        else:
            index = self._kept_index.get(number, -1)
        if index < 0:
            return ""
        start = int(self.line_starts[index])
        end = self.text.find("\n", start)
        return self.text[start:] if end < 0 else self.text[start:end]

    def lines_with(self, anchor: str) -> list[int]:
        """Numbers of the lines containing the literal ``anchor`` (each once, in order)."""
        offsets, text = [], self.text
        pos = text.find(anchor)
        while pos >= 0:
            offsets.append(pos)
            end = text.find("\n", pos)
            pos = text.find(anchor, end + 1) if end >= 0 else -1
        if not offsets:
            return []
        return np.asarray(self.line_no(np.array(offsets, dtype=np.int64))).tolist()

    def kept_texts(self) -> list[str]:
        """The kept lines' texts, in the order of :meth:`kept_lines`."""
        return self.text.split("\n") if self.text else []

    def arrival(self, lines: np.ndarray) -> np.ndarray:
        """Arrival stamps of ``lines`` (NaN where none, or the line was not kept)."""
        if self.arrival_s is None:
            return np.full(len(lines), np.nan)
        index = self._index(np.asarray(lines, dtype=np.int64))
        if not len(self.arrival_s):
            return np.full(len(index), np.nan)
        return np.where(index >= 0, self.arrival_s[np.clip(index, 0, None)], np.nan)

    def end_s(self) -> float | None:
        """Last arrival stamp (the end of the capture), or None."""
        if self.capture_end_s is not None:
            return self.capture_end_s
        if self.arrival_s is None or not np.isfinite(self.arrival_s).any():
            return None
        return float(np.nanmax(self.arrival_s))


@dataclass(frozen=True, kw_only=True)
class ServerLogResult:
    """What a server log says, normalised.

    Attributes
    ----------
    family : ServerFamily or None
        The parser used (None when no parser recognised the log).
    series : pandas.DataFrame
        Normalised series (:data:`llm_locust.analysis.server.series.SERIES_COLUMNS`, ``source`` = ``"log"``).
    config : ServerConfig
        Startup configuration read from the log.
    errors : pandas.DataFrame
        One row per error line: ``t_s`` (Unix s, NaN if unplaced), ``line`` (1-based), ``kind``,
        ``text`` (shortened).
    data_lines : int
        Lines that carried server-state data (stats lines, batch lines, request spans, slot
        events).
    unplaced_lines : tuple of int
        1-based numbers of data lines that could not be placed in time (reported, not guessed).
    time_source : str
        How lines were placed, in words.
    notes : tuple of str
    format_check : tuple of str
        With a user format file: the lines each of its patterns matched, then a warning for each
        series, batch or config pattern that matched none (:func:`llm_locust.analysis.server.serverlog.user.format_check`).
    """

    family: ServerFamily | None
    series: pd.DataFrame = field(default_factory=empty_series)
    config: ServerConfig = field(default_factory=ServerConfig)
    errors: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(
            {
                "t_s": pd.Series(dtype="float64"),
                "line": pd.Series(dtype="int64"),
                "kind": pd.Series(dtype=str),
                "text": pd.Series(dtype=str),
            }
        )
    )
    data_lines: int = 0
    unplaced_lines: tuple[int, ...] = ()
    time_source: str = ""
    notes: tuple[str, ...] = ()
    format_check: tuple[str, ...] = ()


def count_int(text: str | None) -> int | None:
    """The integer a log prints (``"1,024"`` too), or None when there is none or it has more
    than 18 digits (no count a server logs is that large; Python refuses ``int()`` of over 4,300
    digits, which a hostile line could hold).

    >>> count_int("524,288"), count_int("9" * 19), count_int(None)
    (524288, None, None)
    """
    if text is None:
        return None
    digits = text.replace(",", "")
    if not 0 < len(digits.lstrip("-")) <= 18:
        return None
    try:
        return int(digits)
    except ValueError:
        return None


def keyed_series(
    t_s: np.ndarray,
    keys: np.ndarray,
    columns: dict[str, np.ndarray],
    *,
    means: tuple[str, ...] = ("kv_usage_ratio",),
    max_hold_s: float | None,
) -> pd.DataFrame:
    """Normalised log series from point samples of several engines (or ranks).

    Each engine's samples hold at most ``max_hold_s`` (:func:`llm_locust.analysis.server.series.
    breakpoints_from_samples`); engines then combine at every instant: summed (requests,
    tokens/s), or averaged for the columns in ``means``; the sum is NaN wherever one engine has
    no data (a partial sum would undercount).

    Parameters
    ----------
    t_s : numpy.ndarray
        Sample instants, Unix s (NaN rows are dropped: unplaced).
    keys : numpy.ndarray
        Engine of each sample (any hashable values).
    columns : dict
        ``{series column: values}``, NaN where a sample does not carry that column.
    means : tuple of str
    max_hold_s : float or None

    Returns
    -------
    pandas.DataFrame
        Columns :data:`llm_locust.analysis.server.series.SERIES_COLUMNS`, ``source`` = ``"log"``.
    """
    from llm_locust.analysis.server.series import breakpoints_from_samples, series_from_breakpoints

    t_s = np.asarray(t_s, float)
    placed = np.isfinite(t_s)
    order = np.argsort(t_s[placed], kind="stable")
    t_sorted = t_s[placed][order]
    keys_sorted = np.asarray(keys, dtype=object)[placed][order]
    values = {c: np.asarray(v, float)[placed][order] for c, v in columns.items()}
    unique_keys = list(dict.fromkeys(keys_sorted.tolist()))
    if not unique_keys:
        return empty_series()
    per_key = []
    for key in unique_keys:
        mask = keys_sorted == key
        per_key.append({c: breakpoints_from_samples(t_sorted[mask], v[mask], max_hold_s) for c, v in values.items()})
    if len(per_key) == 1:
        return series_from_breakpoints(per_key[0], source="log")
    times = np.unique(np.concatenate([bp[0] for d in per_key for bp in d.values()]))
    combined = {}
    for column in values:
        stacked = []
        for d in per_key:
            col_t, col_v = d[column]
            index = np.searchsorted(col_t, times, side="right") - 1
            stacked.append(np.where(index >= 0, col_v[np.clip(index, 0, None)] if len(col_v) else np.nan, np.nan))
        matrix = np.vstack(stacked)
        if column in means:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN instants stay NaN
                merged = np.nanmean(matrix, axis=0)
        else:
            merged = np.where(np.isfinite(matrix).all(axis=0), np.nansum(matrix, axis=0), np.nan)
        combined[column] = (times, merged)
    return series_from_breakpoints(combined, source="log")
