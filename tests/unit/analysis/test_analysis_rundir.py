"""Loading and validating a run directory (llm_locust/analysis/rundir/reader.py)."""

import json
import math

import pandas as pd
import pytest

from llm_locust.analysis.rundir.reader import UNCLEAN_END_NOTE, RunDirError, load_run
from tests.analysis_factories import (
    REQUEST_COLUMNS,
    T0,
    make_request,
    server_row,
    write_run_dir,
)


def _minimal(tmp_path, **kwargs):
    requests = [
        make_request(T0 + 1.0),
        make_request(T0 + 2.0, ttft_ms="", e2e_ms=300.0, output_tokens=0, error_kind="http_5xx"),
    ]
    return write_run_dir(
        tmp_path / "run",
        requests=requests,
        steps=[(1, T0, T0 + 10.0), (2, T0 + 10.0, None)],
        ended_at_s=T0 + 15.0,
        **kwargs,
    )


def test_load_sets_dtypes_and_empty_cells_are_nan(tmp_path):
    run = load_run(_minimal(tmp_path))
    assert run.requests["t_start_s"].dtype == "float64"
    assert run.requests["ttft_ms"].tolist()[0] == 100.0
    assert math.isnan(run.requests["ttft_ms"].tolist()[1])
    assert run.requests["error_kind"].tolist() == ["", "http_5xx"]
    assert run.requests["output_tokens"].tolist() == [64.0, 0.0]
    assert run.server_samples.empty
    assert list(run.server_samples.columns) == ["t_s", "source", "metric", "labels", "value"]
    assert run.meta["model"] == "sim-llama"


def test_null_step_end_becomes_run_end(tmp_path):
    result = load_run(_minimal(tmp_path)).steps
    expected = pd.DataFrame(
        {"step": [0, 1], "target_users": [1.0, 2.0], "start_s": [T0, T0 + 10.0], "end_s": [T0 + 10.0, T0 + 15.0]}
    )
    pd.testing.assert_frame_equal(result, expected)


def test_server_metrics_are_read(tmp_path):
    run_dir = _minimal(tmp_path, server=[server_row(T0 + 1.0, "vllm:num_requests_running", 2.0)])
    run = load_run(run_dir)
    assert run.server_samples["value"].tolist() == [2.0]
    assert run.server_samples["t_s"].tolist() == [T0 + 1.0]


def test_empty_server_metrics_file_gives_empty_frame(tmp_path):
    run_dir = _minimal(tmp_path)
    (run_dir / "server_metrics.csv").write_text("")
    assert load_run(run_dir).server_samples.empty


def test_missing_run_json(tmp_path):
    run_dir = _minimal(tmp_path)
    (run_dir / "run.json").unlink()
    with pytest.raises(RunDirError, match="run.json"):
        load_run(run_dir)


def test_missing_requests_csv(tmp_path):
    run_dir = _minimal(tmp_path)
    (run_dir / "requests.csv").unlink()
    with pytest.raises(RunDirError, match="requests.csv"):
        load_run(run_dir)


def test_missing_directory(tmp_path):
    with pytest.raises(RunDirError, match="not a directory"):
        load_run(tmp_path / "nope")


def test_missing_columns_are_listed(tmp_path):
    run_dir = _minimal(tmp_path)
    frame = pd.read_csv(run_dir / "requests.csv", dtype=str, keep_default_na=False)
    frame.drop(columns=["ttft_ms", "e2e_ms"]).rename(columns={"name": "nam"}).to_csv(
        run_dir / "requests.csv", index=False
    )
    with pytest.raises(RunDirError) as info:
        load_run(run_dir)
    message = str(info.value)
    assert "['name', 'ttft_ms', 'e2e_ms']" in message
    assert "unexpected columns ['nam']" in message


def test_unknown_schema_version(tmp_path):
    run_dir = _minimal(tmp_path)
    meta = json.loads((run_dir / "run.json").read_text())
    meta["schema_version"] = 2
    (run_dir / "run.json").write_text(json.dumps(meta))
    with pytest.raises(RunDirError, match="unknown schema_version 2"):
        load_run(run_dir)


def test_invalid_json(tmp_path):
    run_dir = _minimal(tmp_path)
    (run_dir / "run.json").write_text("{not json")
    with pytest.raises(RunDirError, match="not valid JSON"):
        load_run(run_dir)


def test_non_numeric_value_is_reported(tmp_path):
    run_dir = _minimal(tmp_path)
    text = (run_dir / "requests.csv").read_text().replace(",1000.0,", ",fast,", 1)
    (run_dir / "requests.csv").write_text(text)
    with pytest.raises(RunDirError, match="'e2e_ms'.*'fast'"):
        load_run(run_dir)


def test_unknown_error_kind(tmp_path):
    run_dir = write_run_dir(
        tmp_path / "run", requests=[make_request(T0, error_kind="gremlins")], steps=[(1, T0, T0 + 10.0)]
    )
    with pytest.raises(RunDirError, match="gremlins"):
        load_run(run_dir)


