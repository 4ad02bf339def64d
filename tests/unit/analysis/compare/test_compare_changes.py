"""What changed between rounds, and the statistics behind the deltas."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from llm_locust.analysis.compare.changes import change_summary, describe_changes
from llm_locust.analysis.compare.stats import median_ci, median_ratio_ci, ratio_of, throughput_ci


def test_one_label_declares_the_change_and_server_readings_corroborate():
    base = {"label.quant": "f32", "server_info.props.model_path": "/m/f32.gguf", "model": "m"}
    other = {"label.quant": "q4_0", "server_info.props.model_path": "/m/q4_0.gguf", "model": "m"}

    lines = describe_changes(base, other)

    assert lines == ["label.quant: f32 -> q4_0", "server_info.props.model_path: /m/f32.gguf -> /m/q4_0.gguf"]
    assert change_summary(lines) == (
        "label.quant: f32 -> q4_0 (also read: server_info.props.model_path: /m/f32.gguf -> /m/q4_0.gguf)"
    )


def test_two_readings_of_one_knob_are_one_change_two_knobs_are_more():
    same = ["server.batch_ceiling (n_slots): 4 -> 8", "server_info.props.total_slots: 4 -> 8"]
    assert not change_summary(same).startswith("more than one change")
    two = ["client.connections: 8 -> 64", "server.batch_ceiling (n_slots): 4 -> 8"]
    assert change_summary(two).startswith("more than one change: ")
    assert change_summary([]) == "none found"


def test_a_setting_read_on_one_side_only_is_not_a_change():
    assert describe_changes({"server.version": "0.3"}, {}) == []
    assert describe_changes({"label.quant": "f32"}, {}) == ["label.quant: f32 -> (not read)"]


def test_median_and_ratio_intervals():
    a = [10.0 + k for k in range(11)] + [50.0]  # one outlier: the median ignores it
    b = [2 * x for x in a[:-1]] + [21.0, 22.0]

    est = median_ci(a)
    ratio = median_ratio_ci(b, a)

    assert est.value == statistics.median(a) and est.n == 12
    assert est.low <= est.value <= est.high
    assert ratio.value == pytest.approx(statistics.median(b) / statistics.median(a))
    assert ratio.low <= ratio.value <= ratio.high and ratio.excludes_one
    assert np.isnan(median_ci([]).value) and np.isnan(median_ci([5.0]).low)


def test_throughput_interval_spans_the_prorated_and_completed_figures():
    est = throughput_ci(100.0, [80.0, 82.0, 78.0, 81.0, 79.0], n=10)  # prorated mean 80

    assert est.value == 100.0
    assert est.low < 81.0 and est.high > 99.0  # covers both ways of counting
    ratio = ratio_of(est, est)
    assert ratio.value == 1.0 and ratio.low < 1.0 < ratio.high


def test_gpu_memory_peak_sums_the_gpus_of_one_scrape():
    import pandas as pd

    from llm_locust.analysis.compare.rounds import gpu_memory_peak_mib

    samples = pd.DataFrame(
        {
            "t_s": [1.0, 1.0, 2.0, 2.0, 2.0],
            "source": ["dcgm"] * 5,
            "metric": ["DCGM_FI_DEV_FB_USED"] * 4 + ["vllm:num_requests_running"],
            "labels": ['{"gpu": "0"}', '{"gpu": "1"}', '{"gpu": "0"}', '{"gpu": "1"}', "{}"],
            "value": [1000.0, 3000.0, 1500.0, 2000.0, 9.0],
        }
    )

    assert gpu_memory_peak_mib(samples) == 4000.0  # 1000 + 3000 at t=1 beats 1500 + 2000 at t=2
    assert np.isnan(gpu_memory_peak_mib(samples[samples["metric"] != "DCGM_FI_DEV_FB_USED"]))
