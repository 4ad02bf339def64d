"""``requests.arrow``: the run directory's per-request records as an Arrow IPC file, beside ``requests.csv``.

``requests.csv`` stays the record people read and the one the analysis falls back to; this file
is the same rows in columns, typed, for the analysis to read without parsing text. The master
writes it at the end of a run (``llm_locust/master/runwriter.py``, ``RunDirectory.close``) from
``requests.csv`` itself, parsed by the very reader the analysis uses on the CSV
(:func:`llm_locust.analysis.rundir.csvread.iter_typed`: pyarrow's CSV reader with each column's
dtype from :data:`llm_locust.analysis.schema.REQUEST_SCHEMA`), so both paths give the same
frames, bit for bit. A run directory without the file (written before it existed, or a run
killed before its end) is read from the CSV as before.

Format written and read: the Arrow IPC file format (random access; `Arrow columnar format
<https://arrow.apache.org/docs/format/Columnar.html#ipc-file-format>`_), uncompressed, read
through a memory map: a column not asked for is never read from disk, and a column asked for
is not copied (strings stay in the mapped file). Columns: the CSV header's columns that the
schema knows, in header order; ``float64`` for the schema's float columns (an empty cell or
``nan``/``NaN``/``NAN`` is null), ``large_string`` for the others ("" for empty). Record
batches of about :data:`BATCH_ROWS` rows. Schema metadata ties the file to the CSV it came from:

``llm_locust.csv_bytes``
    Size of ``requests.csv`` when it was converted; the file is used only while the CSV has
    that size and the same :func:`fingerprint` (``llm_locust.csv_fingerprint``), so a CSV that
    grew or was edited since is read as CSV.
``llm_locust.csv_partial``
    ``"1"`` when the CSV ended in a partial row (cut mid-write), which was left out, as the CSV
    reader leaves it out.

The file is not written when the CSV holds anything the typed reader refuses (the string
reader then names the bad cell, as before): a cell that is no number, a ``NaN`` spelled
otherwise, bytes that are not UTF-8, a malformed row or header.
"""

from __future__ import annotations

import hashlib
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from llm_locust.analysis.rundir.csvread import _to_frame, complete_length, iter_typed
from llm_locust.analysis.schema import REQUEST_SCHEMA, REQUESTS_ARROW

BATCH_ROWS = 65_536
"""Rows per record batch written (a block the streaming readers hand on at once)."""

_FRAME_BYTES = 1 << 23
"""Bytes of the asked-for columns per frame :func:`iter_request_frames` yields (as ``iter_typed``)."""

_FINGERPRINT_BYTES = 1 << 16
_META_BYTES = b"llm_locust.csv_bytes"
_META_PRINT = b"llm_locust.csv_fingerprint"
_META_PARTIAL = b"llm_locust.csv_partial"


def fingerprint(path: Path) -> str:
    """BLAKE2b of a file's size, first and last 64 KiB (hex): cheap at any size, and it changes
    when rows are appended, cut, or edited near either end."""
    size = path.stat().st_size
    digest = hashlib.blake2b(str(size).encode(), digest_size=16)
    with open(path, "rb") as file:
        digest.update(file.read(_FINGERPRINT_BYTES))
        file.seek(max(0, size - _FINGERPRINT_BYTES))
        digest.update(file.read(_FINGERPRINT_BYTES))
    return digest.hexdigest()


def write_requests_arrow(csv_path: Path, arrow_path: Path | None = None) -> Path | None:
    """Write ``requests.arrow`` (the module docstring) from ``requests.csv``.

    Streams the CSV a block at a time, so memory stays at a few batches whatever the file's size.
    Written to a temporary name and renamed, so a reader never sees half a file.

    Parameters
    ----------
    csv_path : Path
        ``requests.csv`` (columns :data:`llm_locust.analysis.schema.REQUEST_SCHEMA`, as the
        master writes it).
    arrow_path : Path, optional
        Where to write; default ``requests.arrow`` beside ``csv_path``.

    Returns
    -------
    Path or None
        The file written; None when the CSV is missing or holds anything the typed reader refuses
        (then no file is left, and the analysis reads the CSV).

    Raises
    ------
    OSError
        The file cannot be written.
    """
    arrow_path = csv_path.with_name(REQUESTS_ARROW) if arrow_path is None else arrow_path
    if not csv_path.is_file():
        return None
    size, print_ = csv_path.stat().st_size, fingerprint(csv_path)
    length, partial = complete_length(csv_path)
    names = tuple(c.name for c in REQUEST_SCHEMA)
    frames = _typed_batches(csv_path, names, length)
    tmp = arrow_path.with_name(arrow_path.name + ".tmp")
    writer = None
    try:
        if frames is None:
            return None
        pending: list[pa.RecordBatch] = []
        rows = 0
        for batch in frames:
            if writer is None:
                meta = {
                    _META_BYTES: str(size).encode(),
                    _META_PRINT: print_.encode(),
                    _META_PARTIAL: b"1" if partial else b"0",
                }
                writer = ipc.new_file(str(tmp), batch.schema.with_metadata(meta))
            pending.append(batch)
            rows += batch.num_rows
            if rows >= BATCH_ROWS:
                writer.write_table(pa.Table.from_batches(pending).combine_chunks())
                pending, rows = [], 0
        if writer is None:  # no data row: the CSV reader handles an empty file as it always did
            return None
        if pending:
            writer.write_table(pa.Table.from_batches(pending).combine_chunks())
        writer.close()
        writer = None
        if csv_path.stat().st_size != size or fingerprint(csv_path) != print_:
            return None  # the CSV changed meanwhile
        os.replace(tmp, arrow_path)
        return arrow_path
    except (pa.ArrowException, UnicodeDecodeError, ValueError):
        return None
    finally:
        if writer is not None:
            writer.close()
        tmp.unlink(missing_ok=True)


