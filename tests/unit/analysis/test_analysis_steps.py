"""Per-step table over steady windows (llm_locust/analysis/perstep/table.py)."""

import math

import pandas as pd
import pytest

from llm_locust.analysis.perstep.table import step_table, step_windows
from llm_locust.analysis.rundir.reader import load_run
from llm_locust.analysis.server.prometheus import metrics_series
from tests.analysis_factories import T0, make_request, server_row, write_run_dir


def _run(tmp_path, server=True):
    # step 0: [T0, T0+20), warm-up 10 s -> window [T0+10, T0+20); step 1: window [T0+30, T0+40)
    requests = [
        make_request(T0 + 9.0, e2e_ms=1360.0, ttft_ms=100.0),  # ends 10.36, TPOT 20
        make_request(T0 + 12.0, e2e_ms=2090.0, ttft_ms=200.0),  # ends 14.09, TPOT 30
        make_request(T0 + 15.0, e2e_ms=2920.0, ttft_ms=400.0),  # ends 17.92, TPOT 40
        make_request(
            T0 + 16.0, e2e_ms=500.0, ttft_ms=100.0, output_tokens=10, error_kind="http_5xx"
        ),  # ends 16.5, failed
        make_request(T0 + 5.0, e2e_ms=1000.0),  # ends 6.0: warm-up
        make_request(T0 + 19.0, e2e_ms=3000.0),  # ends 22.0: next warm-up
    ]
    rows = []
    for k in range(10):
        rows += [
            server_row(T0 + 10 + k, "vllm:num_requests_running", 2.0 if k < 5 else 4.0),
            server_row(T0 + 10 + k, "vllm:num_requests_waiting", 0.0 if k < 5 else 1.0),
            server_row(T0 + 10 + k, "vllm:kv_cache_usage_perc", 0.1 if k < 5 else 0.3),
        ]
    return load_run(
        write_run_dir(
            tmp_path / "run",
            requests=requests,
            warmup_s=10.0,
            steps=[(1, T0, T0 + 20.0), (2, T0 + 20.0, T0 + 40.0)],
            server=rows if server else None,
        )
    )


def _table(run):
    windows = step_windows(run.steps, run.warmup_s)
    return step_table(run.requests, windows, metrics_series(run.server_samples))


def test_windows_drop_warmup(tmp_path):
    result = step_windows(_run(tmp_path).steps, 10.0)
    expected = pd.DataFrame(
        {
            "step": [0, 1],
            "target_users": [1.0, 2.0],
            "window_start_s": [T0 + 10.0, T0 + 30.0],
            "window_end_s": [T0 + 20.0, T0 + 40.0],
            "window_s": [10.0, 10.0],
        }
    )
    pd.testing.assert_frame_equal(result, expected)


def test_step_figures_by_hand(tmp_path):
    row = _table(_run(tmp_path)).iloc[0]
    assert row["completed"] == 3
    assert row["output_tps"] == pytest.approx(3 * 64 / 10.0)  # 19.2 tokens/s
    assert row["request_rps"] == pytest.approx(0.3)
    assert row["ttft_p50_ms"] == 200.0
    assert row["ttft_p95_ms"] == pytest.approx(380.0)  # 200 + 0.9 * (400 - 200)
    assert row["tpot_p50_ms"] == pytest.approx(30.0)
    assert row["decode_tps_p50"] == pytest.approx(1000.0 / 30.0)
    assert row["e2e_p50_ms"] == 2090.0
    assert row["errors"] == 1 and row["error_kinds"] == "http_5xx:1"
    # overlaps with [10, 20): 0.36 + 2.09 + 2.92 + 0.5 (failed) + 0 + 1.0 (late) = 6.87
    assert row["client_inflight"] == pytest.approx(0.687)
    assert row["server_running"] == pytest.approx(3.0)
    assert row["server_waiting"] == pytest.approx(0.5)
    assert row["kv_usage_ratio"] == pytest.approx(0.2)


