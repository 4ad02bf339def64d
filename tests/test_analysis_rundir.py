"""Loading and validating a run directory (analysis/rundir.py)."""

import json
import math

import pandas as pd
import pytest

from analysis.rundir import RunDirError, load_run
from tests.analysis_factories import T0, make_request, server_row, write_run_dir


def _minimal(tmp_path, **kwargs):
    requests = [make_request(T0 + 1.0), make_request(T0 + 2.0, ttft_ms="", e2e_ms=300.0,
                                                     output_tokens=0, error_kind="http_5xx")]
    return write_run_dir(tmp_path / "run", requests=requests,
                         steps=[(1, T0, T0 + 10.0), (2, T0 + 10.0, None)],
                         ended_at_s=T0 + 15.0, **kwargs)


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
    expected = pd.DataFrame({"step": [0, 1], "target_users": [1.0, 2.0],
                             "start_s": [T0, T0 + 10.0], "end_s": [T0 + 10.0, T0 + 15.0]})
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
        run_dir / "requests.csv", index=False)
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
    run_dir = write_run_dir(tmp_path / "run", requests=[make_request(T0, error_kind="gremlins")],
                            steps=[(1, T0, T0 + 10.0)])
    with pytest.raises(RunDirError, match="gremlins"):
        load_run(run_dir)
