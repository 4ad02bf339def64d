"""Per-step input checks: prompt length against its target, prefix-cache hit ratio from counters."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from llm_locust.analysis.perstep.inputs import input_columns, input_lines

TABLE = pd.DataFrame({"step": [0, 1], "window_start_s": [0.0, 10.0], "window_end_s": [10.0, 20.0]})


def requests(rows):
    """rows: (end_s, error_kind, prompt_tokens, target); each request sent 0.5 s before its end."""
    return pd.DataFrame(
        {
            "t_start_s": [r[0] - 0.5 for r in rows],
            "e2e_ms": [500.0] * len(rows),
            "error_kind": [r[1] for r in rows],
            "prompt_tokens": [r[2] for r in rows],
            "prompt_tokens_target": [r[3] for r in rows],
        }
    )


def samples(rows):
    """rows: (t_s, metric, labels, value)."""
    return pd.DataFrame(
        {"t_s": [r[0] for r in rows], "source": "http://s/metrics", "metric": [r[1] for r in rows],
         "labels": [r[2] for r in rows], "value": [float(r[3]) for r in rows]}
    )  # fmt: skip


def test_share_of_prompts_off_their_target_by_more_than_one_percent():
    reqs = requests([
        (1.0, "", 100, 100), (2.0, "", 101, 100), (3.0, "", 99, 100),  # 1 token of 100 is 1 %: not off
        (11.0, "", 200, 200), (12.0, "", 203, 200),  # 1.5 %: off
        (13.0, "http_5xx", 999, 200), (14.0, "", math.nan, 200),  # a failure, no count: left out
    ])  # fmt: skip

    result = input_columns(TABLE, reqs, None)

    assert result["prompt_off_share"].tolist() == [0.0, 0.5]
    assert result["prompt_tokens_target_mean"].tolist() == [100.0, 200.0]
    assert result["prefix_cache_hit_ratio"].isna().all()
    lines = "\n".join(input_lines(TABLE.join(result)))
    assert "step 1: 50% of the prompts were off their target length (200 tokens" in lines
    assert "step 0" not in lines


def test_no_target_gives_nan_and_no_lines():
    reqs = requests([(1.0, "", 100, math.nan), (11.0, "", 120, math.nan)])
    result = input_columns(TABLE, reqs, None)
    assert result.isna().all().all()
    assert input_lines(TABLE.join(result)) == []


def test_prefix_cache_hit_ratio_from_the_counters_summed_over_series():
    a, b = '{"engine":"0"}', '{"engine":"1"}'
    rows = []
    for metric, values_a, values_b in (
        ("vllm:prefix_cache_queries_total", (0, 40, 50, 10), (10, 25, 30, 35)),
        ("vllm:prefix_cache_hits_total", (0, 15, 20, 2), (1, 5, 8, 9)),
    ):
        for t, va, vb in zip((0.0, 5.0, 10.0, 15.0), values_a, values_b):
            rows += [(t, metric, a, va), (t, metric, b, vb)]
    rows.append((20.0, "vllm:num_requests_running", a, 1))

    result = input_columns(TABLE, requests([(1.0, "", 10, math.nan)]), samples(rows))

    # step 0: queries (50 - 0) + (30 - 10) = 70, hits (20 - 0) + (8 - 1) = 27; step 1: engine 0 restarted
    assert result["prefix_cache_hit_ratio"].iloc[0] == pytest.approx(27 / 70)
    assert math.isnan(result["prefix_cache_hit_ratio"].iloc[1])
    assert "step 0 38.6%" in "\n".join(input_lines(TABLE.join(result)))