def _typed_batches(path: Path, names: tuple[str, ...], length: int) -> Iterator[pa.RecordBatch] | None:
    """The CSV's record batches as :func:`~llm_locust.analysis.rundir.csvread.iter_typed` parses them, strings as
    ``large_string``; raises :class:`ValueError` at a NaN parsed from text (the typed reader's
    refusal, :func:`~llm_locust.analysis.rundir.csvread._to_frame`)."""
    from llm_locust.analysis.rundir.csvread import iter_typed_tables

    tables = iter_typed_tables(path, REQUEST_SCHEMA, names, length)
    if tables is None:
        return None

    def batches() -> Iterator[pa.RecordBatch]:
        for table in tables:
            columns = []
            for column in table.columns:
                if pa.types.is_floating(column.type):
                    if column.null_count < len(column) and pc.any(pc.is_nan(column)).as_py():
                        raise ValueError(f"{path}: a NaN cell only the string reader reads")
                    columns.append(column)
                else:
                    columns.append(pc.cast(column, pa.large_string()))
            yield from pa.table(columns, names=table.column_names).to_batches()

    return batches()


class RequestsArrow:
    """An open ``requests.arrow`` that matches its ``requests.csv`` (:func:`open_requests_arrow`).

    Attributes
    ----------
    path : Path
        The Arrow file.
    names : tuple of str
        Its columns (the CSV header's known columns, in header order).
    partial : bool
        The CSV ended in a partial row, left out here (as the CSV reader leaves it out).
    """

    def __init__(self, path: Path, mapped: mmap.mmap, reader: ipc.RecordBatchFileReader, partial: bool) -> None:
        self.path = path
        self._map = mapped
        self._reader = reader
        self.names = tuple(reader.schema.names)
        self.partial = partial

    @property
    def num_rows(self) -> int:
        """Rows (requests) in the file."""
        return sum(self._reader.get_batch(i).num_rows for i in range(self._reader.num_record_batches))

    def frame(self, columns: tuple[str, ...]) -> pd.DataFrame:
        """The asked-for columns the file has, in ``columns`` order, as
        :func:`llm_locust.analysis.rundir.csvread.read_typed` gives them (float64 with NaN for
        empty, ``str`` backed by Arrow)."""
        names = [name for name in columns if name in self.names]
        return _to_frame([self._reader.read_all().select(names)], names, checked=True)

    def frames(self, columns: tuple[str, ...]) -> Iterator[pd.DataFrame]:
        """:meth:`frame` a few MB at a time (as :func:`~llm_locust.analysis.rundir.csvread.iter_typed` yields them)."""
        names = [name for name in columns if name in self.names]
        batches: list[pa.RecordBatch] = []
        held = 0
        for i in range(self._reader.num_record_batches):
            batch = self._reader.get_batch(i).select(names)
            batches.append(batch)
            held += batch.nbytes
            if held >= _FRAME_BYTES:
                yield _to_frame([pa.Table.from_batches(batches)], names, checked=True)
                batches, held = [], 0
                self._release()
        if batches:
            yield _to_frame([pa.Table.from_batches(batches)], names, checked=True)
            self._release()

    def _release(self) -> None:
        """Drop the mapped pages read so far from this process's memory (``MADV_DONTNEED``): a
        pass over the token times would otherwise keep every page it read resident (counted in
        the RSS, ~0.5 GB per million requests). The file is mapped read-only, so a page used
        again is read back from the file (the page cache), the same bytes."""
        if hasattr(mmap, "MADV_DONTNEED"):
            self._map.madvise(mmap.MADV_DONTNEED)


def open_requests_arrow(csv_path: Path) -> RequestsArrow | None:
    """``requests.arrow`` beside ``csv_path`` when it is there, readable, and was written from this
    very CSV (same size and :func:`fingerprint`); None otherwise (read the CSV).

    Parameters
    ----------
    csv_path : Path
        ``requests.csv``.
    """
    path = csv_path.with_name(REQUESTS_ARROW)
    if not path.is_file() or not csv_path.is_file():
        return None
    try:
        with open(path, "rb") as file:
            mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        reader = ipc.open_file(pa.BufferReader(pa.py_buffer(mapped)))
    except (pa.ArrowException, OSError, ValueError):  # ValueError: an empty file cannot be mapped
        return None
    meta = reader.schema.metadata or {}
    try:
        size = int(meta.get(_META_BYTES, b"-1"))
    except ValueError:
        return None
    if size != csv_path.stat().st_size or meta.get(_META_PRINT, b"").decode() != fingerprint(csv_path):
        return None
    return RequestsArrow(path, mapped, reader, meta.get(_META_PARTIAL) == b"1")


def iter_request_frames(csv_path: Path, columns: tuple[str, ...]) -> Iterator[pd.DataFrame] | None:
    """``requests.csv``'s ``columns`` a few MB at a time: from ``requests.arrow`` when it matches
    the CSV (:func:`open_requests_arrow`), else from the CSV by
    :func:`~llm_locust.analysis.rundir.csvread.iter_typed` (its complete rows).

    Returns
    -------
    iterator of pandas.DataFrame, or None
        None when the CSV is missing or its header needs the string reader. A CSV block the typed
        reader refuses raises as :func:`~llm_locust.analysis.rundir.csvread.iter_typed`'s generator does.
    """
    arrow = open_requests_arrow(csv_path)
    if arrow is not None:
        return arrow.frames(columns)
    if not csv_path.is_file():
        return None
    length, _ = complete_length(csv_path)
    return iter_typed(csv_path, REQUEST_SCHEMA, columns, length)