def _unclean(tmp_path, *, server=None, last_step_end=None):
    """Requests ending at T0+2.0 and T0+5.5; run.json without ended_at_s (timeout / Ctrl-C)."""
    requests = [make_request(T0 + 1.0, e2e_ms=1000.0), make_request(T0 + 3.0, e2e_ms=2500.0)]
    run_dir = write_run_dir(
        tmp_path / "run", requests=requests, server=server, steps=[(1, T0, T0 + 2.0), (2, T0 + 2.0, last_step_end)]
    )
    meta = json.loads((run_dir / "run.json").read_text())
    meta["ended_at_s"] = None
    (run_dir / "run.json").write_text(json.dumps(meta))
    return run_dir


def test_null_ended_at_s_ends_at_the_last_request(tmp_path):
    run = load_run(_unclean(tmp_path))
    assert not run.clean_stop
    assert run.ended_at_s == pytest.approx(T0 + 5.5, abs=1e-6)  # 3.0 + 2.5 s
    assert run.ended_at_s > T0 + 5.5  # just after it: the last request stays in [start, end)
    assert run.steps["end_s"].tolist() == [T0 + 2.0, run.ended_at_s]
    assert run.notes == (
        f"{UNCLEAN_END_NOTE} (5.5 s after the start)",
        "step 1 has no recorded end: it ends with the run (the last record)",
    )


def test_null_ended_at_s_ends_at_a_later_server_sample(tmp_path):
    server = [server_row(T0 + 7.0, "vllm:num_requests_running", 1.0)]
    run = load_run(_unclean(tmp_path, server=server))
    assert run.ended_at_s == pytest.approx(T0 + 7.0, abs=1e-6)
    assert run.notes[0] == f"{UNCLEAN_END_NOTE} (7.0 s after the start)"


def test_clean_stop_has_no_notes(tmp_path):
    run = load_run(_minimal(tmp_path, server=None))
    assert run.clean_stop and run.ended_at_s == T0 + 15.0
    assert run.notes == ("step 1 has no recorded end: it ends with the run (ended_at_s)",)
    requests = [make_request(T0 + 1.0)]
    clean = load_run(write_run_dir(tmp_path / "clean", requests=requests, steps=[(1, T0, T0 + 10.0)]))
    assert clean.notes == ()


def _header() -> bytes:
    return (",".join(REQUEST_COLUMNS) + "\n").encode()


def test_non_utf8_requests_csv_names_the_byte_offset(tmp_path):
    run_dir = _minimal(tmp_path)
    row = b"r\xff1,w0,chat," + b"," * (len(REQUEST_COLUMNS) - 4) + b"\n"
    (run_dir / "requests.csv").write_bytes(_header() + row)
    offset = len(_header()) + 1  # the byte after "r"
    with pytest.raises(RunDirError) as info:
        load_run(run_dir)
    message = str(info.value)
    assert message.startswith(str(run_dir / "requests.csv"))
    assert f"byte 0xff at byte offset {offset} (line 2)" in message
    assert "\n" not in message


def test_non_utf8_server_metrics_csv(tmp_path):
    run_dir = _minimal(tmp_path)
    (run_dir / "server_metrics.csv").write_bytes(b"t_s,source,metric,labels,value\n1.0,x,caf\xe9,{},2\n")
    # 31 header bytes + "1.0,x,caf" (9 bytes): the bad byte is byte 40
    with pytest.raises(
        RunDirError,
        match=r"server_metrics.csv: not UTF-8 text: byte 0xe9 at "
        r"byte offset 40 \(line 2\)",
    ):
        load_run(run_dir)


def test_non_utf8_run_json(tmp_path):
    run_dir = _minimal(tmp_path)
    (run_dir / "run.json").write_bytes(b'{"model": "\xc3"}')
    with pytest.raises(RunDirError, match=r"run.json: not UTF-8 text: byte 0xc3 at byte offset 11"):
        load_run(run_dir)


@pytest.mark.parametrize(("change", "message"), [
    ({"e2e_ms": -5.0}, r"'e2e_ms'.*outside \[0, 6.048e\+08\].*-5.0 on data row 2"),
    ({"e2e_ms": 1e12}, r"'e2e_ms'.*1000000000000.0 on data row 2"),
    ({"output_tokens": -3}, r"'output_tokens'.*-3.0 on data row 2"),
    ({"ttft_ms": float("inf")}, r"'ttft_ms'.*inf on data row 2"),
    ({"t_start_s": -1.0}, r"'t_start_s'.*-1.0"),
    ({"ttft_ms": 1500.0, "e2e_ms": 1000.0}, r"ttft_ms after e2e_ms, first on data row 2"),
])  # fmt: skip
def test_values_no_measurement_can_produce_are_refused_with_their_row(tmp_path, change, message):
    rows = [make_request(T0), {**make_request(T0 + 1.0), **change}, make_request(T0 + 2.0)]
    run_dir = write_run_dir(tmp_path / "run", requests=rows, steps=[(1, T0, T0 + 10.0)])
    with pytest.raises(RunDirError, match=message):
        load_run(run_dir)


def test_a_failure_without_ttft_and_a_zero_token_success_load(tmp_path):
    rows = [make_request(T0, ttft_ms=float("nan"), output_tokens=0, error_kind="http_5xx"),
            make_request(T0 + 1.0, output_tokens=0)]  # fmt: skip
    run = load_run(write_run_dir(tmp_path / "run", requests=rows, steps=[(1, T0, T0 + 10.0)]))
    assert len(run.requests) == 2 and run.requests["ttft_ms"].isna().tolist() == [True, False]
