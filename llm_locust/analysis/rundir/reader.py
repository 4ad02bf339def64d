"""Load and validate a run directory: the only contract between ``llm_locust/`` and ``llm_locust/analysis/``.

Files read (schema version 1; names, columns, dtypes and error kinds: :mod:`llm_locust.analysis.schema`):

``run.json``
    Run metadata: ``schema_version``, ``started_at_s`` / ``ended_at_s`` (wall clock, Unix s;
    ``ended_at_s`` is null when the run was stopped without a clean end, by a timeout or Ctrl-C),
    ``host``, ``model``, ``workload``, and ``shape`` (``kind``, ``warmup_s``, ``steps`` with
    ``index``, ``users``, ``start_s``, ``end_s``; ``end_s`` may be null when the run was cut short).
``requests.csv``
    One row per request, columns :data:`REQUEST_COLUMNS`. Empty cell = not measured (NaN).
``server_metrics.csv`` (optional)
    Scraped Prometheus samples in long format, columns :data:`SERVER_COLUMNS`.
``client_load.csv`` (optional)
    The load client's own load, one row per worker and ~1 s interval, columns
    :data:`CLIENT_LOAD_COLUMNS`: ``t_s`` (Unix s, end of the interval), ``worker``, ``cpu_cores``
    (CPU time / wall time of the worker process), ``loop_lag_ms_mean`` / ``loop_lag_ms_max``
    (event-loop wake-up lag, ms), ``open_streams``. run.json's optional ``workers_lost`` (a list
    of ``{"worker", "lost_at_s", "last_record_s"}``, Unix s) names workers the master lost, and
    ``workers_missing`` (``{"worker", "from_s", "noticed_s", "to_s"}``) every spell a worker was
    missing (:mod:`llm_locust.analysis.perstep.workers`).
``server.log``, ``server_log_stamps.csv``, ``server_info.json``, ``server_log_format.toml``
    (optional) The server's log and what else it says about itself: :mod:`llm_locust.analysis.server.files`.

Every file is UTF-8; a byte that is not is reported with the file and its byte offset.
All validation happens here, at the edge; everything downstream trusts the dtypes set here.
"""

from __future__ import annotations

import io
import json
import math
import threading
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llm_locust.analysis.rundir.clocks import clock_notes
from llm_locust.analysis.rundir.columnar import open_requests_arrow
from llm_locust.analysis.rundir.csvread import complete_length, read_typed
from llm_locust.analysis.schema import (
    CLIENT_LOAD_COLUMNS,
    ERROR_KINDS,
    REQUEST_SCHEMA,
    REQUESTS_CSV,
    RUN_JSON,
    RUN_JSON_REQUIRED,
    SCHEMA_VERSIONS,
    SERVER_METRICS_COLUMNS,
    SERVER_METRICS_CSV,
    SERVER_METRICS_SCHEMA,
)
from llm_locust.analysis.server.files import ServerFiles, ServerFilesError, read_server_files

REQUEST_COLUMNS: tuple[str, ...] = tuple(c.name for c in REQUEST_SCHEMA if c.required)
"""Columns every ``requests.csv`` has (file order; :data:`llm_locust.analysis.schema.REQUEST_SCHEMA`)."""

OPTIONAL_REQUEST_COLUMNS: dict[str, str] = {
    c.name: ("str" if c.dtype == "str" else "float") for c in REQUEST_SCHEMA if not c.required
}
"""Columns added after the first run directories (appended after :data:`REQUEST_COLUMNS`, in
this order), name -> "float" or "str"; their meaning is in :data:`llm_locust.analysis.schema.REQUEST_SCHEMA`.
Missing in an older file: the column's :attr:`llm_locust.analysis.schema.Column.fill` (NaN, "" or 0 for
``conn_wait_ms``, ``ignore_eos_violated``, ``resent``). ``llm_locust/analysis/perrequest/itl.py`` derives ITL from
``token_times_us`` and ``event_tokens``."""

REQUEST_FLOAT_COLUMNS: tuple[str, ...] = tuple(c.name for c in REQUEST_SCHEMA if c.required and c.dtype == "float64")
"""Required ``requests.csv`` columns read as float64 (empty cell -> NaN); the others stay strings."""

