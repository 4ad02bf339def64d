"""Typed reading (llm_locust/analysis/rundir/csvread.py): the same frame as the string reader, the same refusals,
the partial last row found from the file's tail."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from llm_locust.analysis.rundir import reader as rundir
from llm_locust.analysis.rundir.csvread import complete_length, read_typed
from llm_locust.analysis.rundir.reader import LAZY_REQUEST_COLUMNS, RunDirError, load_run, read_requests
from llm_locust.analysis.schema import REQUEST_SCHEMA, SERVER_METRICS_SCHEMA
from llm_locust.client.record import CSV_COLUMNS
from llm_locust.master.runwriter import CsvAppender
from tests.analysis_factories import T0, make_request, server_row, write_run_dir, write_writer_rows, writer_rows

ALL = tuple(c.name for c in REQUEST_SCHEMA)


def test_typed_reading_gives_the_string_readers_frame(tmp_path):
    path = tmp_path / "requests.csv"
    write_writer_rows(path, writer_rows(300))
    length, partial = complete_length(path)

    fast = read_typed(path, REQUEST_SCHEMA, ALL, length)
    slow = rundir._read_requests_as_strings(path, length, ALL)

    assert not partial and fast is not None
    pd.testing.assert_frame_equal(fast, slow)
    assert fast["error_message"].str.contains("\r\n").any()  # a quoted newline read inside its cell


def test_float_cells_read_as_python_reads_them(tmp_path):
    cells = ["200", " 201 ", "2e2", "nan", "NaN", "nAn", "", "inf", "0.1", "1.7976931348623157e308"]
    run_dir = write_run_dir(tmp_path / "run", requests=[make_request(T0 + i) for i in range(len(cells))],
                            steps=[(1, T0, T0 + 60.0)])  # fmt: skip
    frame = pd.read_csv(run_dir / "requests.csv", dtype=str, keep_default_na=False)
    frame["status_code"] = cells
    frame.to_csv(run_dir / "requests.csv", index=False)

    result = load_run(run_dir).requests["status_code"].tolist()

    expected = [math.nan if c.strip().lower() in ("", "nan") else float(c) for c in cells]
    assert np.array_equal(result, expected, equal_nan=True)


@pytest.mark.parametrize("cell", ["abc", "NA", "-nan", "1d5", "0x10"])
def test_a_cell_no_reader_takes_is_refused_with_its_row(tmp_path, cell):
    run_dir = write_run_dir(tmp_path / "run", requests=[make_request(T0 + i) for i in range(3)],
                            steps=[(1, T0, T0 + 60.0)])  # fmt: skip
    frame = pd.read_csv(run_dir / "requests.csv", dtype=str, keep_default_na=False)
    frame.loc[1, "status_code"] = cell
    frame.to_csv(run_dir / "requests.csv", index=False)
    with pytest.raises(RunDirError, match=f"'status_code' holds 1 non-numeric value.*'{cell}' on data row 2"):
        load_run(run_dir)


def test_a_last_row_longer_than_the_tail_read_first(tmp_path):
    path = tmp_path / "requests.csv"
    rows = writer_rows(3)
    long_message = ('x"y,\n' * 40_000).strip()  # 200 kB of quotes, commas and newlines
    row = list(rows[2])
    row[CSV_COLUMNS.index("error_message")] = long_message
    writer = CsvAppender(path, CSV_COLUMNS)
    writer.write_rows(rows[:2])
    two_rows = path.stat().st_size
    writer.write_rows([tuple(row)])
    writer.close()
    data = path.read_bytes()
    for cut in (len(data) - 3, len(data) - 150_000, two_rows + 100_000):
        path.write_bytes(data[:cut])
        assert complete_length(path) == (two_rows, True), cut
        assert len(read_requests(path)) == 2, cut
    path.write_bytes(data)
    assert complete_length(path) == (len(data), False)
    assert read_requests(path)["error_message"].iloc[2] == long_message


def test_the_lean_load_leaves_the_times_and_ids_unread(tmp_path):
    path = tmp_path / "requests.csv"
    write_writer_rows(path, writer_rows(50))

    lean = read_requests(path, unread=LAZY_REQUEST_COLUMNS)
    full = read_requests(path)

    assert not set(LAZY_REQUEST_COLUMNS) & set(lean.columns)
    pd.testing.assert_frame_equal(lean, full.drop(columns=list(LAZY_REQUEST_COLUMNS)))


def test_server_metrics_typed_as_the_string_reader(tmp_path):
    run_dir = write_run_dir(tmp_path / "run", requests=[make_request(T0 + 1.0)], steps=[(1, T0, T0 + 10.0)],
                            server=[server_row(T0 + i, "vllm:num_requests_running", i / 3) for i in range(20)])  # fmt: skip
    path = run_dir / "server_metrics.csv"
    length, _ = complete_length(path)
    fast = read_typed(path, SERVER_METRICS_SCHEMA, tuple(c.name for c in SERVER_METRICS_SCHEMA), length)
    assert fast is not None
    pd.testing.assert_frame_equal(load_run(run_dir).server_samples, fast)
    assert fast["value"].tolist() == [i / 3 for i in range(20)]
