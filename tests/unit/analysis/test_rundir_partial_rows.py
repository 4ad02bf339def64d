"""A ``requests.csv`` (or ``server_metrics.csv``) cut mid-write: the partial last row is dropped
and reported, never read as a (wrong) value. Every cut position of a small file written by the
real writer (``llm_locust/master/runwriter.py`` ``CsvAppender``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_locust.analysis.rundir.reader import load_run
from llm_locust.master.runwriter import CsvAppender
from tests.analysis_factories import REQUEST_COLUMNS, T0, make_request, write_run_dir

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)

NOTE = "requests.csv ends in a partial row (cut mid-write?): 1 row dropped"


def _write(run_dir: Path) -> tuple[bytes, int, list[int], list[dict]]:
    """A run directory whose requests.csv is written row by row by the real writer; returns the
    file's bytes, the header's end and each row's end (file size after its write)."""
    rows = [
        make_request(T0 + 1.0, e2e_ms=1234.5, ttft_ms=101.25, output_tokens=64),
        make_request(T0 + 2.0, error_kind="http_5xx"),
        make_request(T0 + 3.0, e2e_ms=987.75, ttft_ms=55.5, output_tokens=17),
    ]
    rows[1]["error_message"] = 'upstream said "no",\nthen closed'  # quotes, comma, newline
    write_run_dir(run_dir, requests=[], steps=[(1, T0, T0 + 10.0)])
    path = run_dir / "requests.csv"
    path.unlink()
    writer = CsvAppender(path, REQUEST_COLUMNS)
    header_end = path.stat().st_size
    ends = []
    for row in rows:
        writer.write_rows([tuple(row[c] for c in REQUEST_COLUMNS)])
        ends.append(path.stat().st_size)
    writer.close()
    return path.read_bytes(), header_end, ends, rows


def test_every_cut_of_the_last_rows_drops_only_the_partial_row(tmp_path):
    data, header_end, ends, rows = _write(tmp_path / "run")
    path = tmp_path / "run" / "requests.csv"
    for cut in range(header_end, len(data) + 1):
        path.write_bytes(data[:cut])
        run = load_run(tmp_path / "run")
        complete = sum(end <= cut for end in ends)
        partial = cut not in (header_end, *ends)
        assert len(run.requests) == complete, cut
        assert (NOTE in run.notes) == partial, cut
        for k in range(complete):  # every kept row is whole
            assert run.requests["request_id"].iloc[k] == rows[k]["request_id"]
            assert run.requests["e2e_ms"].iloc[k] == rows[k]["e2e_ms"]
            assert run.requests["error_message"].iloc[k] == rows[k]["error_message"]


def test_a_last_row_with_too_few_fields_is_dropped(tmp_path):
    data, _, ends, _ = _write(tmp_path / "run")
    path = tmp_path / "run" / "requests.csv"
    path.write_bytes(data + b"w0-x,w0,chat,1700000004.0\r\n")
    run = load_run(tmp_path / "run")
    assert len(run.requests) == len(ends) and NOTE in run.notes


def test_a_cut_server_metrics_row_is_dropped(tmp_path):
    run_dir = write_run_dir(
        tmp_path / "run",
        requests=[make_request(T0 + 1.0)],
        steps=[(1, T0, T0 + 10.0)],
        server=[{"t_s": T0 + 1.0, "source": "s", "metric": "m", "labels": "{}", "value": 0.125}] * 2,
    )
    path = run_dir / "server_metrics.csv"
    path.write_bytes(path.read_bytes()[:-4])  # the last value cut to "0.1"
    run = load_run(run_dir)
    assert run.server_samples["value"].tolist() == [0.125]
    assert "server_metrics.csv ends in a partial row (cut mid-write?): 1 row dropped" in run.notes


@pytest.mark.parametrize("tail", [b"", b"\r\n"])
def test_a_complete_file_has_no_note(tmp_path, tail):
    data, _, ends, _ = _write(tmp_path / "run")
    (tmp_path / "run" / "requests.csv").write_bytes(data + tail)
    run = load_run(tmp_path / "run")
    assert len(run.requests) == len(ends) and not any("partial row" in n for n in run.notes)