SERVER_COLUMNS: tuple[str, ...] = SERVER_METRICS_COLUMNS
"""Columns of ``server_metrics.csv``."""


STEP_COLUMNS: tuple[str, ...] = ("step", "target_users", "start_s", "end_s")
"""Columns of :attr:`Run.steps`."""

UNCLEAN_END_NOTE = "run ended without a clean stop; end taken from the last record"
"""Start of the note of a run whose ``run.json`` has no ``ended_at_s`` (stopped by a timeout or
Ctrl-C): its end is the last request end or server sample, whichever is later."""


class RunDirError(Exception):
    """A run directory is missing a file or holds data this package cannot read."""


@dataclass(frozen=True, kw_only=True)
class Run:
    """One loaded run directory.

    Attributes
    ----------
    run_dir : Path
        Directory it was loaded from.
    meta : dict
        ``run.json`` as parsed.
    requests : pandas.DataFrame
        ``requests.csv``: :data:`REQUEST_FLOAT_COLUMNS` as float64 (NaN = not measured), the
        rest as strings ("" when empty); then :data:`OPTIONAL_REQUEST_COLUMNS` (filled in when an
        older file lacks them), without the columns loaded as ``unread``.
    server_samples : pandas.DataFrame
        ``server_metrics.csv`` (columns :data:`SERVER_COLUMNS`; ``t_s`` and ``value`` float64),
        empty when the file is absent or empty.
    steps : pandas.DataFrame
        Load-shape steps: ``step`` (int64), ``target_users`` (float64, users), ``start_s`` and
        ``end_s`` (float64, wall clock Unix s; a null ``end_s`` becomes the next step's start,
        or :attr:`ended_at_s` for the last step). Sorted by ``start_s``. A request-rate run
        (``shape.kind == "rate"``) adds ``target_rate_rps`` (float64, requests/s offered over all
        workers; its ``target_users`` is the pool of users that sent them).
    server_files : ServerFiles
        Server log, its arrival stamps, ``/props`` / ``/info`` bodies, user format file
        (:mod:`llm_locust.analysis.server.files`); empty when absent.
    inferred_end_s : float or None
        When ``run.json`` has no ``ended_at_s``: the end taken from the records (wall clock,
        Unix s; see :func:`last_record_s`); None after a clean stop.
    notes : tuple of str
        What the loader had to assume (e.g. :data:`UNCLEAN_END_NOTE`), for the report.
    client_load : pandas.DataFrame
        ``client_load.csv`` (:data:`CLIENT_LOAD_COLUMNS`); empty when the file is absent.
    reported_requests : int or None
        Requests the master counted (``client_report.json`` ``requests``), to tell whether
        ``requests.csv`` lacks some; None without a readable report.
    """

    run_dir: Path
    meta: dict[str, Any]
    requests: pd.DataFrame
    server_samples: pd.DataFrame
    steps: pd.DataFrame
    server_files: ServerFiles = field(default_factory=ServerFiles)
    inferred_end_s: float | None = None
    notes: tuple[str, ...] = ()
    client_load: pd.DataFrame = field(default_factory=lambda: _empty_client_load())
    reported_requests: int | None = None

    @property
    def started_at_s(self) -> float:
        """Wall clock (Unix s) when the run started."""
        return float(self.meta["started_at_s"])

    @property
    def ended_at_s(self) -> float:
        """Wall clock (Unix s) when the run ended: ``run.json``'s ``ended_at_s``, or, when the
        run stopped without one, :attr:`inferred_end_s`."""
        if self.meta.get("ended_at_s") is None and self.inferred_end_s is not None:
            return self.inferred_end_s
        return float(self.meta["ended_at_s"])

    @property
    def clean_stop(self) -> bool:
        """False when ``run.json`` has no ``ended_at_s`` (stopped by a timeout or Ctrl-C)."""
        return self.meta.get("ended_at_s") is not None

    @property
    def warmup_s(self) -> float:
        """Seconds dropped at the start of every step before its steady window (0 if unset)."""
        return float(self.meta.get("shape", {}).get("warmup_s") or 0.0)


