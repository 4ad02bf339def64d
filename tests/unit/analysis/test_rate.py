"""Request-rate figures per step (llm_locust.analysis.perstep.rate), the rate ladder's knee and verdict, the loader."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from llm_locust.analysis.loadaxis import RATE, USERS, load_axis
from llm_locust.analysis.perrequest.metrics import with_request_metrics
from llm_locust.analysis.perstep.rate import RATE_COLUMNS, rate_columns
from llm_locust.analysis.perstep.table import STEP_TABLE_COLUMNS, step_table, step_windows
from llm_locust.analysis.rundir.reader import load_run
from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.verdict import ClientSide, ServerSide, diagnose
from llm_locust.analysis.verdict.jsonout import verdict_json
from llm_locust.analysis.verdict.knee import find_critical_concurrency
from tests.analysis_factories import T0, make_request

NAN = math.nan


def scheduled_requests() -> pd.DataFrame:
    """20 sends planned at 2 req/s over [T0, T0 + 10): k = 0..17 recorded (the last two never
    sent), each scheduled at T0 + 0.5 k and sent 1 ms late (k < 10) or 101 ms late (k >= 10);
    TTFT 100 ms, E2E 1000 ms."""
    rows = []
    for k in range(18):
        lag_s = 0.001 if k < 10 else 0.101
        row = make_request(T0 + 0.5 * k + lag_s, e2e_ms=1000.0, ttft_ms=100.0, request_id=f"w0-{k}")
        row["scheduled_s"] = T0 + 0.5 * k
        rows.append(row)
    return pd.DataFrame(rows)


def rate_windows(warmup_s: float = 2.0) -> pd.DataFrame:
    steps = pd.DataFrame(
        {"step": [0], "target_users": [8.0], "start_s": [T0], "end_s": [T0 + 10.0], "target_rate_rps": [2.0]}
    )
    return step_windows(steps, warmup_s)


def test_rate_columns_by_hand():
    row = rate_columns(with_request_metrics(scheduled_requests()), rate_windows()).iloc[0]
    assert row["target_rate_rps"] == 2.0
    # window [T0 + 2, T0 + 10): sends k = 4..17 (14) over 8 s
    assert row["achieved_rate_rps"] == pytest.approx(14 / 8.0)
    assert row["planned_sends"] == 20 and row["unsent"] == 2
    # lags of those 14: six of 1 ms, eight of 101 ms -> median of the 7th and 8th = 101
    assert row["send_lag_p50_ms"] == pytest.approx(101.0)
    assert row["send_lag_p99_ms"] == pytest.approx(101.0)
    # gaps: twelve of 0.5 s and one of 0.6 s (k = 9 -> 10)
    gaps = np.array([0.5] * 12 + [0.6])
    assert row["interarrival_cv"] == pytest.approx(gaps.std() / gaps.mean(), rel=1e-4)  # Unix-s float precision
    # completed in the window: ends T0 + 0.5 k + lag + 1 in [2, 10) -> k = 2..17: TTFT from the
    # schedule 101 ms (k = 2..9) and 201 ms (k = 10..17)
    assert row["ttft_from_schedule_p50_ms"] == pytest.approx(151.0)
    assert row["ttft_from_schedule_p95_ms"] == pytest.approx(201.0)
    assert row["e2e_from_schedule_p50_ms"] == pytest.approx(1051.0)


def test_closed_loop_has_no_rate_figures():
    steps = pd.DataFrame({"step": [0], "target_users": [2.0], "start_s": [T0], "end_s": [T0 + 10.0]})
    windows = step_windows(steps, 2.0)
    assert "target_rate_rps" not in windows.columns
    requests = pd.DataFrame([make_request(T0 + 3.0), make_request(T0 + 4.0)])
    table = step_table(requests, windows)
    assert list(table.columns) == list(STEP_TABLE_COLUMNS)
    assert table[list(RATE_COLUMNS)].isna().all().all()
    assert load_axis(table) is USERS


def test_step_table_carries_the_rate_figures():
    table = step_table(scheduled_requests(), rate_windows())
    assert load_axis(table) is RATE
    assert table.loc[0, "unsent"] == 2 and table.loc[0, "target_users"] == 8.0


def rate_table(rates, tput, ttft, running, waiting, *, lag_p50=None, unsent=None):
    n = len(rates)
    return pd.DataFrame(
        {
            "step": list(range(n)),
            "target_users": [64.0] * n,  # the pool: no load level
            "target_rate_rps": [float(r) for r in rates],
            "window_start_s": [T0 + 10 * k for k in range(n)],
            "window_end_s": [T0 + 10 * (k + 1) for k in range(n)],
            "client_inflight": [float(r) * 0.5 for r in rates],
            "server_running": [float(x) for x in running],
            "server_waiting": [float(x) for x in waiting],
            "kv_usage_ratio": [0.1] * n,
            "server_preemptions_per_s": [0.0] * n,
            "conn_wait_ms_mean": [0.0] * n,
            "completed": [100] * n,
            "output_tps": [float(x) for x in tput],
            "ttft_p50_ms": [float(x) for x in ttft],
            "tpot_p50_ms": [20.0] * n,
            "e2e_p50_ms": [1000.0] * n,
            "errors": [0] * n,
            "error_kinds": [""] * n,
            "achieved_rate_rps": [float(r) for r in rates],
            "planned_sends": [float(r) * 10 for r in rates],
            "unsent": [float(u) for u in unsent] if unsent else [0.0] * n,
            "send_lag_p50_ms": [float(x) for x in lag_p50] if lag_p50 else [1.0] * n,
            "send_lag_p99_ms": [3.0] * n,
        }
    )


SATURATES_AFTER_4 = dict(
    rates=[1, 2, 4, 8], tput=[100, 200, 390, 400], ttft=[50, 50, 60, 2000], running=[0.5, 1, 2, 4], waiting=[0, 0, 0, 6]
)


def test_knee_on_a_rate_ladder():
    knee = find_critical_concurrency(rate_table(**SATURATES_AFTER_4))
    # 8 vs 4 req/s: gain (400 / 390) ** 1 = 1.026 < 1.15, waiting 6 > 0.5, TTFT 2000 > 1.5 x 60
    assert knee.users == 4.0 and knee.saturated_users == 8.0 and knee.axis is RATE
    assert knee.text == "4 (throughput stops rising at 8 req/s)"
    assert any(line.startswith("rate=8 vs 4: (a) gain per doubling 1.026") for line in knee.evidence)


def test_verdict_on_a_rate_ladder():
    config = ServerConfig(engine="vllm", batch_ceiling=4, batch_ceiling_name="max_num_seqs")
    verdict = diagnose(rate_table(**SATURATES_AFTER_4), ServerSide(family="vllm"), config, ClientSide())
    assert verdict.bottleneck.value == "scheduler_ceiling"
    assert verdict.critical.users == 4.0
    assert verdict.table["valid"].all()  # the pool of 64 is no target the in-flight must reach
    assert "at 8 req/s" in verdict.headline
    assert any("4 req/s" in r.change and "offered request rate" in r.change for r in verdict.recommendations)
    data = verdict_json(verdict)
    assert data["critical_concurrency"] is None and data["critical_rate_rps"] == 4.0
    assert [s["rate_rps"] for s in data["steps"]] == [1.0, 2.0, 4.0, 8.0]


def test_a_rate_step_whose_schedule_slipped_is_the_client():
    tab = rate_table(**SATURATES_AFTER_4, lag_p50=[1, 1, 80, 900])
    verdict = diagnose(tab, ServerSide(family="vllm"), ServerConfig(engine="vllm"), ClientSide())
    reasons = verdict.table.set_index("target_rate_rps")["invalid_reason"]
    assert reasons[2.0] == "" and "send lag p50 80 ms" in reasons[4.0]
    assert verdict.bottleneck.value == "client"
    assert any(r.flag == "--max-users N" for r in verdict.recommendations)
    only = diagnose(tab.iloc[[3]].assign(server_waiting=0.0), ServerSide(family="vllm"), ServerConfig(), ClientSide())
    assert only.critical.axis is RATE and only.critical.text.endswith("the load client was the limit from 8 req/s")
    unsent = rate_table(**SATURATES_AFTER_4, unsent=[0, 0, 2, 0])  # 2 of 40 planned: 5 %
    reasons = diagnose(unsent, ServerSide(family="vllm"), ServerConfig(engine="vllm"), ClientSide()).table
    assert "2 of 40 scheduled sends not sent" in reasons.set_index("target_rate_rps").loc[4.0, "invalid_reason"]


def test_a_backlog_past_saturation_that_fills_the_pool_is_the_servers():
    """At 8 req/s the server queues (waiting 6): its backlog took every user, so sends slipped;
    the step still shows the saturation and stays valid."""
    tab = rate_table(**SATURATES_AFTER_4, lag_p50=[1, 1, 1, 900], unsent=[0, 0, 0, 30])
    config = ServerConfig(engine="vllm", batch_ceiling=4, batch_ceiling_name="max_num_seqs")
    verdict = diagnose(tab, ServerSide(family="vllm"), config, ClientSide())
    assert verdict.table["valid"].all()
    assert verdict.bottleneck.value == "scheduler_ceiling" and verdict.critical.users == 4.0


def test_run_directory_of_a_rate_run(tmp_path):
    steps = [
        {"index": 0, "users": 16, "start_s": T0, "end_s": T0 + 10.0, "rate_rps": 2.0},
        {"index": 1, "users": 16, "start_s": T0 + 10.0, "end_s": None, "rate_rps": 4.5},
    ]
    meta = {"schema_version": 1, "started_at_s": T0, "ended_at_s": T0 + 20.0, "shape": {"kind": "rate", "steps": steps}}
    (tmp_path / "run.json").write_text(json.dumps(meta))
    scheduled_requests().to_csv(tmp_path / "requests.csv", index=False)
    run = load_run(tmp_path)
    assert run.steps["target_rate_rps"].tolist() == [2.0, 4.5]
    assert run.requests["scheduled_s"].iloc[3] == pytest.approx(T0 + 1.5)
    steps[0]["rate_rps"] = "fast"
    (tmp_path / "run.json").write_text(json.dumps(meta))
    with pytest.raises(Exception, match="rate_rps"):
        load_run(tmp_path)
