"""The live LLM stats store: per-name table, rolling time series, ITL sketch; numbers by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from llm_locust.analysis.perrequest.metrics import mean_inflight
from llm_locust.client.record import CSV_COLUMNS, RequestRecord
from llm_locust.live.records import AGGREGATED, LiveRecords
from llm_locust.live.sketch import LogHistogram

T0 = 1000.0


def row(t_start_s, *, ttft_ms=100.0, e2e_ms=1000.0, output_tokens=11, error_kind="", name="chat", worker="w0", **extra):
    """One ``requests.csv`` row; a failure keeps its tokens but has no TTFT unless given."""
    record = RequestRecord(request_id=f"{worker}-{t_start_s}", worker_id=worker, name=name, t_start_s=t_start_s,
                           ttft_ms=ttft_ms, e2e_ms=e2e_ms, output_tokens=output_tokens, error_kind=error_kind,
                           status_code=200 if not error_kind else 429)  # fmt: skip
    for key, value in extra.items():
        setattr(record, key, value)
    return record.to_row()


def by_name(rows):
    return {r["name"]: r for r in rows}


def test_table_counts_failures_by_kind_and_takes_percentiles_of_successes_only():
    store = LiveRecords()
    store.add_rows([row(T0, ttft_ms=100.0), row(T0 + 1, ttft_ms=200.0), row(T0 + 2, ttft_ms=300.0),
                    row(T0 + 3, ttft_ms=5.0, error_kind="http_429", output_tokens=0),
                    row(T0 + 4, ttft_ms=9000.0, error_kind="stall_timeout", output_tokens=3)])  # fmt: skip

    chat = by_name(store.table(horizon_s=T0 + 100))["chat"]

    assert (chat["requests"], chat["failures"]) == (5, 2)
    assert chat["failures_by_kind"] == "http_429: 1, stall_timeout: 1"
    # TTFT over the 3 successes: 100, 200, 300 (linear interpolation)
    assert (chat["ttft_p50_ms"], chat["ttft_p90_ms"], chat["ttft_p99_ms"]) == (200.0, 280.0, 298.0)
    # TPOT = (1000 - TTFT) / (11 - 1) = 90, 80, 70 ms; decode rate 1000 / TPOT
    assert (chat["tpot_p50_ms"], chat["tpot_p90_ms"]) == (80.0, 88.0)
    assert chat["decode_tps_p50"] == pytest.approx(1000 / 80, abs=0.01)
    assert chat["mean_output_tokens"] == 11.0


def test_table_has_a_row_per_name_and_an_aggregated_row():
    store = LiveRecords()
    store.add_rows([row(T0, name="chat"), row(T0, name="chat"), row(T0, name="completions")])

    rows = store.table(horizon_s=T0 + 100)

    assert [r["name"] for r in rows] == ["chat", "completions", AGGREGATED]
    assert [r["requests"] for r in rows] == [2, 1, 3]


def test_percentiles_merge_the_raw_values_of_all_workers():
    # worker a: 9 fast requests; worker b: 1 slow one. The p50 of the union is fast; the mean of
    # the two workers' p50s would be (100 + 1000) / 2.
    store = LiveRecords()
    store.add_rows([row(T0 + i, ttft_ms=100.0, worker="a") for i in range(9)])
    store.add_rows([row(T0, ttft_ms=1000.0, worker="b")])

    chat = by_name(store.table(horizon_s=T0 + 100))["chat"]

    assert chat["ttft_p50_ms"] == 100.0
    assert chat["ttft_p99_ms"] == pytest.approx(np.percentile([100.0] * 9 + [1000.0], 99))


def test_output_tps_in_the_table_is_the_last_window_up_to_the_horizon():
    store = LiveRecords()
    store.start(T0)
    # completions at T0+5 (10 tokens), T0+15 and T0+18 (20 tokens each); window = 10 s
    store.add_rows([row(T0 + 4, e2e_ms=1000, output_tokens=10), row(T0 + 14, output_tokens=20),
                    row(T0 + 17, output_tokens=20)])  # fmt: skip

    assert by_name(store.table(horizon_s=T0 + 19))["chat"]["output_tps"] == 4.0  # (20 + 20) / 10
    assert by_name(store.table(horizon_s=T0 + 14))["chat"]["output_tps"] == 1.0  # 10 / 10


def test_reset_table_starts_the_counts_afresh_but_keeps_the_series():
    store = LiveRecords()
    store.start(T0)
    store.add_rows([row(T0), row(T0 + 1)])
    store.reset_table()
    store.add_rows([row(T0 + 2)])

    assert by_name(store.table(horizon_s=T0 + 10))["chat"]["requests"] == 1
    assert sum(store.series(horizon_s=T0 + 10)["request_rps"]) > 0
    assert store.table(horizon_s=T0 + 10)[-1]["requests"] == 1


def test_series_rolls_a_ten_second_window_over_two_second_buckets():
    store = LiveRecords()
    store.start(T0)
    # success completing at T0+3 (bucket 1) with 32 tokens, TTFT 50; a failure at T0+5 (bucket 2)
    store.add_rows([row(T0 + 2, e2e_ms=1000.0, ttft_ms=50.0, output_tokens=32),
                    row(T0 + 4.5, e2e_ms=500.0, error_kind="http_5xx", output_tokens=0)])  # fmt: skip

    series = store.series(horizon_s=T0 + 8.5)

    assert series["t_s"] == [T0 + 2, T0 + 4, T0 + 6, T0 + 8]
    # point k covers buckets max(0, k-4)..k: the windows are 2, 4, 6, 8 s long
    assert series["output_tps"] == [0.0, 32 / 4, 32 / 6, 32 / 8]
    assert series["ttft_p50_ms"] == [None, 50.0, 50.0, 50.0]
    assert series["errors_per_s"] == {"http_5xx": [0.0, 0.0, 1 / 6, 1 / 8]}
    assert series["error_rate_per_s"] == series["errors_per_s"]["http_5xx"]


def test_series_stops_at_the_horizon_and_inflight_waits_to_settle():
    store = LiveRecords()
    store.start(T0)
    store.add_rows([row(T0 + 1, e2e_ms=4000.0)])  # in flight over [T0+1, T0+5)

    series = store.series(horizon_s=T0 + 9.9, settle_s=3.0)

    assert series["t_s"][-1] == T0 + 8  # the bucket ending at T0+10 is past the horizon
    # time-average in-flight per bucket: [0,2) half, [2,4) full, [4,6) half, then none
    assert series["client_inflight"][:3] == [0.5, 1.0, 0.5]
    assert series["client_inflight"][3] is None  # ends at T0+8 > horizon - settle = T0+6.9


def test_inflight_per_bucket_is_the_exact_time_average_of_the_analysis():
    rng = np.random.default_rng(7)
    starts = T0 + rng.uniform(0, 20, size=60)
    durations = rng.uniform(0.1, 6.0, size=60)
    store = LiveRecords()
    store.start(T0)
    store.add_rows([row(float(s), e2e_ms=float(d) * 1000.0) for s, d in zip(starts, durations)])

    series = store.series(horizon_s=T0 + 40)

    for k, t_end in enumerate(series["t_s"]):
        expected = mean_inflight(pd.Series(starts), pd.Series(starts + durations), t_end - 2.0, t_end)
        assert series["client_inflight"][k] == pytest.approx(expected, abs=1e-9)


@pytest.mark.skipif("token_times_us" not in CSV_COLUMNS, reason="records carry no per-event times yet")
def test_itl_p99_comes_from_every_token_of_every_worker():
    store = LiveRecords()
    # 10 tokens, one per event, from TTFT 100 ms: 99 requests 10 ms apart (stream ends with the
    # last token at 190 ms), one 100 ms apart (ends at 1000 ms) -> 9 per-token ITL values each
    fast = " ".join(str(100_000 + i * 10_000) for i in range(10))
    slow = " ".join(str(100_000 + i * 100_000) for i in range(10))
    store.add_rows([row(T0, ttft_ms=100.0, e2e_ms=190.0, output_tokens=10, token_times_us=fast, worker="a")
                    for _ in range(99)])  # fmt: skip
    store.add_rows([row(T0, ttft_ms=100.0, e2e_ms=1000.0, output_tokens=10, token_times_us=slow, worker="b")])

    chat = by_name(store.table(horizon_s=T0 + 10))["chat"]

    # 891 gaps of 10 ms and 9 of 100 ms: p99 (rank 891 of 900) is 10 ms, within the sketch's 1 %
    assert chat["itl_p99_ms"] == pytest.approx(10.0, rel=0.01)
    store.add_rows([row(T0, ttft_ms=100.0, e2e_ms=1000.0, output_tokens=10, token_times_us=slow, worker="b")
                    for _ in range(20)])  # fmt: skip
    # now 189 of 1080 values are 100 ms: p99 is 100 ms
    assert by_name(store.table(horizon_s=T0 + 10))["chat"]["itl_p99_ms"] == pytest.approx(100.0, rel=0.01)


@pytest.mark.skipif("token_times_us" not in CSV_COLUMNS, reason="records carry no per-event times yet")
def test_itl_p99_agrees_with_the_post_run_definition():
    from llm_locust.analysis.perrequest.itlpool import itl_summary

    rng = np.random.default_rng(11)
    rows = []
    for i in range(200):
        n = int(rng.integers(2, 40))
        times = 50_000 + np.cumsum(rng.gamma(2.0, 10_000.0, size=n)).astype(int)
        rows.append(
            row(
                T0 + i,
                ttft_ms=times[0] / 1000,
                e2e_ms=times[-1] / 1000 + 5,
                output_tokens=n,
                token_times_us=" ".join(map(str, times)),
                worker=f"w{i % 3}",
            )
        )
    store = LiveRecords()
    store.add_rows(rows)
    frame = pd.DataFrame(rows, columns=list(CSV_COLUMNS))

    live = by_name(store.table(horizon_s=T0 + 1000))["chat"]["itl_p99_ms"]

    assert live == pytest.approx(itl_summary(frame)["itl_p99_ms"], rel=0.011)


def test_log_histogram_quantiles_are_within_alpha_and_merge():
    values = np.random.default_rng(3).lognormal(3.0, 1.0, size=5000)
    left, right = LogHistogram(), LogHistogram()
    left.add_many(values[::2])
    right.add_many(values[1::2])
    left.merge(right)
    for q in (0.5, 0.9, 0.99):
        exact = float(np.quantile(values, q, method="inverted_cdf"))
        assert left.quantile(q) == pytest.approx(exact, rel=0.0101)
    assert math.isnan(LogHistogram().quantile(0.5))
