"""Typed reading of a run-directory CSV: pyarrow's CSV reader with each column's declared dtype.

The loader (:mod:`llm_locust.analysis.rundir.reader`) reads ``requests.csv`` and ``server_metrics.csv`` through
here first. Each column is parsed straight to the dtype :mod:`llm_locust.analysis.schema` declares for it
(``float64`` or ``str``), only the columns asked for are read, and the file is read only up to
the end of its last complete row (:func:`complete_length`), without holding the whole file in
memory.

This is a fast path, not a second validator: :func:`read_typed` returns None whenever the file
holds anything it would not read exactly as the string reader does (a cell pyarrow cannot
convert, a row with the wrong number of cells, bytes that are not UTF-8, a ``NaN`` spelled other
than ``nan``/``NaN``/``NAN``, a header with duplicate or missing names); the caller then reads
the file with the string reader, which reports the problem with its file, column and row.
``tests/unit/analysis/test_csvread.py`` checks that both give the same frame.

Format read: RFC 4180 CSV as Python's :mod:`csv` writer writes it (``llm_locust/master/runwriter.py``
``CsvAppender``: a header row, ``\\r\\n`` row ends, fields with commas, quotes or newlines
quoted), UTF-8.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from llm_locust.analysis.schema import Column

NULL_CELLS: tuple[str, ...] = ("", "nan", "NaN", "NAN")
"""Cells a float column reads as NaN ("not measured") on the fast path; any other spelling the
string reader accepts (``nAn``, `` nan ``) sends the file to the string reader."""

_CHUNK_BYTES = 1 << 23
_BLOCK_BYTES = 1 << 20
"""pyarrow's CSV block (larger blocks raise the reader's peak memory)."""
_FRAME_BYTES = 1 << 23


def complete_length(path: Path) -> tuple[int, bool]:
    """Length of the file's complete rows, and whether a partial last row follows them.

    A row is complete when its newline arrived (outside quotes: a quoted field may hold
    newlines) and it has as many fields as the header. The writer (``llm_locust/master/runwriter.py``,
    Python's :mod:`csv`) ends every row with ``\\r\\n`` and flushes whole batches, so only the last
    row can be partial: a run killed mid-write, a disk that filled up, a copy taken while the run
    was writing. Parsing it would give a silently wrong last value (``1234.5`` cut to ``12``).

    Reads the file in chunks (the quote count) and its tail (the last row), never all of it at once.

    Parameters
    ----------
    path : Path
        A CSV file with a header row.

    Returns
    -------
    (length, partial) : tuple of int and bool
        Bytes to read (the whole file unless ``partial``), and True when a partial last row was
        left out.
    """
    size = path.stat().st_size
    with open(path, "rb") as file:
        head = file.read(min(size, 1 << 16))
        header_end = head.find(b"\n") + 1
        while header_end <= 0 and len(head) < size:  # a header longer than the first read
            more = file.read(1 << 16)
            newline = more.find(b"\n")
            header_end = len(head) + newline + 1 if newline >= 0 else 0
            head += more
        if header_end <= 0 or header_end >= size:
            return size, False  # no data row (or not even a whole header: the header check reports it)
        file.seek(0)
        quotes = sum(chunk.count(b'"') for chunk in iter(lambda: file.read(_CHUNK_BYTES), b""))
        tail_bytes = 1 << 16
        while True:
            tail_start = max(0, size - tail_bytes)
            file.seek(tail_start)
            tail = file.read()
            start = _last_record_start(tail, tail_start, header_end, quotes)
            if start is not None:
                break
            tail_bytes *= 4
        header = head[:header_end]
    ends_with_newline = tail.endswith(b"\n")
    partial = not ends_with_newline or quotes % 2 == 1
    if not partial:
        record = tail[start - tail_start :]
        partial = bool(record.strip()) and _field_count(record) < _field_count(header)  # a blank line is no row
    if not partial or start < header_end:
        return size, False
    return start, True


def _field_count(record: bytes) -> int:
    """Fields of one CSV record: its commas outside quotes, plus one (no field size limit, unlike
    :mod:`csv`)."""
    data = np.frombuffer(record, dtype=np.uint8)
    inside = np.cumsum(data == ord('"')) % 2 == 1
    return int(np.count_nonzero((data == ord(",")) & ~inside)) + 1


def _last_record_start(tail: bytes, tail_start: int, header_end: int, quotes: int) -> int | None:
    """File offset where the last record starts (just after the newline before it, outside
    quotes), found in ``tail`` (the file from ``tail_start`` on); None when the tail is too short
    to tell. ``quotes``: the file's quote count."""
    start = len(tail) - (1 if tail.endswith(b"\n") else 0)
    while True:  # back to the newline that starts the last record (outside quotes)
        newline = tail.rfind(b"\n", 0, start)
        if newline < 0 and tail_start > 0:
            return None
        quotes -= tail.count(b'"', newline + 1, start)
        start = newline
        if quotes % 2 == 0 or newline + tail_start < header_end:
            return start + 1 + tail_start


def header_names(path: Path) -> list[str] | None:
    """The header row's names; None when the file is empty or its header is not UTF-8."""
    with open(path, "rb") as file:
        line = file.readline()
    try:
        text = line.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None
    return next(csv.reader(io.StringIO(text, newline="")), None)


class _Prefix(io.RawIOBase):
    """The first ``length`` bytes of a file, as a readable stream (pyarrow reads through it)."""

    def __init__(self, path: Path, length: int) -> None:
        self._file = open(path, "rb")
        self._left = length

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        view = memoryview(buffer)[: self._left]
        read = self._file.readinto(view)
        self._left -= read
        return read

    def close(self) -> None:
        self._file.close()
        super().close()


def _options(schema: tuple[Column, ...], names: list[str]) -> tuple:
    dtypes = {c.name: c.dtype for c in schema}
    convert = pacsv.ConvertOptions(
        column_types={n: pa.float64() if dtypes[n] == "float64" else pa.string() for n in names},
        include_columns=names,
        null_values=list(NULL_CELLS),
        strings_can_be_null=False,
        quoted_strings_can_be_null=False,
    )
    return pacsv.ReadOptions(block_size=_BLOCK_BYTES), pacsv.ParseOptions(newlines_in_values=True), convert


def _source(path: Path, length: int):
    return str(path) if length == path.stat().st_size else io.BufferedReader(_Prefix(path, length), 1 << 20)


def _wanted(path: Path, schema: tuple[Column, ...], columns: tuple[str, ...]) -> list[str] | None:
    """The asked-for columns the header has, in the asked order; None when the header has
    duplicate names or lacks a required column of ``schema`` (the string reader reports that)."""
    header = header_names(path)
    if header is None or len(set(header)) < len(header):
        return None
    if any(c.required and c.name not in header for c in schema):
        return None
    known = {c.name for c in schema}
    return [name for name in columns if name in header and name in known]


def read_typed(path: Path, schema: tuple[Column, ...], columns: tuple[str, ...], length: int) -> pd.DataFrame | None:
    """Read ``columns`` of a CSV with the dtypes ``schema`` declares, up to byte ``length``.

    Parameters
    ----------
    path : Path
        The CSV (header row first).
    schema : tuple of Column
        The file's columns (:mod:`llm_locust.analysis.schema`); ``float64`` columns read as float64 with
        :data:`NULL_CELLS` as NaN, ``str`` columns as strings ("" for empty).
    columns : tuple of str
        Columns wanted; those the header lacks are left out (the caller fills them in).
    length : int
        Bytes to read (:func:`complete_length`).

    Returns
    -------
    pandas.DataFrame or None
        The columns the header has, in ``columns`` order, float64 and ``str`` dtypes; None when
        the file needs the string reader (see the module docstring).
    """
    names = _wanted(path, schema, columns)
    if names is None:
        return None
    read, parse, convert = _options(schema, names)
    try:  # blocks parsed on every core (pyarrow's threads): 1M requests in 1.3 s against
        # 1.5-2.6 s for the one-thread streaming reader (iter_typed's)
        tables = [
            pacsv.read_csv(_source(path, length), read_options=read, parse_options=parse, convert_options=convert)
        ]
    except (pa.ArrowException, UnicodeDecodeError):
        return None
    return _to_frame(tables, names)


def iter_typed(
    path: Path, schema: tuple[Column, ...], columns: tuple[str, ...], length: int
) -> Iterator[pd.DataFrame] | None:
    """:func:`read_typed` a few MB at a time, for a pass over a file too large to hold whole: a
    generator of frames, or None when the header needs the string reader.

    The generator raises :class:`pyarrow.ArrowException` (or :class:`ValueError` for a ``NaN``
    the string reader would not read) at a block the fast path cannot read.
    """
    names = _wanted(path, schema, columns)
    tables = iter_typed_tables(path, schema, columns, length)
    if names is None or tables is None:
        return None
    return (_checked(table, names, path) for table in tables)


def iter_typed_tables(
    path: Path, schema: tuple[Column, ...], columns: tuple[str, ...], length: int
) -> Iterator[pa.Table] | None:
    """:func:`iter_typed`'s blocks as the Arrow tables pyarrow parsed (``string`` columns, nulls
    not yet NaN, no NaN check), a few MB each; None when the header needs the string reader.
    ``llm_locust.analysis.rundir.columnar`` writes ``requests.arrow`` from them."""
    names = _wanted(path, schema, columns)
    if names is None:
        return None
    read, parse, convert = _options(schema, names)

    def tables() -> Iterator[pa.Table]:
        batches: list[pa.RecordBatch] = []
        for batch in pacsv.open_csv(
            _source(path, length), read_options=read, parse_options=parse, convert_options=convert
        ):
            batches.append(batch)
            if sum(b.nbytes for b in batches) >= _FRAME_BYTES:
                yield pa.Table.from_batches(batches)
                batches = []
        if batches:
            yield pa.Table.from_batches(batches)

    return tables()


def _checked(table: pa.Table, names: list[str], path: Path) -> pd.DataFrame:
    frame = _to_frame([table], names)
    if frame is None:
        raise ValueError(f"{path}: a NaN cell only the string reader reads")
    return frame


def _to_frame(tables: list[pa.Table], names: list[str], *, checked: bool = False) -> pd.DataFrame | None:
    """Arrow table (the one item of ``tables``, taken out so that no other reference keeps it) -> frame (float64 nulls -> NaN, strings kept in Arrow memory as pandas' ``str``
    dtype); None when a float column holds a NaN parsed from text (``-nan``, ``nAn``): the string
    reader decides about those. Each column leaves the table as it is converted, so the two are
    never held whole at once. ``checked``: the NaN check was made when the table was written
    (``requests.arrow``)."""
    table = tables.pop()
    for name in [] if checked else names:
        column = table.column(name)
        if pa.types.is_floating(column.type) and column.null_count < len(column):
            if pc.any(pc.is_nan(column)).as_py():
                return None
    data = {}
    for name in names:
        column = table.column(name)
        table = table.drop_columns([name])
        if pa.types.is_floating(column.type):
            data[name] = column.to_numpy() if len(column) else np.zeros(0)  # nulls -> NaN
        else:
            data[name] = pd.Series(pd.arrays.ArrowStringArray(pc.cast(column, pa.large_string())), dtype=str)
        del column
    return pd.DataFrame(data, columns=names, copy=False)
