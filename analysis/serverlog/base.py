"""What every log parser shares: the indexed log text, its clock, and the result type.

A log is handled as one string (ANSI colour codes removed) plus the offset of each line, so
parsers find their lines with fast whole-text searches (a literal anchor, then one regex on
the line) instead of a Python loop over every line.
"""

from __future__ import annotations

import enum
import re
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.families import ServerFamily
from analysis.series import empty_series, hold_limit_s  # noqa: F401 (parsers import it from here)
from analysis.serverconfig import ServerConfig

ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
"""Terminal colour and cursor codes (SGLang, TGI and llama.cpp colour their logs on a tty)."""


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
    """A server log, indexed by line.

    Attributes
    ----------
    text : str
        The whole log, ANSI codes removed.
    line_starts : numpy.ndarray
        Offset of each line's first character in ``text`` (int64).
    arrival_s : numpy.ndarray or None
        Per line, the wall clock (Unix s) when it was captured during the run; NaN for lines
        already in the file when capture started (``backlog``) or never stamped.
    name : str
        How the log is cited in reports (``server.log``).
    """

    text: str
    line_starts: np.ndarray
    arrival_s: np.ndarray | None = None
    name: str = "server.log"

    @classmethod
    def from_text(cls, text: str, *, arrival_s: np.ndarray | None = None,
                  name: str = "server.log") -> "LogText":
        """Index ``text``; ``arrival_s`` (one value per line, NaN = none) is kept as given.

        Raises
        ------
        ValueError
            If ``arrival_s`` does not have one value per line.
        """
        if "\x1b" in text:
            text = ANSI_RE.sub("", text)
        if "\r" in text:  # lines end at LF only, as the capture counts them; a bare CR (a
            # progress bar redrawing itself) is dropped
            text = text.replace("\r\n", "\n").replace("\r", "")
        if text.isascii():  # character offsets are byte offsets
            raw = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
        else:
            raw = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        newlines = np.flatnonzero(raw == 10)
        starts = np.concatenate([[0], newlines + 1]).astype(np.int64)
        if len(starts) > 1 and starts[-1] >= len(text):
            starts = starts[:-1]  # the text ends with a newline: no empty last line
        if arrival_s is not None:
            arrival_s = np.asarray(arrival_s, float)
            if len(arrival_s) != len(starts):
                raise ValueError(f"{name}: {len(arrival_s)} arrival stamps for {len(starts)} lines")
        return cls(text=text, line_starts=starts, arrival_s=arrival_s, name=name)

    @property
    def n_lines(self) -> int:
        """Number of lines."""
        return len(self.line_starts) if self.text else 0

    def line_no(self, offset: int | np.ndarray) -> int | np.ndarray:
        """0-based line number holding character ``offset``."""
        return np.searchsorted(self.line_starts, offset, side="right") - 1

    def line(self, number: int) -> str:
        """Line ``number`` (0-based) without its newline."""
        start = int(self.line_starts[number])
        end = self.text.find("\n", start)
        return self.text[start:] if end < 0 else self.text[start:end]

    def lines_with(self, anchor: str) -> list[int]:
        """Numbers of the lines containing the literal ``anchor`` (each once, in order)."""
        found, text, pos = [], self.text, 0
        while True:
            pos = text.find(anchor, pos)
            if pos < 0:
                return found
            number = int(self.line_no(pos))
            if not found or found[-1] != number:
                found.append(number)
            nxt = text.find("\n", pos)
            if nxt < 0:
                return found
            pos = nxt + 1

    def arrival(self, lines: np.ndarray) -> np.ndarray:
        """Arrival stamps of ``lines`` (NaN where none)."""
        if self.arrival_s is None:
            return np.full(len(lines), np.nan)
        return self.arrival_s[np.asarray(lines, int)]

    def end_s(self) -> float | None:
        """Last arrival stamp (the end of the capture), or None."""
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
        Normalised series (:data:`analysis.series.SERIES_COLUMNS`, ``source`` = ``"log"``).
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
    """

    family: ServerFamily | None
    series: pd.DataFrame = field(default_factory=empty_series)
    config: ServerConfig = field(default_factory=ServerConfig)
    errors: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        {"t_s": pd.Series(dtype="float64"), "line": pd.Series(dtype="int64"),
         "kind": pd.Series(dtype=str), "text": pd.Series(dtype=str)}))
    data_lines: int = 0
    unplaced_lines: tuple[int, ...] = ()
    time_source: str = ""
    notes: tuple[str, ...] = ()


def keyed_series(t_s: np.ndarray, keys: np.ndarray, columns: dict[str, np.ndarray], *,
                 means: tuple[str, ...] = ("kv_usage_ratio",),
                 max_hold_s: float | None) -> pd.DataFrame:
    """Normalised log series from point samples of several engines (or ranks).

    Each engine's samples hold at most ``max_hold_s`` (:func:`analysis.series.
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
        Columns :data:`analysis.series.SERIES_COLUMNS`, ``source`` = ``"log"``.
    """
    from analysis.series import breakpoints_from_samples, series_from_breakpoints

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
        per_key.append({c: breakpoints_from_samples(t_sorted[mask], v[mask], max_hold_s)
                        for c, v in values.items()})
    if len(per_key) == 1:
        return series_from_breakpoints(per_key[0], source="log")
    times = np.unique(np.concatenate([bp[0] for d in per_key for bp in d.values()]))
    combined = {}
    for column in values:
        stacked = []
        for d in per_key:
            col_t, col_v = d[column]
            index = np.searchsorted(col_t, times, side="right") - 1
            stacked.append(np.where(index >= 0, col_v[np.clip(index, 0, None)] if len(col_v)
                                    else np.nan, np.nan))
        matrix = np.vstack(stacked)
        if column in means:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN instants stay NaN
                merged = np.nanmean(matrix, axis=0)
        else:
            merged = np.where(np.isfinite(matrix).all(axis=0), np.nansum(matrix, axis=0), np.nan)
        combined[column] = (times, merged)
    return series_from_breakpoints(combined, source="log")
