"""Per-request metrics and client in-flight (llm_locust/analysis/perrequest/metrics.py)."""

import math

import numpy as np
import pandas as pd
import pytest

from llm_locust.analysis.perrequest.metrics import (
    MAX_INFLIGHT_BINS,
    end_time_s,
    inflight_binned,
    inflight_series,
    mean_inflight,
    prorated_tokens,
    token_events,
    tokens_between,
    tpot_ms,
    with_request_metrics,
)


def _frame(**columns):
    return pd.DataFrame({k: [float(x) for x in v] for k, v in columns.items()})


def test_tpot_and_decode_rate():
    # (1000 - 370) / (64 - 1) = 10 ms -> 100 tokens/s; fewer than 2 tokens -> NaN
    requests = _frame(t_start_s=[0, 0, 0], ttft_ms=[370, 50, 50], e2e_ms=[1000, 60, 60], output_tokens=[64, 1, 0])
    requests["error_kind"] = ""
    result = with_request_metrics(requests)
    assert result["tpot_ms"].iloc[0] == 10.0
    assert result["decode_tps"].iloc[0] == 100.0
    assert math.isnan(result["tpot_ms"].iloc[1]) and math.isnan(result["tpot_ms"].iloc[2])
    assert math.isnan(result["decode_tps"].iloc[1])
    assert result["ok"].tolist() == [True, True, True]
    assert "tpot_ms" not in requests.columns  # input untouched


def test_tpot_nan_when_ttft_missing():
    requests = _frame(ttft_ms=[float("nan")], e2e_ms=[500], output_tokens=[10])
    assert math.isnan(tpot_ms(requests).iloc[0])


def test_end_time_adds_e2e_and_falls_back_to_start():
    requests = _frame(t_start_s=[100, 200], e2e_ms=[2500, float("nan")])
    assert end_time_s(requests).tolist() == [102.5, 200.0]


def test_mean_inflight_is_exact_overlap_integral():
    # overlaps with [0, 10]: 4 + 4 + 5 = 13 request-seconds -> 1.3; [20, 30] outside -> 0
    starts = pd.Series([0.0, 2.0, 5.0, 20.0])
    ends = pd.Series([4.0, 6.0, 15.0, 30.0])
    assert mean_inflight(starts, ends, 0.0, 10.0) == 1.3
    # [3, 5]: 1 + 2 + 0 = 3 request-seconds over 2 s
    assert mean_inflight(starts, ends, 3.0, 5.0) == 1.5
    assert math.isnan(mean_inflight(starts, ends, 5.0, 5.0))


def test_inflight_series_steps():
    result = inflight_series(pd.Series([0.0, 2.0, 6.0]), pd.Series([4.0, 6.0, 8.0]))
    expected = pd.DataFrame({"t_s": [0.0, 2.0, 4.0, 6.0, 8.0], "inflight": [1, 2, 1, 1, 0]})
    pd.testing.assert_frame_equal(result, expected)


def test_inflight_series_empty():
    result = inflight_series(pd.Series([], dtype=float), pd.Series([], dtype=float))
    assert result.empty and list(result.columns) == ["t_s", "inflight"]


def test_inflight_binned_averages_each_bin_exactly():
    from llm_locust.analysis.perrequest.metrics import inflight_binned, inflight_series

    # request A on [0, 2.5), B on [1.5, 3): bin [0,1): 1; [1,2): 1 + 0.5; [2,3): 0.5 + 1
    series = inflight_series(pd.Series([0.0, 1.5]), pd.Series([2.5, 3.0]))
    result = inflight_binned(series, 1.0)
    assert result["t_s"].tolist() == [0.0, 1.0, 2.0]
    assert result["inflight"].tolist() == pytest.approx([1.0, 1.5, 1.5])


def test_inflight_bins_are_widened_for_a_huge_span():
    # one corrupt request lasting 1e9 s would need 1e9 one-second bins
    series = inflight_series(pd.Series([0.0, 0.0]), pd.Series([1e9, 2.0]))
    result = inflight_binned(series, 1.0)
    assert len(result) == MAX_INFLIGHT_BINS
    assert result["inflight"].iloc[0] == pytest.approx(1.0 + 2.0 / 1e4)  # bin of 1e4 s


def test_prorated_tokens_by_hand():
    # [0, 20] 100 tokens: half in [10, 20); [8, 12] 40 tokens: half; one token at 15 (no spread);
    # NaN first token: all 7 at its end 25, outside
    first = pd.Series([0.0, 8.0, 15.0, math.nan])
    end = pd.Series([20.0, 12.0, 15.0, 25.0])
    tokens = pd.Series([100.0, 40.0, 1.0, 7.0])
    assert prorated_tokens(first, end, tokens, 10.0, 20.0) == pytest.approx(50.0 + 20.0 + 1.0)
    assert prorated_tokens(first, end, tokens, 20.0, 30.0) == pytest.approx(7.0)


def test_inflight_series_counts_every_request_in_flight_by_hand():
    """Random intervals with shared instants and unknown ends: at each event instant, the
    requests with ``start <= t < end`` counted one by one."""
    from llm_locust.analysis.perrequest.metrics import inflight_series

    rng = np.random.default_rng(4)
    start = rng.integers(0, 50, 300).astype(float) / 4
    end = start + rng.integers(0, 20, 300) / 4  # zero-length ones included
    end[rng.random(300) < 0.05] = np.nan
    result = inflight_series(pd.Series(start), pd.Series(end))

    instants = sorted(set(start.tolist()) | set(end[~np.isnan(end)].tolist()))
    assert result["t_s"].tolist() == instants
    # a request with no end counts from its start on (its end event is unknown)
    expected = [sum(1 for s, e in zip(start, end) if s <= t and not (e <= t)) for t in instants]
    assert result["inflight"].tolist() == expected and result["inflight"].dtype == np.int64


def test_token_events_by_hand():
    starts = pd.Series([100.0, 200.0, 300.0, 400.0, 500.0])
    tokens = pd.Series([5.0, 6.0, 4.0, float("nan"), 3.0])
    times_us = pd.Series(["1000000 2000000 3000000", "500000 1500000", "1000000 x", "1000000", ""])
    given = pd.Series(["", "2 4", "", "", ""])
    times, counts, timed = token_events(starts, tokens, times_us, given)
    # row 0: first event 1 token, the other 4 over 2 events; row 1: counts as stated (sum 6);
    # row 2: a cell that is no number; row 3: no token count; row 4: no events
    assert timed.tolist() == [True, True, False, False, False]
    assert times.tolist() == pytest.approx([101.0, 102.0, 103.0, 200.5, 201.5])
    assert counts.tolist() == pytest.approx([1.0, 2.0, 2.0, 2.0, 4.0])
    assert tokens_between(times, counts, 102.0, 201.0) == pytest.approx(2.0 + 2.0 + 2.0)


def test_token_events_scale_stated_counts_to_the_output_tokens():
    # the events say 1 + 1 tokens, usage says 4: each event carries half of 4
    _, counts, timed = token_events(pd.Series([0.0]), pd.Series([4.0]), pd.Series(["10 20"]), pd.Series(["1 1"]))
    assert timed.tolist() == [True] and counts.tolist() == pytest.approx([2.0, 2.0])