def load_run(
    run_dir: Path | str,
    *,
    server_log: Path | str | None = None,
    server_log_format: Path | str | None = None,
    unread: Collection[str] = (),
) -> Run:
    """Read and validate a run directory.

    Parameters
    ----------
    run_dir : Path or str
        Directory holding ``run.json`` and ``requests.csv`` (and optionally
        ``server_metrics.csv`` and the server-side files of :mod:`llm_locust.analysis.server.files`).
    server_log, server_log_format : Path or str, optional
        A server log / user format file to read instead of the run directory's own.
    unread : collection of str, default ()
        ``requests.csv`` columns to leave unread (:attr:`Run.requests` then lacks them, and
        nothing in them is checked). ``llm-locust analyze`` and ``compare`` leave
        :data:`LAZY_REQUEST_COLUMNS` unread (the per-event times only the ITL uses and the
        identifiers no step analysis reads: about 65 % of the file).

    Returns
    -------
    Run

    Raises
    ------
    RunDirError
        If the directory, ``run.json`` or ``requests.csv`` is missing; if ``run.json``,
        ``requests.csv`` or ``server_metrics.csv`` holds a byte that is not UTF-8 (the message
        names the file and the byte offset); if ``run.json`` is not valid JSON, lacks
        ``schema_version``/``started_at_s`` or has an unknown ``schema_version``; if a CSV lacks
        required columns (the message lists them), holds a non-numeric value in a numeric
        column, or an ``error_kind`` outside the closed set; if a server-side file is unreadable
        (:class:`llm_locust.analysis.server.files.ServerFilesError`).

    Notes
    -----
    A null (or absent) ``ended_at_s`` - a run stopped by a timeout or Ctrl-C - is accepted: the
    end is :func:`last_record_s` and :attr:`Run.notes` says so. A null ``end_s`` of the last
    step becomes that end as well.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: not a directory")
    meta = _read_meta(run_dir / RUN_JSON)
    notes: list[str] = []
    # the server-side files are read meanwhile (mostly Python) while pyarrow reads requests.csv
    # (C++, without the GIL): two cores at work
    files_read: dict[str, Any] = {}
    reader = threading.Thread(
        target=_read_server_files_into,
        args=(files_read, run_dir, server_log, server_log_format),
        name="llm-locust-server-files",
        daemon=True,
    )
    reader.start()
    try:  # a refused requests.csv is reported first, as before; no reader is left running
        requests = read_requests(run_dir / REQUESTS_CSV, notes, unread=unread)
        server = _read_server(run_dir / SERVER_METRICS_CSV, notes)
        inferred_end_s = None
        if meta.get("ended_at_s") is None:
            inferred_end_s = last_record_s(requests, server, meta)
            notes.append(f"{UNCLEAN_END_NOTE} ({inferred_end_s - float(meta['started_at_s']):.1f} s after the start)")
        end_s = float(meta["ended_at_s"]) if inferred_end_s is None else inferred_end_s
        steps = _steps_frame(meta, run_dir / RUN_JSON, end_s)
        raw_steps = (meta.get("shape") or {}).get("steps") or []
        if raw_steps and max(raw_steps, key=lambda s: float(s["start_s"])).get("end_s") is None:
            last = steps.iloc[-1]
            notes.append(
                f"step {int(last['step'])} has no recorded end: it ends with the run "
                f"({'the last record' if inferred_end_s is not None else 'ended_at_s'})"
            )
            if (cut := ladder_cut_note(meta.get("shape") or {}, end_s)) is not None:
                notes.append(cut)
    finally:
        reader.join()
    if "error" in files_read:
        exc = files_read["error"]
        if isinstance(exc, ServerFilesError):
            raise RunDirError(str(exc)) from exc
        raise exc
    files = files_read["files"]
    _check_workers_lost(meta, run_dir / "run.json")
    notes += clock_notes(meta)
    notes += server_log_command_notes(meta)
    return Run(
        run_dir=run_dir,
        meta=meta,
        requests=requests,
        server_samples=server,
        steps=steps,
        server_files=files,
        inferred_end_s=inferred_end_s,
        notes=tuple(notes),
        client_load=_read_client_load(run_dir / "client_load.csv"),
        reported_requests=_reported_requests(run_dir / "client_report.json"),
    )


def server_log_command_notes(meta: dict[str, Any]) -> list[str]:
    """A note when ``--server-log-cmd``'s command ended by itself before the run stopped it
    (run.json ``server_log_cmd_ended``: ``at_s``, ``exit_code``, ``lines``): the server log stops
    there, so what the log tells (queueing, errors, the configuration) covers the run only until
    then, and the steps after it have no log data (never read as zeros).

    >>> server_log_command_notes({"started_at_s": 100.0, "server_log_cmd_ended": {"at_s": 112.5, "exit_code": 1, "lines": 40}})
    ['the server log command (--server-log-cmd) ended by itself 12.5 s into the run (exit code 1, 40 lines): the server log covers the run only until then']
    """
    ended = meta.get("server_log_cmd_ended")
    if not isinstance(ended, dict):
        return []
    try:
        into = f"{float(ended['at_s']) - float(meta['started_at_s']):.1f} s into the run"
    except (KeyError, TypeError, ValueError):
        into = "before the run's end"
    return [
        f"the server log command (--server-log-cmd) ended by itself {into} (exit code {ended.get('exit_code')}, "
        f"{ended.get('lines')} lines): the server log covers the run only until then"
    ]


def _read_server_files_into(out: dict[str, Any], run_dir: Path, server_log, server_log_format) -> None:
    """:func:`read_server_files` in :func:`load_run`'s reader thread: its result or exception in ``out``."""
    try:
        out["files"] = read_server_files(run_dir, server_log=server_log, server_log_format=server_log_format)
    except BaseException as exc:  # handed to the loading thread, which raises it
        out["error"] = exc


