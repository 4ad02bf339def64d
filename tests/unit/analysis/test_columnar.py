"""``requests.arrow`` (llm_locust/analysis/rundir/columnar.py): the frames read from it are the CSV reader's
frames, a CSV that changed since is read as CSV, and a CSV the typed reader refuses gets no file."""

from __future__ import annotations

import pandas as pd
import pytest

from llm_locust.analysis.rundir.columnar import iter_request_frames, open_requests_arrow, write_requests_arrow
from llm_locust.analysis.rundir.csvread import complete_length, iter_typed
from llm_locust.analysis.rundir.reader import LAZY_REQUEST_COLUMNS, RunDirError, read_requests
from llm_locust.analysis.schema import REQUEST_SCHEMA, REQUESTS_ARROW
from llm_locust.client.record import CSV_COLUMNS
from llm_locust.master.runwriter import RunDirectory
from tests.analysis_factories import write_writer_rows, writer_rows

ALL = tuple(c.name for c in REQUEST_SCHEMA)


def _write_with_cell(path, rows, row: int, column: str, cell: str) -> None:
    """Write ``rows`` with ``cell`` as the text of ``column`` in data row ``row`` (from 0)."""
    rows = [list(r) for r in rows]
    rows[row][CSV_COLUMNS.index(column)] = cell
    write_writer_rows(path, rows)


def _csv_only(path, **kwargs) -> tuple[pd.DataFrame, list[str]]:
    """``read_requests`` with the Arrow file moved away (the CSV path), then moved back."""
    arrow = path.with_name(REQUESTS_ARROW)
    hidden = path.with_name("hidden.arrow")
    arrow.rename(hidden)
    try:
        notes: list[str] = []
        return read_requests(path, notes, **kwargs), notes
    finally:
        hidden.rename(arrow)


@pytest.mark.parametrize("unread", [(), LAZY_REQUEST_COLUMNS])
def test_the_arrow_file_gives_the_csv_readers_frame(tmp_path, unread):
    path = tmp_path / "requests.csv"
    write_writer_rows(path, writer_rows(3000, worker_id="w,1"))
    assert write_requests_arrow(path) == tmp_path / REQUESTS_ARROW
    assert open_requests_arrow(path) is not None  # the columnar path is the one taken below

    notes: list[str] = []
    columnar = read_requests(path, notes, unread=unread)
    csv_frame, csv_notes = _csv_only(path, unread=unread)

    pd.testing.assert_frame_equal(columnar, csv_frame)
    assert notes == csv_notes == []
    assert len(columnar) == 3000 and columnar["error_message"].str.contains("\r\n").any()
    assert columnar["ttft_ms"].isna().any() and columnar["worker_id"].eq("w,1").all()


def test_blocks_from_the_arrow_file_are_the_csv_blocks(tmp_path):
    path = tmp_path / "requests.csv"
    write_writer_rows(path, writer_rows(2000, seed=1, worker_id="w,1"))
    write_requests_arrow(path)
    columns = ("t_start_s", "e2e_ms", "error_kind", "token_times_us", "event_tokens")
    length, _ = complete_length(path)
    from_csv = pd.concat(list(iter_typed(path, REQUEST_SCHEMA, columns, length)), ignore_index=True)
    from_arrow = pd.concat(list(iter_request_frames(path, columns)), ignore_index=True)
    pd.testing.assert_frame_equal(from_arrow, from_csv)


def test_a_partial_last_row_is_left_out_and_noted_on_both_paths(tmp_path):
    path = tmp_path / "requests.csv"
    write_writer_rows(path, writer_rows(50, worker_id="w,1"))
    with open(path, "ab") as file:
        file.write(b"w-50,w,chat,1764504000.5,1.5,")  # cut mid-write
    write_requests_arrow(path)
    assert open_requests_arrow(path).partial

    notes: list[str] = []
    columnar = read_requests(path, notes)
    csv_frame, csv_notes = _csv_only(path)

    pd.testing.assert_frame_equal(columnar, csv_frame)
    assert len(columnar) == 50
    assert notes == csv_notes and len(notes) == 1 and "partial row" in notes[0]


def test_a_csv_that_changed_since_is_read_as_csv(tmp_path):
    path = tmp_path / "requests.csv"
    rows = writer_rows(40, worker_id="w,1")
    write_writer_rows(path, rows[:30])
    write_requests_arrow(path)
    write_writer_rows(path, rows[30:])  # appended after the Arrow file was written

    assert open_requests_arrow(path) is None
    frame = read_requests(path)
    assert len(frame) == 40 and frame["request_id"].tolist() == [f"w-{i}" for i in range(40)]
    blocks = iter_request_frames(path, ("request_id",))
    assert sum(len(b) for b in blocks) == 40

    # an edit that keeps the size: one digit changed near the end
    data = bytearray(path.read_bytes())
    write_requests_arrow(path)
    at = data.rindex(b"w-39")
    data[at + 3] = ord("8")
    path.write_bytes(bytes(data))
    assert open_requests_arrow(path) is None
    assert read_requests(path)["request_id"].iloc[-1] == "w-38"


def test_no_arrow_file_for_a_csv_the_typed_reader_refuses(tmp_path):
    path = tmp_path / "requests.csv"
    _write_with_cell(path, writer_rows(20, worker_id="w,1"), 4, "headers_ms", "soon")

    assert write_requests_arrow(path) is None
    assert not (tmp_path / REQUESTS_ARROW).exists() and not list(tmp_path.glob("*.tmp"))
    with pytest.raises(RunDirError, match="'headers_ms'.*'soon' on data row 5"):
        read_requests(path)


def test_a_nan_spelled_otherwise_gets_no_arrow_file(tmp_path):
    path = tmp_path / "requests.csv"
    _write_with_cell(path, writer_rows(10, worker_id="w,1"), 2, "headers_ms", "nAn")
    assert write_requests_arrow(path) is None


def test_the_master_writes_the_arrow_file_when_it_closes_the_run_directory(tmp_path):
    run_dir = RunDirectory(tmp_path / "run")
    rows = writer_rows(25, worker_id="w,1")
    run_dir.requests.write_rows(rows)
    assert not (tmp_path / "run" / REQUESTS_ARROW).exists()  # written at the end, not during the run
    run_dir.close()
    arrow = open_requests_arrow(tmp_path / "run" / "requests.csv")
    assert arrow is not None and arrow.num_rows == 25
    assert read_requests(tmp_path / "run" / "requests.csv")["request_id"].tolist() == [r[0] for r in rows]


def test_an_empty_csv_gets_no_arrow_file(tmp_path):
    run_dir = RunDirectory(tmp_path / "run")
    run_dir.close()
    assert not (tmp_path / "run" / REQUESTS_ARROW).exists()
    assert read_requests(tmp_path / "run" / "requests.csv").empty
