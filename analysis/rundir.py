"""Load and validate a run directory: the only contract between ``llm_locust/`` and ``analysis/``.

Files read (schema version 1, see DESIGN.md "Run directory"):

``run.json``
    Run metadata: ``schema_version``, ``started_at_s`` / ``ended_at_s`` (wall clock, Unix s;
    ``ended_at_s`` is null when the run was stopped without a clean end, by a timeout or Ctrl-C),
    ``host``, ``model``, ``workload``, and ``shape`` (``kind``, ``warmup_s``, ``steps`` with
    ``index``, ``users``, ``start_s``, ``end_s``; ``end_s`` may be null when the run was cut short).
``requests.csv``
    One row per request, columns :data:`REQUEST_COLUMNS`. Empty cell = not measured (NaN).
``server_metrics.csv`` (optional)
    Scraped Prometheus samples in long format, columns :data:`SERVER_COLUMNS`.
``server.log``, ``server_log_stamps.csv``, ``server_info.json``, ``server_log_format.toml``
    (optional) The server's log and what else it says about itself: :mod:`analysis.serverfiles`.

Every file is UTF-8; a byte that is not is reported with the file and its byte offset.
All validation happens here, at the edge; everything downstream trusts the dtypes set here.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.serverfiles import ServerFiles, ServerFilesError, read_server_files

SCHEMA_VERSIONS: tuple[int, ...] = (1,)
"""run.json schema versions this package can read."""

REQUEST_COLUMNS: tuple[str, ...] = (
    "request_id", "worker_id", "name", "t_start_s", "headers_ms", "ttft_ms", "e2e_ms",
    "prompt_tokens", "output_tokens", "tokens_source", "content_events", "finish_reason",
    "status_code", "error_kind", "error_message",
)
"""Columns every ``requests.csv`` has (file order)."""

OPTIONAL_REQUEST_COLUMNS: dict[str, str] = {
    "first_answer_ms": "float", "conn_wait_ms": "float", "connect_ms": "float", "sse_events": "float",
    "token_times_us": "str", "event_tokens": "str", "max_tokens": "float", "ignore_eos_violated": "float",
    "response_id": "str", "resent": "float",
}
"""Columns added after the first run directories (appended after :data:`REQUEST_COLUMNS`, in
this order): ``first_answer_ms`` (sent -> first answer-text event, ms), ``conn_wait_ms`` (wait
for a free connection before sending, ms), ``connect_ms`` (new connection's connect time, ms),
``sse_events`` (SSE data events received), ``token_times_us`` (arrival of each token event, µs
from the send, space-separated), ``event_tokens`` (tokens per token event, "" when unknown),
``max_tokens`` (requested limit, 0 = none named), ``ignore_eos_violated`` (0/1),
``response_id``, ``resent`` (0/1: sent again after a kept-alive connection closed unanswered).
Missing in an older file: float columns read as NaN (``conn_wait_ms``, ``ignore_eos_violated``,
``resent``: 0), string columns as "". ``analysis/itl.py`` derives ITL from them."""

REQUEST_FLOAT_COLUMNS: tuple[str, ...] = (
    "t_start_s", "headers_ms", "ttft_ms", "e2e_ms", "prompt_tokens", "output_tokens",
    "content_events", "status_code",
)
"""``requests.csv`` columns read as float64 (empty cell -> NaN); the others stay strings."""

ERROR_KINDS: frozenset[str] = frozenset({
    "connect_timeout", "ttft_timeout", "stall_timeout", "total_timeout", "connection_error",
    "http_4xx", "http_429", "http_5xx", "stream_error", "truncated", "bad_response",
})
"""The closed set of ``error_kind`` values; the empty string marks a success."""

SERVER_COLUMNS: tuple[str, ...] = ("t_s", "source", "metric", "labels", "value")
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
        older file lacks them).
    server_samples : pandas.DataFrame
        ``server_metrics.csv`` (columns :data:`SERVER_COLUMNS`; ``t_s`` and ``value`` float64),
        empty when the file is absent or empty.
    steps : pandas.DataFrame
        Load-shape steps: ``step`` (int64), ``target_users`` (float64, users), ``start_s`` and
        ``end_s`` (float64, wall clock Unix s; a null ``end_s`` becomes the next step's start,
        or :attr:`ended_at_s` for the last step). Sorted by ``start_s``.
    server_files : ServerFiles
        Server log, its arrival stamps, ``/props`` / ``/info`` bodies, user format file
        (:mod:`analysis.serverfiles`); empty when absent.
    inferred_end_s : float or None
        When ``run.json`` has no ``ended_at_s``: the end taken from the records (wall clock,
        Unix s; see :func:`last_record_s`); None after a clean stop.
    notes : tuple of str
        What the loader had to assume (e.g. :data:`UNCLEAN_END_NOTE`), for the report.
    """

    run_dir: Path
    meta: dict[str, Any]
    requests: pd.DataFrame
    server_samples: pd.DataFrame
    steps: pd.DataFrame
    server_files: ServerFiles = field(default_factory=ServerFiles)
    inferred_end_s: float | None = None
    notes: tuple[str, ...] = ()

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


def load_run(run_dir: Path | str, *, server_log: Path | str | None = None,
             server_log_format: Path | str | None = None) -> Run:
    """Read and validate a run directory.

    Parameters
    ----------
    run_dir : Path or str
        Directory holding ``run.json`` and ``requests.csv`` (and optionally
        ``server_metrics.csv`` and the server-side files of :mod:`analysis.serverfiles`).
    server_log, server_log_format : Path or str, optional
        A server log / user format file to read instead of the run directory's own.

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
        (:class:`analysis.serverfiles.ServerFilesError`).

    Notes
    -----
    A null (or absent) ``ended_at_s`` - a run stopped by a timeout or Ctrl-C - is accepted: the
    end is :func:`last_record_s` and :attr:`Run.notes` says so. A null ``end_s`` of the last
    step becomes that end as well.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: not a directory")
    meta = _read_meta(run_dir / "run.json")
    requests = _read_requests(run_dir / "requests.csv")
    server = _read_server(run_dir / "server_metrics.csv")
    inferred_end_s, notes = None, []
    if meta.get("ended_at_s") is None:
        inferred_end_s = last_record_s(requests, server, meta)
        notes.append(f"{UNCLEAN_END_NOTE} ({inferred_end_s - float(meta['started_at_s']):.1f} s "
                     "after the start)")
    end_s = float(meta["ended_at_s"]) if inferred_end_s is None else inferred_end_s
    steps = _steps_frame(meta, run_dir / "run.json", end_s)
    raw_steps = (meta.get("shape") or {}).get("steps") or []
    if raw_steps and max(raw_steps, key=lambda s: float(s["start_s"])).get("end_s") is None:
        last = steps.iloc[-1]
        notes.append(f"step {int(last['step'])} has no recorded end: it ends with the run "
                     f"({'the last record' if inferred_end_s is not None else 'ended_at_s'})")
    try:
        files = read_server_files(run_dir, server_log=server_log,
                                  server_log_format=server_log_format)
    except ServerFilesError as exc:
        raise RunDirError(str(exc)) from exc
    return Run(run_dir=run_dir, meta=meta, requests=requests, server_samples=server, steps=steps,
               server_files=files, inferred_end_s=inferred_end_s, notes=tuple(notes))


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
    return (f"{path}: not UTF-8 text: byte 0x{data[exc.start]:02x} at byte offset {exc.start} "
            f"(line {line}) ({exc.reason})")


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
    missing = [k for k in ("schema_version", "started_at_s") if meta.get(k) is None]
    if missing:
        raise RunDirError(f"{path}: missing keys {missing}")
    if meta["schema_version"] not in SCHEMA_VERSIONS:
        raise RunDirError(
            f"{path}: unknown schema_version {meta['schema_version']!r} "
            f"(this analysis reads {list(SCHEMA_VERSIONS)})"
        )
    return meta


def _read_csv_strings(path: Path, required: tuple[str, ...]) -> pd.DataFrame:
    """Read a CSV with every cell as a string ("" for empty) and check its header."""
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, na_filter=False,
                            encoding="utf-8")
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
    **{column: (0.0, MAX_REQUEST_MS) for column in (
        "headers_ms", "ttft_ms", "e2e_ms", "first_answer_ms", "conn_wait_ms", "connect_ms")},
    **{column: (0.0, math.inf) for column in (
        "prompt_tokens", "output_tokens", "content_events", "sse_events", "max_tokens")},
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


def _read_requests(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise RunDirError(f"{path}: missing (every run directory needs requests.csv)")
    frame = _read_csv_strings(path, REQUEST_COLUMNS)
    out = frame[list(REQUEST_COLUMNS)].copy()
    for column in REQUEST_FLOAT_COLUMNS:
        out[column] = _to_float(frame, column, path)
    for column, dtype in OPTIONAL_REQUEST_COLUMNS.items():
        if column not in frame.columns:
            default = "" if dtype == "str" else (0.0 if column in ("conn_wait_ms", "ignore_eos_violated", "resent") else np.nan)
            out[column] = pd.Series(default, index=frame.index, dtype=str if dtype == "str" else "float64")
        elif dtype == "str":
            out[column] = frame[column].astype(str)
        else:
            out[column] = _to_float(frame, column, path)
    out["error_kind"] = out["error_kind"].str.strip()
    unknown = sorted(set(out["error_kind"]) - ERROR_KINDS - {""})
    if unknown:
        raise RunDirError(
            f"{path}: unknown error_kind values {unknown}; known {sorted(ERROR_KINDS)}")
    if out["t_start_s"].isna().any():
        empty = int(out["t_start_s"].isna().sum())
        raise RunDirError(f"{path}: t_start_s is empty on {empty} row(s)")
    _check_plausible(out, path)
    return out.reset_index(drop=True)


def _read_server(path: Path) -> pd.DataFrame:
    empty = pd.DataFrame({
        "t_s": pd.Series(dtype="float64"), "source": pd.Series(dtype=str),
        "metric": pd.Series(dtype=str), "labels": pd.Series(dtype=str),
        "value": pd.Series(dtype="float64"),
    })
    if not path.is_file() or path.stat().st_size == 0:
        return empty
    frame = _read_csv_strings(path, SERVER_COLUMNS)
    if frame.empty:
        return empty
    out = frame[list(SERVER_COLUMNS)].copy()
    out["t_s"] = _to_float(frame, "t_s", path)
    out["value"] = _to_float(frame, "value", path)
    return out.reset_index(drop=True)


def _steps_frame(meta: dict[str, Any], path: Path, end_s: float) -> pd.DataFrame:
    raw = (meta.get("shape") or {}).get("steps") or []
    try:
        rows = sorted(
            ((int(s["index"]), float(s["users"]), float(s["start_s"]),
              math.nan if s.get("end_s") is None else float(s["end_s"])) for s in raw),
            key=lambda r: r[2],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise RunDirError(
            f"{path}: shape.steps needs index, users, start_s, end_s ({exc!r})") from exc
    steps = pd.DataFrame(rows, columns=list(STEP_COLUMNS))
    steps = steps.astype({"step": "int64", "target_users": "float64",
                          "start_s": "float64", "end_s": "float64"})
    next_start = steps["start_s"].shift(-1).fillna(end_s)
    steps["end_s"] = np.where(steps["end_s"].isna(), next_start, steps["end_s"])
    return steps