def read_meta_and_load(run_dir: Path | str) -> tuple[dict[str, Any], pd.DataFrame]:
    """``run.json`` (checked as :func:`load_run` checks it) and ``client_load.csv`` (typed; empty
    when absent), without ``requests.csv``: what the master's end-of-run report reads back.

    Raises
    ------
    RunDirError
        As :func:`load_run` for these two files.
    """
    run_dir = Path(run_dir)
    meta = _read_meta(run_dir / RUN_JSON)
    _check_workers_lost(meta, run_dir / RUN_JSON)
    return meta, _read_client_load(run_dir / "client_load.csv")


def _reported_requests(path: Path) -> int | None:
    """``requests`` of ``client_report.json`` (the master's count); None when the file is absent,
    unreadable or has no whole count (the report is a cross-check, never required)."""
    try:
        count = json.loads(path.read_text(encoding="utf-8")).get("requests")
    except (OSError, ValueError, AttributeError):
        return None
    return count if isinstance(count, int) and count >= 0 else None


def last_record_s(requests: pd.DataFrame, server: pd.DataFrame, meta: dict[str, Any]) -> float:
    """End of a run that stopped without ``ended_at_s``: its last record.

    Parameters
    ----------
    requests : pandas.DataFrame
        ``requests.csv`` as loaded (``t_start_s`` Unix s, ``e2e_ms`` ms).
    server : pandas.DataFrame
        ``server_metrics.csv`` as loaded (``t_s`` Unix s).
    meta : dict
        ``run.json``; ``started_at_s`` and the steps' ``start_s`` / ``end_s`` bound it from below.

    Returns
    -------
    float
        Wall clock, Unix s: just after (``math.nextafter``) the latest of the last request end
        (``t_start_s + e2e_ms / 1000``), the last server sample, and the start and step bounds
        in ``run.json`` (so an empty run still has an end, its start). "Just after" keeps the
        last request inside the last step's window ``[start, end)``.
    """
    ends = [float(meta["started_at_s"])]
    if len(requests):
        ends.append(float((requests["t_start_s"] + requests["e2e_ms"].fillna(0.0) / 1000.0).max()))
    if len(server) and server["t_s"].notna().any():
        ends.append(float(server["t_s"].max()))
    for step in (meta.get("shape") or {}).get("steps") or []:
        for key in ("start_s", "end_s"):
            value = step.get(key) if isinstance(step, dict) else None
            if isinstance(value, (int, float)) and math.isfinite(value):
                ends.append(float(value))
    return math.nextafter(max(ends), math.inf)