def test_step_with_nothing_completed_is_nan(tmp_path):
    row = _table(_run(tmp_path)).iloc[1]
    assert row["completed"] == 0 and row["errors"] == 0 and row["error_kinds"] == ""
    for column in ("output_tps", "request_rps", "ttft_p50_ms", "tpot_p50_ms", "e2e_p50_ms"):
        assert math.isnan(row[column]), column
    assert row["client_inflight"] == 0.0
    # the last scrape (running 4 at T0+19) holds 3 scrape intervals, not into step 1: once the
    # scrapes stop there is no data (NaN), never the last value repeated
    assert math.isnan(row["server_running"])


def test_only_failures_give_zero_throughput(tmp_path):
    requests = [
        make_request(T0 + 1.0, e2e_ms=1000.0, error_kind="ttft_timeout"),
        make_request(T0 + 2.0, e2e_ms=1000.0, error_kind="http_429"),
        make_request(T0 + 3.0, e2e_ms=1000.0, error_kind="http_429"),
    ]
    run = load_run(write_run_dir(tmp_path / "run", requests=requests, steps=[(4, T0, T0 + 10.0)]))
    row = _table(run).iloc[0]
    assert row["output_tps"] == 0.0 and row["completed"] == 0
    assert row["errors"] == 3 and row["error_kinds"] == "http_429:2 ttft_timeout:1"
    assert math.isnan(row["server_running"])


def test_no_server_samples_gives_nan(tmp_path):
    table = _table(_run(tmp_path, server=False))
    assert table[["server_running", "server_waiting", "kv_usage_ratio"]].isna().all().all()
    assert table["output_tps"].iloc[0] == pytest.approx(19.2)


def test_prorated_throughput_by_hand(tmp_path):
    # window [T0+10, T0+20) (warm-up 10 s); decode = [start + ttft, start + e2e]
    requests = [
        make_request(T0 + 5.0, ttft_ms=1000.0, e2e_ms=9000.0, output_tokens=80),  # [6, 14]: 4/8 in
        make_request(T0 + 12.0, ttft_ms=1000.0, e2e_ms=5000.0, output_tokens=40),  # [13, 17]: all in
        make_request(T0 + 17.0, ttft_ms=1000.0, e2e_ms=7000.0, output_tokens=60),  # [18, 24]: 2/6 in
        make_request(T0 + 15.0, ttft_ms=500.0, e2e_ms=500.0, output_tokens=1),  # one token at 15.5
        make_request(
            T0 + 11.0, ttft_ms=100.0, e2e_ms=2000.0, output_tokens=50, error_kind="http_5xx"
        ),  # failed: never counted
    ]
    run = load_run(write_run_dir(tmp_path / "run", requests=requests, warmup_s=10.0, steps=[(4, T0, T0 + 20.0)]))
    row = _table(run).iloc[0]
    assert row["output_tps_prorated"] == pytest.approx((40 + 40 + 20 + 1) / 10.0)  # 10.1
    assert row["output_tps"] == pytest.approx((80 + 40 + 1) / 10.0)  # completed in the window


def test_prorated_throughput_does_not_jump_with_waves(tmp_path):
    # 8 users in lockstep waves of 7 s requests, 70 tokens each from the first instant (TTFT 0):
    # 8 x 10 = 80 tokens/s all the time. Waves end at T0 + 0.5 + 7k.
    starts = [T0 - 6.5 + 7.0 * k for k in range(6)]
    requests = [
        make_request(t, ttft_ms=0.0, e2e_ms=7000.0, output_tokens=70, request_id=f"u{u}-{k}")
        for k, t in enumerate(starts)
        for u in range(8)
    ]
    run = load_run(
        write_run_dir(tmp_path / "run", requests=requests, steps=[(8, T0, T0 + 15.0), (16, T0 + 15.0, T0 + 30.0)])
    )
    table = _table(run)
    # [T0, T0+15) holds the ends at 0.5, 7.5, 14.5 (3 waves); [T0+15, T0+30) those at 21.5, 28.5
    assert table["output_tps"].tolist() == pytest.approx([3 * 8 * 70 / 15, 2 * 8 * 70 / 15])
    assert table["output_tps_prorated"].tolist() == pytest.approx([80.0, 80.0])


def test_prorated_throughput_is_nan_without_any_request_in_flight(tmp_path):
    row = _table(_run(tmp_path)).iloc[1]  # window [T0+30, T0+40): nothing runs
    assert math.isnan(row["output_tps_prorated"])
