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
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

SERVER_LOG = "server.log"
SERVER_LOG_STAMPS = "server_log_stamps.csv"
SERVER_INFO = "server_info.json"
SERVER_LOG_FORMAT = "server_log_format.toml"
STAMP_COLUMNS: tuple[str, ...] = ("first_line", "n_lines", "t_s", "backlog")


class ServerFilesError(ValueError):
    """A server-side file of the run directory that cannot be read."""


@dataclass(frozen=True, kw_only=True)
class ServerFiles:
    """The server-side files of one run directory.

    Attributes
    ----------
    log_path : Path or None
        The server log read (None when there is none).
    log_text : str
        Its text (UTF-8, undecodable bytes replaced); "" when none.
    arrival_s : numpy.ndarray or None
        Per line, the arrival stamp (Unix s); NaN for backlog lines and lines without a stamp.
        None when the log has no stamps file (it was not captured during the run).
    info : dict
        ``server_info.json``.
    format_text : str or None
        The user format file's TOML text.
    format_path : Path or None
    """

    log_path: Path | None = None
    log_text: str = ""
    arrival_s: np.ndarray | None = None
    info: dict = field(default_factory=dict)
    format_text: str | None = None
    format_path: Path | None = None


def read_server_files(run_dir: Path, *, server_log: Path | None = None,
                      server_log_format: Path | None = None) -> ServerFiles:
    """Read the server-side files of ``run_dir``.

    Parameters
    ----------
    run_dir : Path
    server_log : Path, optional
        A log to read instead of ``run_dir/server.log`` (its stamps are used only when it is
        the run directory's own log).
    server_log_format : Path, optional
        A format file to use instead of ``run_dir/server_log_format.toml``.

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
    text = log_path.read_bytes().decode("utf-8", errors="replace") if log_path.is_file() else ""
    arrival = None
    if log_path.is_file() and log_path.resolve() == own_log.resolve():
        arrival = _read_stamps(run_dir / SERVER_LOG_STAMPS, _count_lines(text))
    format_path = Path(server_log_format) if server_log_format is not None \
        else run_dir / SERVER_LOG_FORMAT
    if server_log_format is not None and not format_path.is_file():
        raise ServerFilesError(f"{format_path}: no such format file")
    return ServerFiles(
        log_path=log_path if log_path.is_file() else None, log_text=text, arrival_s=arrival,
        info=_read_info(run_dir / SERVER_INFO),
        format_text=format_path.read_text(encoding="utf-8") if format_path.is_file() else None,
        format_path=format_path if format_path.is_file() else None)


def _count_lines(text: str) -> int:
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def _read_stamps(path: Path, n_lines: int) -> np.ndarray | None:
    if not path.is_file():
        return None
    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return np.full(n_lines, np.nan)
    missing = [c for c in STAMP_COLUMNS if c not in frame.columns]
    if missing:
        raise ServerFilesError(f"{path}: missing columns {missing}; expected {list(STAMP_COLUMNS)}")
    out = np.full(n_lines, np.nan)
    for first, count, t_s, backlog in frame[list(STAMP_COLUMNS)].itertuples(index=False):
        first, count = int(first), int(count)
        if first < 0 or first + count > n_lines:
            raise ServerFilesError(f"{path}: stamps for lines {first}..{first + count - 1} but "
                                   f"the log has {n_lines} lines")
        if not int(backlog):
            out[first:first + count] = float(t_s)
    return out


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