def _read_utf8(path: Path) -> str:
    """The file's text; raise :class:`RunDirError` naming the first byte that is not UTF-8."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RunDirError(_not_utf8(path, data, exc)) from None


def _not_utf8(path: Path, data: bytes, exc: UnicodeDecodeError) -> str:
    line = data.count(b"\n", 0, exc.start) + 1
    return (
        f"{path}: not UTF-8 text: byte 0x{data[exc.start]:02x} at byte offset {exc.start} (line {line}) ({exc.reason})"
    )


def _read_meta(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise RunDirError(f"{path}: missing (every run directory needs run.json)")
    text = _read_utf8(path)
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RunDirError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(meta, dict):
        raise RunDirError(f"{path}: expected a JSON object")
    missing = [k for k in RUN_JSON_REQUIRED if meta.get(k) is None]
    if missing:
        raise RunDirError(f"{path}: missing keys {missing}")
    if meta["schema_version"] not in SCHEMA_VERSIONS:
        raise RunDirError(
            f"{path}: unknown schema_version {meta['schema_version']!r} (this analysis reads {list(SCHEMA_VERSIONS)})"
        )
    return meta


def _complete_length(path: Path, notes: list[str]) -> int:
    """Bytes of the CSV's complete rows (:func:`llm_locust.analysis.rundir.csvread.complete_length`); a partial last
    row (cut mid-write) is left out and noted: dropping it loses one request, reported."""
    length, partial = complete_length(path)
    if partial:
        notes.append(_partial_note(path))
    return length


def _partial_note(path: Path) -> str:
    return f"{path.name} ends in a partial row (cut mid-write?): 1 row dropped"


def _read_prefix(path: Path, length: int) -> bytes:
    with open(path, "rb") as file:
        return file.read(length)


def _read_csv_strings(path: Path, required: tuple[str, ...], data: bytes | None = None) -> pd.DataFrame:
    """Read a CSV (``data``: its bytes, if already read) with every cell as a string ("" for
    empty) and check its header."""
    try:
        frame = pd.read_csv(
            path if data is None else io.BytesIO(data),
            dtype=str,
            keep_default_na=False,
            na_filter=False,
            encoding="utf-8",
        )
    except UnicodeDecodeError as exc:
        _read_utf8(path)  # pandas' offset is within a chunk: raise with the file's own offset
        raise RunDirError(f"{path}: not UTF-8 text ({exc})") from None
    except pd.errors.EmptyDataError:
        frame = pd.DataFrame(columns=list(required), dtype=str)
    missing = [c for c in required if c not in frame.columns]
    if missing:
        extra = [c for c in frame.columns if c not in required]
        raise RunDirError(
            f"{path}: missing columns {missing}"
            + (f"; unexpected columns {extra}" if extra else "")
            + f"; expected {list(required)}"
        )
    return frame


def _to_float(frame: pd.DataFrame, column: str, path: Path) -> pd.Series:
    """Column as float64: "" and "nan" become NaN, anything else non-numeric raises."""
    text = frame[column].astype(str).str.strip()
    values = pd.to_numeric(text.where(text != "", "nan"), errors="coerce").astype("float64")
    bad = values.isna() & ~text.str.lower().isin(["", "nan"])
    if bad.any():
        first = bad.to_numpy().nonzero()[0][0]
        raise RunDirError(
            f"{path}: column {column!r} holds {int(bad.sum())} non-numeric value(s), "
            f"first {text.iloc[first]!r} on data row {first + 1}"
        )
    return values


MAX_REQUEST_MS = 7 * 24 * 3600 * 1000.0
"""Longest interval a request can have, ms (a week): anything longer is a corrupt value."""

PLAUSIBLE_RANGES: dict[str, tuple[float, float]] = {
    **{
        column: (0.0, MAX_REQUEST_MS)
        for column in ("headers_ms", "ttft_ms", "e2e_ms", "first_answer_ms", "conn_wait_ms", "connect_ms")
    },
    **{
        column: (0.0, math.inf)
        for column in ("prompt_tokens", "output_tokens", "content_events", "sse_events", "max_tokens")
    },
    "t_start_s": (0.0, math.inf),
}
"""Closed ranges a ``requests.csv`` column's values must fall in (NaN, "not measured", is allowed;
infinities never are). A value outside is a corrupt file, not data: loading stops with its row."""


def _check_plausible(out: pd.DataFrame, path: Path) -> None:
    """Raise :class:`RunDirError` for values no measurement can produce (see :data:`PLAUSIBLE_RANGES`,
    and a TTFT after the request's end)."""
    for column, (low, high) in PLAUSIBLE_RANGES.items():
        values = out[column]
        bad = values.notna() & ~((values >= low) & (values <= high))
        if bad.any():
            first = int(bad.to_numpy().nonzero()[0][0])
            raise RunDirError(
                f"{path}: column {column!r} holds {int(bad.sum())} value(s) outside [{low:g}, {high:g}], "
                f"first {float(values.iloc[first])!r} on data row {first + 1}"
            )
    late = (out["ttft_ms"] > out["e2e_ms"] + 1e-6).to_numpy()
    if late.any():
        first = int(late.nonzero()[0][0])
        raise RunDirError(
            f"{path}: {int(late.sum())} row(s) with ttft_ms after e2e_ms, first on data row {first + 1} "
            f"(ttft_ms {float(out['ttft_ms'].iloc[first])!r}, e2e_ms {float(out['e2e_ms'].iloc[first])!r})"
        )


_OPTIONAL_FILL: dict[str, float | str] = {c.name: c.fill for c in REQUEST_SCHEMA if not c.required}


TIMES_COLUMNS: tuple[str, ...] = ("token_times_us", "event_tokens")
"""``requests.csv``'s per-event times (about 60 % of the file): only the ITL reads them
(:func:`llm_locust.analysis.perrequest.itlpool.itl_from_csv` reads them a block at a time)."""

LAZY_REQUEST_COLUMNS: tuple[str, ...] = ("request_id", "token_times_us", "event_tokens", "response_id")
"""``requests.csv`` columns the step analysis never reads: the per-event times only the ITL needs
(about 60 % of the file) and the request and response identifiers (about 5 %).
``load_run(..., unread=LAZY_REQUEST_COLUMNS)`` leaves them unread."""


def read_requests(path: Path, notes: list[str] | None = None, *, unread: Collection[str] = ()) -> pd.DataFrame:
    """Read and validate ``requests.csv``.

    Parameters
    ----------
    path : Path
        The file (columns :data:`llm_locust.analysis.schema.REQUEST_SCHEMA`).
    notes : list of str, optional
        Gets a note when a partial last row (cut mid-write) was dropped.
    unread : collection of str, default ()
        Columns to leave unread (the frame lacks them; nothing in them is checked).

    Returns
    -------
    pandas.DataFrame
        :data:`REQUEST_COLUMNS`, then :data:`OPTIONAL_REQUEST_COLUMNS` (filled in when the file
        lacks them), float64 or ``str`` as the schema declares; a ``RangeIndex``.

    Raises
    ------
    RunDirError
        As :func:`load_run` for ``requests.csv``.

    Notes
    -----
    Read from ``requests.arrow`` when the master wrote it from this very file
    (:func:`llm_locust.analysis.rundir.columnar.open_requests_arrow`: the same frame, no text
    parsed), else with pyarrow's typed reader (:func:`llm_locust.analysis.rundir.csvread.read_typed`); a file it cannot read
    exactly goes through the string reader, which names the bad cell.
    """
    if not path.is_file():
        raise RunDirError(f"{path}: missing (every run directory needs requests.csv)")
    wanted = tuple(c.name for c in REQUEST_SCHEMA if c.name not in unread)
    columnar = open_requests_arrow(path)
    if columnar is not None:  # the same frame read_typed gives, without parsing the text
        if columnar.partial and notes is not None:
            notes.append(_partial_note(path))
        out = columnar.frame(wanted)
    else:
        length = _complete_length(path, [] if notes is None else notes)
        out = read_typed(path, REQUEST_SCHEMA, wanted, length)
        if out is None:
            out = _read_requests_as_strings(path, length, wanted)
    for column in wanted:
        if column not in out.columns:
            dtype = OPTIONAL_REQUEST_COLUMNS[column]
            out[column] = pd.Series(_OPTIONAL_FILL[column], index=out.index, dtype=str if dtype == "str" else "float64")
    out = out[list(wanted)]
    out["error_kind"] = out["error_kind"].str.strip()
    unknown = sorted(set(out["error_kind"].unique()) - ERROR_KINDS - {""})
    if unknown:
        raise RunDirError(f"{path}: unknown error_kind values {unknown}; known {sorted(ERROR_KINDS)}")
    if out["t_start_s"].isna().any():
        empty = int(out["t_start_s"].isna().sum())
        raise RunDirError(f"{path}: t_start_s is empty on {empty} row(s)")
    _check_plausible(out, path)
    return out.reset_index(drop=True)


def _read_requests_as_strings(path: Path, length: int, wanted: tuple[str, ...]) -> pd.DataFrame:
    """The string reader: every cell read as text, then :func:`_to_float` per float column (names
    the first bad cell)."""
    frame = _read_csv_strings(path, REQUEST_COLUMNS, _read_prefix(path, length))
    out = pd.DataFrame(index=frame.index)
    for column in wanted:
        if column not in frame.columns:
            continue
        if column in REQUEST_FLOAT_COLUMNS or OPTIONAL_REQUEST_COLUMNS.get(column) == "float":
            out[column] = _to_float(frame, column, path)
        else:
            out[column] = frame[column].astype(str)
    return out


def _read_server(path: Path, notes: list[str]) -> pd.DataFrame:
    empty = pd.DataFrame(
        {c.name: pd.Series(dtype="float64" if c.dtype == "float64" else str) for c in SERVER_METRICS_SCHEMA}
    )
    if not path.is_file() or path.stat().st_size == 0:
        return empty
    length = _complete_length(path, notes)
    out = read_typed(path, SERVER_METRICS_SCHEMA, SERVER_COLUMNS, length)
    if out is None:
        frame = _read_csv_strings(path, SERVER_COLUMNS, _read_prefix(path, length))
        out = frame[list(SERVER_COLUMNS)].copy()
        for column in SERVER_METRICS_SCHEMA:
            if column.dtype == "float64":
                out[column.name] = _to_float(frame, column.name, path)
    if out.empty:
        return empty
    return out.reset_index(drop=True)


def _empty_client_load() -> pd.DataFrame:
    return pd.DataFrame(
        {
            c: pd.Series(dtype=str if c == "worker" else "int64" if c == "open_streams" else "float64")
            for c in CLIENT_LOAD_COLUMNS
        }
    )


def _read_client_load(path: Path) -> pd.DataFrame:
    """``client_load.csv`` typed (see :data:`CLIENT_LOAD_COLUMNS`); empty when absent."""
    if not path.is_file() or path.stat().st_size == 0:
        return _empty_client_load()
    frame = _read_csv_strings(path, CLIENT_LOAD_COLUMNS)
    out = pd.DataFrame({"worker": frame["worker"].astype(str)})
    for column in ("t_s", "cpu_cores", "loop_lag_ms_mean", "loop_lag_ms_max", "open_streams"):
        out[column] = _to_float(frame, column, path)
        bad = out[column].notna() & ~(out[column] >= 0) | np.isinf(out[column])
        if bad.any():
            first = int(bad.to_numpy().nonzero()[0][0])
            raise RunDirError(f"{path}: column {column!r} holds a negative or infinite value on data row {first + 1}")
    out["open_streams"] = out["open_streams"].fillna(0).round().astype("int64")
    return out[list(CLIENT_LOAD_COLUMNS)].reset_index(drop=True)


_WORKER_ENTRIES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "workers_lost": (("lost_at_s",), ("last_record_s",)),
    "workers_missing": (("from_s",), ("noticed_s", "to_s")),
}
"""run.json lists of per-worker objects: key -> (numeric fields, numeric-or-null fields)."""


