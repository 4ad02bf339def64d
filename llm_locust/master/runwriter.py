"""Writing the run directory (see DESIGN.md, "Run directory"): the only contract with ``llm_locust/analysis/``.

Files written here: ``run.json`` (metadata, rewritten whenever it changes), ``requests.csv``
(one row per request, :data:`~llm_locust.client.record.CSV_COLUMNS`), ``requests.arrow`` (the same rows in
columns, written at the end: :mod:`llm_locust.analysis.rundir.columnar`), ``server_metrics.csv``
(long format: :data:`SERVER_METRICS_COLUMNS`), ``server_scrapes.csv`` (one row per scrape
attempt: :data:`~llm_locust.analysis.schema.SCRAPE_COLUMNS`) and ``client_load.csv`` (each worker's load once
a second: :data:`~llm_locust.analysis.schema.CLIENT_LOAD_COLUMNS`); file names, columns and the schema
version come from :mod:`llm_locust.analysis.schema`. Rows are flushed as they are written, so a run
that is cut short keeps everything it measured.
"""

from __future__ import annotations

import csv
import json
import logging
import os
from pathlib import Path

from llm_locust.analysis.schema import (
    CLIENT_LOAD_COLUMNS,
    CLIENT_LOAD_CSV,
    REQUESTS_ARROW,
    REQUESTS_CSV,
    RUN_JSON,
    SCHEMA_VERSION,
    SCRAPE_COLUMNS,
    SERVER_METRICS_COLUMNS,
    SERVER_METRICS_CSV,
    SERVER_SCRAPES_CSV,
)
from llm_locust.client.record import CSV_COLUMNS

logger = logging.getLogger(__name__)

__all__ = ["SCHEMA_VERSION", "SERVER_METRICS_COLUMNS", "CsvAppender", "RequestLines", "RunDirectory", "csv_cells"]


def csv_cells(row) -> list:
    """The cells of one row as :class:`CsvAppender` writes them: NaN and None become empty (not
    measured), never a number; for :func:`csv.writer`.

    >>> csv_cells(("a", 1, float("nan"), None, 2.5))
    ['a', 1, '', '', 2.5]
    """
    # inline (one call per row, not per cell); ``v != v`` is NaN's test for a float
    return ["" if value is None or (isinstance(value, float) and value != value) else value for value in row]


class _Lines:
    """A file-like sink for :func:`csv.writer` that keeps each written line (one per ``writerow``)."""

    def __init__(self, lines: list[str]) -> None:
        self.write = lines.append


_TOKEN_TIMES = CSV_COLUMNS.index("token_times_us")


class RequestLines:
    """``requests.csv`` lines of rows (:meth:`RequestRecord.to_row
    <llm_locust.client.record.RequestRecord.to_row>`), exactly as :func:`csv.writer` writes
    :func:`csv_cells` of them, made cheaper where the writer is slow.

    The writer copies each cell character by character, checking each for a delimiter, quote or
    line end: 22 µs of a worker's CPU per request for the ``token_times_us`` cell of a 256-token
    answer (1.7 kB; measured, 4.5 µs for all the other cells). That cell is the stream's token
    instants, integers separated by spaces, so it needs no quoting; whether it does is four
    ``in`` tests (``memchr``, 0.1 µs), and then the line is the writer's lines of the cells
    before and after it with the cell between them. A cell that needs quoting takes the writer.

    >>> rows = RequestLines()
    >>> row = ["id", "w1", 'a "name"'] + [1.5] * 16 + ["10 250 380"] + [""] * 13
    >>> rows.line(row).split(",")[18:21]
    ['1.5', '10 250 380', '']
    """

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._writer = csv.writer(_Lines(self._lines))

    def line(self, row) -> str:
        """The CSV line of ``row`` (one cell per column of
        :data:`~llm_locust.client.record.CSV_COLUMNS`), ending with ``\\r\\n``."""
        cells = csv_cells(row)
        lines = self._lines
        writerow = self._writer.writerow
        times = cells[_TOKEN_TIMES]
        if times.__class__ is str and not ("," in times or '"' in times or "\r" in times or "\n" in times):
            # both parts have more than one cell: csv.writer's one special case, a row of
            # one empty cell written as "", cannot arise in either
            writerow(cells[:_TOKEN_TIMES])
            writerow(cells[_TOKEN_TIMES + 1 :])
            after = lines.pop()
            return lines.pop()[:-2] + "," + times + "," + after
        writerow(cells)
        return lines.pop()


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
            raise ValueError(
                f"{self.path.name}: row with {len(bad[0])} cells, expected {len(self.columns)}: {bad[0]!r}"
            )
        self._writer.writerows(csv_cells(row) for row in rows)
        self._file.flush()
        self.rows_written += len(rows)

    def write_text(self, text: bytes | str, rows: int) -> None:
        """Append ``rows`` rows already formatted as CSV lines (by :func:`csv_cells` and
        :func:`csv.writer`, each ending with a line break), then flush. ``bytes`` are UTF-8 and go
        to the file's buffer as they are (the text layer is flushed after every write here)."""
        if isinstance(text, bytes):
            self._file.buffer.write(text)
            self._file.buffer.flush()
        else:
            self._file.write(text)
            self._file.flush()
        self.rows_written += rows

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


class RunDirectory:
    """One run directory on the master: its metadata file and its appenders.

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
        if (self.path / REQUESTS_CSV).exists():
            raise FileExistsError(f"{self.path / REQUESTS_CSV} exists: use a new --run-dir for each run")
        self.requests = CsvAppender(self.path / REQUESTS_CSV, CSV_COLUMNS)
        self.server_metrics = CsvAppender(self.path / SERVER_METRICS_CSV, SERVER_METRICS_COLUMNS)
        self.server_scrapes = CsvAppender(self.path / SERVER_SCRAPES_CSV, SCRAPE_COLUMNS)
        self.client_load = CsvAppender(self.path / CLIENT_LOAD_CSV, CLIENT_LOAD_COLUMNS)
        self._columnar_done = False

    def write_meta(self, meta: dict) -> None:
        """Write ``run.json`` atomically (temp file + rename) with ``schema_version`` set."""
        target = self.path / RUN_JSON
        tmp = target.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"schema_version": SCHEMA_VERSION, **meta}, indent=2, default=str) + "\n")
        os.replace(tmp, target)

    def close(self, *, columnar: bool = True) -> None:
        """Close the files; then (``columnar``) write ``requests.arrow`` from ``requests.csv``
        (:func:`llm_locust.analysis.rundir.columnar.write_requests_arrow`: the same rows typed in
        columns, which the analysis reads instead of parsing the CSV; about 1 s per million
        requests). A failure to write it is logged, never raised: the CSV holds the run."""
        self.requests.close()
        self.server_metrics.close()
        self.server_scrapes.close()
        self.client_load.close()
        if columnar and not self._columnar_done:
            self._columnar_done = True
            from llm_locust.analysis.rundir.columnar import write_requests_arrow

            try:
                write_requests_arrow(self.path / REQUESTS_CSV)
            except OSError as exc:
                logger.warning("could not write %s: %s", REQUESTS_ARROW, exc)
