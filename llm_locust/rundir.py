"""Writing the run directory (see DESIGN.md, "Run directory"): the only contract with ``analysis/``.

Files written here: ``run.json`` (metadata, rewritten whenever it changes), ``requests.csv``
(one row per request, :data:`~llm_locust.record.CSV_COLUMNS`) and ``server_metrics.csv``
(long format: :data:`SERVER_METRICS_COLUMNS`). Rows are flushed as they are written, so a run
that is cut short keeps everything it measured.
"""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

from llm_locust.record import CSV_COLUMNS

SCHEMA_VERSION = 1
SERVER_METRICS_COLUMNS: tuple[str, ...] = ("t_s", "source", "metric", "labels", "value")
"""``server_metrics.csv``: scrape wall time (Unix s), endpoint URL, sample name as exposed,
labels as a JSON object with sorted keys, value."""


def _cell(value):
    """CSV cell of one value: NaN and None become empty (not measured), never a number."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return value


class CsvAppender:
    """Append rows to a CSV file with a fixed header, flushing after every batch.

    Parameters
    ----------
    path : Path
        File to create (with the header) or append to.
    columns : tuple of str
        Header; every row must have this many cells.

    Raises
    ------
    ValueError
        A row with the wrong number of cells (nothing of that batch is written).
    """

    def __init__(self, path: Path, columns: tuple[str, ...]) -> None:
        self.path = path
        self.columns = columns
        self.rows_written = 0
        new = not path.exists() or path.stat().st_size == 0
        self._file = open(path, "a", newline="", encoding="utf-8")
        self._writer = csv.writer(self._file)
        if new:
            self._writer.writerow(columns)
            self._file.flush()

    def write_rows(self, rows) -> None:
        rows = [tuple(row) for row in rows]
        bad = [row for row in rows if len(row) != len(self.columns)]
        if bad:
            raise ValueError(f"{self.path.name}: row with {len(bad[0])} cells, expected {len(self.columns)}: {bad[0]!r}")
        self._writer.writerows([_cell(value) for value in row] for row in rows)
        self._file.flush()
        self.rows_written += len(rows)

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


class RunDirectory:
    """One run directory on the master: its metadata file and its two appenders.

    Parameters
    ----------
    path : str or Path
        Folder to write into; created if missing. Existing ``requests.csv`` or
        ``server_metrics.csv`` there is an error (runs are never mixed).

    Raises
    ------
    FileExistsError
        The folder already holds a ``requests.csv``.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        if (self.path / "requests.csv").exists():
            raise FileExistsError(f"{self.path / 'requests.csv'} exists: use a new --run-dir for each run")
        self.requests = CsvAppender(self.path / "requests.csv", CSV_COLUMNS)
        self.server_metrics = CsvAppender(self.path / "server_metrics.csv", SERVER_METRICS_COLUMNS)

    def write_meta(self, meta: dict) -> None:
        """Write ``run.json`` atomically (temp file + rename) with ``schema_version`` set."""
        target = self.path / "run.json"
        tmp = target.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"schema_version": SCHEMA_VERSION, **meta}, indent=2, default=str) + "\n")
        os.replace(tmp, target)

    def close(self) -> None:
        self.requests.close()
        self.server_metrics.close()