def ladder_cut_note(shape: dict[str, Any], end_s: float) -> str | None:
    """Where a ladder whose last step has no recorded end was cut, or None (not a ladder, no steps).

    Parameters
    ----------
    shape : dict
        run.json ``shape``: ``kind``, ``ladder`` (users per planned step), ``steps`` (``index``,
        ``users``, ``start_s``, ``end_s``; Unix s).
    end_s : float
        The run's end (``ended_at_s``, or the last record's when there is none), Unix s.

    >>> ladder_cut_note({"kind": "ladder", "ladder": [1, 2, 4, 8], "steps": [
    ...     {"index": 0, "users": 1, "start_s": 0.0, "end_s": 4.0},
    ...     {"index": 1, "users": 2, "start_s": 4.0, "end_s": None}]}, 5.5)
    'the run was cut 1.5 s into step 1 (2 users) of the planned ladder 1, 2, 4, 8: step 0 completed; 4, 8 users not run'
    """
    steps = sorted(shape.get("steps") or [], key=lambda step: float(step["start_s"]))
    planned = [int(users) for users in shape.get("ladder") or []]
    if shape.get("kind") != "ladder" or not planned or not steps or steps[-1].get("end_s") is not None:
        return None
    last = steps[-1]
    done = [str(int(step["index"])) for step in steps[:-1]]
    left = planned[int(last["index"]) + 1 :]
    return (
        f"the run was cut {max(0.0, end_s - float(last['start_s'])):.1f} s into step {int(last['index'])} "
        f"({int(last['users'])} users) of the planned ladder {', '.join(map(str, planned))}: "
        + (f"step{'s' if len(done) > 1 else ''} {', '.join(done)} completed" if done else "no step completed")
        + (f"; {', '.join(map(str, left))} users not run" if left else "")
    )


