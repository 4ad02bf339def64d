"""Reading a run directory's server-side files (the edge: the only I/O of the server analysis).

Files (all optional):

``server.log``
    A copy of the server's log, captured during the run (``--server-log``) or put there by hand.
``server_log_stamps.csv``
    Arrival stamps of the captured lines: one row per read of the followed file, columns
    :data:`STAMP_COLUMNS` - ``first_line`` (0-based), ``n_lines``, ``t_s`` (wall clock, Unix s,
    when they were read) and ``backlog`` (1 for lines already in the file when capture began:
    their stamp does not date them).
``server_info.json``
    ``{url: JSON body}`` of ``GET /props`` (llama.cpp) and ``GET /info`` (TGI), fetched at start.
``server_log_format.toml``
    The user format file the run was given (``--server-log-format``).
``server_scrapes.csv``
    One row per scrape attempt of the master's scraper (``llm_locust/master/scraper.py``
    ``SCRAPE_COLUMNS``); read here: :data:`SCRAPE_COLUMNS` - ``t_s`` (attempt start, Unix s),
    ``source`` (URL), ``ok`` (1/0), ``error_kind`` ("" when ok). Other columns are kept as text.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from llm_locust.analysis.schema import (
    SCRAPE_SCHEMA,
    SERVER_INFO,
    SERVER_LOG,
    SERVER_LOG_FORMAT,
    SERVER_LOG_STAMPS,
    SERVER_SCRAPES_CSV,
    STAMP_COLUMNS,
)
from llm_locust.analysis.server.serverlog import LogText, keep_rule, read_log
from llm_locust.analysis.server.userformat import UserFormat, UserFormatError, format_file_path, load_user_format

__all__ = [
    "SCRAPE_COLUMNS",
    "SERVER_INFO",
    "SERVER_LOG",
    "SERVER_LOG_FORMAT",
    "SERVER_LOG_STAMPS",
    "SERVER_SCRAPES",
    "STAMP_COLUMNS",
    "ServerFiles",
    "ServerFilesError",
    "read_server_files",
]

SERVER_SCRAPES = SERVER_SCRAPES_CSV
SCRAPE_COLUMNS: tuple[str, ...] = tuple(c.name for c in SCRAPE_SCHEMA if c.required)
"""Columns of ``server_scrapes.csv`` the analysis reads (:data:`llm_locust.analysis.schema.SCRAPE_SCHEMA`)."""


class ServerFilesError(ValueError):
    """A server-side file of the run directory that cannot be read."""


@dataclass(frozen=True, kw_only=True)
class ServerFiles:
    """The server-side files of one run directory.

    Attributes
    ----------
    log_path : Path or None
        The server log read (None when there is none).
    log : LogText or None
        Its lines a parser can use, read in chunks in bounded memory
        (:func:`llm_locust.analysis.server.serverlog.read_log`), with their arrival stamps (NaN for
        backlog lines and lines without a stamp; None when the log has no stamps file: it was
        not captured during the run). None when there is no log.
    info : dict
        ``server_info.json``.
    format_text : str or None
        The user format file's TOML text.
    format_path : Path or None
    scrapes : pandas.DataFrame
        ``server_scrapes.csv``: ``t_s`` float64, ``source`` str, ``ok`` bool, ``error_kind``
        str, then any other column as text; empty (those four columns) when absent.
    """

    log_path: Path | None = None
    log: LogText | None = None
    info: dict = field(default_factory=dict)
    format_text: str | None = None
    format_path: Path | None = None
    scrapes: pd.DataFrame = field(default_factory=lambda: empty_scrapes())

    @property
    def log_text(self) -> str:
        """The kept lines of the log (UTF-8, undecodable bytes replaced); "" when none."""
        return self.log.text if self.log is not None else ""

    @property
    def arrival_s(self) -> np.ndarray | None:
        """Per kept line, its arrival stamp (see ``log``)."""
        return self.log.arrival_s if self.log is not None else None


def read_server_files(
    run_dir: Path, *, server_log: Path | None = None, server_log_format: Path | None = None
) -> ServerFiles:
    """Read the server-side files of ``run_dir``.

    Parameters
    ----------
    run_dir : Path
    server_log : Path, optional
        A log to read instead of ``run_dir/server.log`` (its stamps are used only when it is
        the run directory's own log).
    server_log_format : Path, optional
        A format file (or a shipped format's name, ``nginx-error``) to use instead of
        ``run_dir/server_log_format.toml``.

    Raises
    ------
    ServerFilesError
        A named file that does not exist, a stamps file with missing columns or stamps for more
        lines than the log has, ``server_info.json`` that is not a JSON object.
    """
    own_log = run_dir / SERVER_LOG
    log_path = Path(server_log) if server_log is not None else own_log
    if server_log is not None and not log_path.is_file():
        raise ServerFilesError(f"{log_path}: no such server log")
    format_path = run_dir / SERVER_LOG_FORMAT
    if server_log_format is not None:
        try:
            format_path = format_file_path(server_log_format)
        except UserFormatError as exc:
            raise ServerFilesError(f"format file {exc}") from None
    format_text = format_path.read_text(encoding="utf-8") if format_path.is_file() else None
    log = None
    if log_path.is_file():
        log = read_log(log_path, name=log_path.name, keep=keep_rule(_user_format(format_text)))
        if log_path.resolve() == own_log.resolve():
            log = _with_stamps(log, run_dir / SERVER_LOG_STAMPS)
    return ServerFiles(
        log_path=log_path if log_path.is_file() else None,
        log=log,
        info=_read_info(run_dir / SERVER_INFO),
        format_text=format_text,
        format_path=format_path if format_path.is_file() else None,
        scrapes=read_scrapes(run_dir / SERVER_SCRAPES),
    )


def empty_scrapes() -> pd.DataFrame:
    """A scrapes frame with no rows (:data:`SCRAPE_COLUMNS`, the right dtypes)."""
    return pd.DataFrame(
        {
            "t_s": pd.Series(dtype="float64"),
            "source": pd.Series(dtype=str),
            "ok": pd.Series(dtype=bool),
            "error_kind": pd.Series(dtype=str),
        }
    )


def read_scrapes(path: Path) -> pd.DataFrame:
    """``server_scrapes.csv`` (see the module docstring); empty when the file is absent.

    Raises
    ------
    ServerFilesError
        Missing columns, a ``t_s`` that is not a number, or an ``ok`` other than 0/1.
    """
    if not path.is_file() or path.stat().st_size == 0:
        return empty_scrapes()
    try:
        frame = pd.read_csv(
            path, dtype=str, keep_default_na=False, na_filter=False, encoding="utf-8", encoding_errors="replace"
        )
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ServerFilesError(f"{path}: not a readable CSV ({exc})") from None
    missing = [c for c in SCRAPE_COLUMNS if c not in frame.columns]
    if missing:
        raise ServerFilesError(f"{path}: missing columns {missing}; expected {list(SCRAPE_COLUMNS)}")
    t_s = pd.to_numeric(frame["t_s"], errors="coerce")
    ok = frame["ok"].str.strip()
    bad = t_s.isna() | ~ok.isin(["0", "1"])
    if bad.any():
        row = int(bad.to_numpy().nonzero()[0][0])
        raise ServerFilesError(
            f"{path}: data row {row + 1} has t_s {frame['t_s'].iloc[row]!r}, "
            f"ok {frame['ok'].iloc[row]!r} (expected a number and 0/1)"
        )
    out = frame.copy()
    out["t_s"] = t_s.astype("float64")
    out["ok"] = ok == "1"
    return out.reset_index(drop=True)


def _user_format(text: str | None) -> UserFormat | None:
    """The format file's patterns, to keep the lines they match; None when it cannot be used
    (the analysis reports that, with the reason, when it loads the file)."""
    if text is None:
        return None
    try:
        return load_user_format(text)
    except UserFormatError:
        return None


def _with_stamps(log: LogText, path: Path) -> LogText:
    """``log`` with the arrival stamps of its kept lines from the stamps file (if any)."""
    if not path.is_file():
        return log
    kept = log.kept_lines()
    out = np.full(len(kept), np.nan)
    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return dataclasses.replace(log, arrival_s=out)
    missing = [c for c in STAMP_COLUMNS if c not in frame.columns]
    if missing:
        raise ServerFilesError(f"{path}: missing columns {missing}; expected {list(STAMP_COLUMNS)}")
    end_s = None
    for first, count, t_s, backlog in frame[list(STAMP_COLUMNS)].itertuples(index=False):
        first, count = int(first), int(count)
        if first < 0 or first + count > log.n_lines:
            raise ServerFilesError(
                f"{path}: stamps for lines {first}..{first + count - 1} but the log has {log.n_lines} lines"
            )
        if not int(backlog) and count > 0:
            lo, hi = np.searchsorted(kept, [first, first + count])
            out[lo:hi] = float(t_s)
            end_s = float(t_s) if end_s is None else max(end_s, float(t_s))
    return dataclasses.replace(log, arrival_s=out, capture_end_s=end_s)


def _read_info(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ServerFilesError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(info, dict):
        raise ServerFilesError(f"{path}: expected a JSON object")
    return info