def _check_workers_lost(meta: dict[str, Any], path: Path) -> None:
    """run.json ``workers_lost`` / ``workers_missing``, when present, must be lists of objects
    with a ``worker`` and the numeric fields of :data:`_WORKER_ENTRIES` (null where allowed)."""
    for key, (numeric, nullable) in _WORKER_ENTRIES.items():
        entries = meta.get(key)
        if entries is None:
            continue
        ok = isinstance(entries, list) and all(
            isinstance(w, dict)
            and "worker" in w
            and all(_is_number(w.get(name)) for name in numeric)
            and all(w.get(name) is None or _is_number(w.get(name)) for name in nullable)
            for w in entries
        )
        if not ok:
            fields = ", ".join(f'"{name}"' for name in ("worker", *numeric, *nullable))
            raise RunDirError(f"{path}: {key} must be a list of {{{fields}}} objects, got {entries!r:.200}")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _steps_frame(meta: dict[str, Any], path: Path, end_s: float) -> pd.DataFrame:
    raw = (meta.get("shape") or {}).get("steps") or []
    try:
        rows = sorted(
            (
                (
                    int(s["index"]),
                    float(s["users"]),
                    float(s["start_s"]),
                    math.nan if s.get("end_s") is None else float(s["end_s"]),
                )
                for s in raw
            ),
            key=lambda r: r[2],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise RunDirError(f"{path}: shape.steps needs index, users, start_s, end_s ({exc!r})") from exc
    steps = pd.DataFrame(rows, columns=list(STEP_COLUMNS))
    steps = steps.astype({"step": "int64", "target_users": "float64", "start_s": "float64", "end_s": "float64"})
    if any("rate_rps" in s for s in raw):
        rates = {int(s["index"]): s.get("rate_rps") for s in raw}
        try:
            steps["target_rate_rps"] = [float("nan") if rates[i] is None else float(rates[i]) for i in steps["step"]]
        except (TypeError, ValueError) as exc:
            raise RunDirError(f"{path}: shape.steps rate_rps must be a number ({exc!r})") from exc
    next_start = steps["start_s"].shift(-1).fillna(end_s)
    steps["end_s"] = np.where(steps["end_s"].isna(), next_start, steps["end_s"])
    return steps
