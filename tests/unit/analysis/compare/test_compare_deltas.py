"""``llm-locust compare`` on factory rounds: every delta recomputed here from the files alone."""

from __future__ import annotations

import csv
import json
import math

import pytest

from llm_locust.analysis.compare import WorkloadMismatch, compare_rounds, comparison_json, write_comparison
from tests.compare_recompute import single_decode_median as _single_decode_median
from tests.compare_recompute import step_tps as _tps
from tests.compare_recompute import step_tps_prorated as _prorated
from tests.unit.analysis.compare.rounds_factory import baseline_round, ladder_round

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)


def test_slowdown_is_compute_cost_with_deltas_recomputed(tmp_path):
    a = ladder_round(tmp_path / "a", labels={"build": "fp16"})
    b = ladder_round(tmp_path / "b", slowdown=2.0, seed=7, labels={"build": "int4"})

    result = comparison_json(compare_rounds([a, b]))
    attribution = result["attribution"]

    assert attribution["kind"] == "compute_cost", attribution["evidence"]
    expected_decode = _single_decode_median(b) / _single_decode_median(a)
    assert attribution["single_request"]["decode_tps_ratio"]["value"] == pytest.approx(expected_decode, rel=1e-9)
    assert expected_decode == pytest.approx(0.5, rel=0.05)  # the factory's slowdown, independently
    for step in attribution["concurrent"]["common_steps"]:
        users = step["users"]
        assert step["output_tps_prorated_ratio"]["value"] == pytest.approx(
            _prorated(b, users) / _prorated(a, users), rel=1e-9
        )
    for row, run_dir in zip(result["rounds"], (a, b)):
        for users in (1, 2, 4, 8):
            assert row[f"output_tps_c{users}"] == pytest.approx(_tps(run_dir, users), rel=1e-9)
        assert row["critical_concurrency"] == 4
    assert result["rounds"][1]["change"].startswith("label.build: fp16 -> int4")


def test_batch_ceiling_is_batching_or_scheduling(tmp_path):
    a = ladder_round(tmp_path / "a", max_num_seqs=2, labels={"max_num_seqs": "2"})
    b = ladder_round(tmp_path / "b", max_num_seqs=8, seed=5, labels={"max_num_seqs": "8"})

    result = comparison_json(compare_rounds([a, b]))
    attribution = result["attribution"]

    assert attribution["kind"] == "batching_or_scheduling", attribution["evidence"]
    decode = attribution["single_request"]["decode_tps_ratio"]
    assert decode["value"] == pytest.approx(_single_decode_median(b) / _single_decode_median(a), rel=1e-9)
    assert abs(decode["value"] - 1) < 0.1
    knee = attribution["concurrent"]["knee_output_tps_prorated_ratio"]["value"]
    assert knee == pytest.approx(_prorated(b, 8) / _prorated(a, 2), rel=1e-9)  # each round's own knee
    assert knee > 1.5


@pytest.mark.parametrize(("ttft_b_ms", "expected"), [(34.0, "batching_or_scheduling"), (70.0, "mixed")])
def test_a_ttft_difference_under_one_inter_token_time_is_not_the_changes(tmp_path, ttft_b_ms, expected):
    # seen on the embedded server (20 ms steps) on a busy machine: TTFT 29 vs 25 ms with equal decode
    # rates made a batch-ceiling A/B "mixed"; a request waits up to one step before its prefill
    a = ladder_round(tmp_path / "a", max_num_seqs=2)
    b = ladder_round(tmp_path / "b", max_num_seqs=8, seed=5, ttft_ms=ttft_b_ms)

    attribution = comparison_json(compare_rounds([a, b]))["attribution"]

    step_ms = 1000.0 / _single_decode_median(a)  # the baseline's single-request inter-token time
    assert abs(40.0 - 34.0) < step_ms < abs(70.0 - 40.0)  # the two cases lie on either side of the bound
    assert attribution["kind"] == expected, attribution["evidence"]
    discounted = any("less than one inter-token time" in line for line in attribution["evidence"])
    assert discounted == (expected == "batching_or_scheduling")


def test_same_server_twice_is_no_difference_with_detectable_size(tmp_path):
    a = ladder_round(tmp_path / "a")
    b = ladder_round(tmp_path / "b", seed=3)

    attribution = comparison_json(compare_rounds([a, b]))["attribution"]

    assert attribution["kind"] == "no_difference", attribution["evidence"]
    assert "detects single-request decode-rate differences of about" in attribution["evidence"][-1]
    assert attribution["detectable_relative_difference"]["single_decode"] >= 0.10


def test_baseline_runs_give_the_single_request_figures(tmp_path):
    for name, slowdown in (("r1", 1.0), ("r2", 0.5)):
        baseline_round(tmp_path / name / "baseline", slowdown=slowdown, seed=len(name) + int(slowdown * 10))
        ladder_round(tmp_path / name / "ladder", slowdown=slowdown)

    comparison = compare_rounds([tmp_path / "r1", tmp_path / "r2"])
    attribution = comparison_json(comparison)["attribution"]

    expected = _single_decode_median(tmp_path / "r2" / "baseline") / _single_decode_median(tmp_path / "r1" / "baseline")
    assert attribution["single_request"]["decode_tps_ratio"]["value"] == pytest.approx(expected, rel=1e-9)
    assert comparison.rounds[0].single_source == "baseline run (12 requests)"
    assert attribution["kind"] == "compute_cost"
    assert attribution["single_request"]["decode_tps_ratio"]["value"] > 1.8  # faster: measured, not assumed


def test_different_workload_is_refused_with_the_difference_named(tmp_path):
    a = ladder_round(tmp_path / "a")
    workload = {
        "protocol": "openai-chat",
        "max_tokens": 128,
        "ignore_eos": True,
        "temperature": 0.0,
        "prompt_set_sha256": "abc",
    }
    b = ladder_round(tmp_path / "b", workload=workload)

    with pytest.raises(WorkloadMismatch, match=r"max_tokens: .* has 64, .* has 128"):
        compare_rounds([a, b])
    allowed = compare_rounds([a, b], allow_different_workload=True)
    assert any("max_tokens" in d for d in allowed.workload_differences)


def test_two_labels_changed_is_more_than_one_change(tmp_path):
    a = ladder_round(tmp_path / "a", labels={"quant": "f16", "seqs": "4"})
    b = ladder_round(tmp_path / "b", labels={"quant": "q4", "seqs": "8"})

    cell = compare_rounds([a, b]).table["change"].iloc[1]
    assert cell.startswith("more than one change"), cell
    assert "label.quant: f16 -> q4" in cell and "label.seqs: 4 -> 8" in cell


def test_written_files(tmp_path):
    a = ladder_round(tmp_path / "a")
    b = ladder_round(tmp_path / "b", slowdown=2.0)

    out = write_comparison(compare_rounds([a, b]), tmp_path / "cmp").out_dir

    with open(out / "rounds.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["round"] for r in rows] == [str(a), str(b)]
    assert float(rows[1]["output_tps_c4"]) == pytest.approx(_tps(b, 4), rel=1e-6)
    assert json.loads((out / "compare.json").read_text())["attribution"]["kind"] == "compute_cost"
    for name in ("throughput_by_round.png", "ttft_by_round.png", "single_decode_by_round.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "## Attribution" in (out / "summary.md").read_text()


def _round(path, *, baseline_slowdown: float, ladder_slowdown: float, max_num_seqs: int, seed: int):
    baseline_round(path / "baseline", slowdown=baseline_slowdown, seed=seed)
    ladder_round(path / "ladder", slowdown=ladder_slowdown, max_num_seqs=max_num_seqs, seed=seed + 1)
    return path


@pytest.mark.parametrize(
    ("b_ladder_slowdown", "expected"),
    [
        # round b's own two single-request figures differ more (x0.77) than the rounds' baselines
        # (x1.18): that difference is not the change's; the batch ceiling explains the gain
        (1.1, "batching_or_scheduling"),
        # round b repeats its single-request figure (x1.0): the faster single request is real,
        # and the 4x concurrent gain is far more than it explains
        (0.85, "mixed"),
    ],
)
def test_single_request_difference_is_judged_against_the_rounds_own_repeat(tmp_path, b_ladder_slowdown, expected):
    a = _round(tmp_path / "a", baseline_slowdown=1.0, ladder_slowdown=1.0, max_num_seqs=2, seed=11)
    b = _round(tmp_path / "b", baseline_slowdown=0.85, ladder_slowdown=b_ladder_slowdown, max_num_seqs=8, seed=21)

    attribution = comparison_json(compare_rounds([a, b]))["attribution"]

    between = _single_decode_median(b / "baseline") / _single_decode_median(a / "baseline")
    assert attribution["single_request"]["decode_tps_ratio"]["value"] == pytest.approx(between, rel=1e-9)
    assert between == pytest.approx(1 / 0.85, rel=0.05)  # clear on its own (> 10 %, 12 requests a side)
    repeats = {
        name: _single_decode_median(path / "ladder") / _single_decode_median(path / "baseline")
        for name, path in (("a", a), ("b", b))
    }
    largest = max(repeats, key=lambda name: abs(math.log(repeats[name])))
    repeat = attribution["single_request"]["repeat_within_round"]["decode_tps"]
    assert repeat["round"] == str(tmp_path / largest)
    assert repeat["ratio"]["value"] == pytest.approx(repeats[largest], rel=1e-9)
    assert attribution["kind"] == expected, attribution["evidence"]
    assert any("repeated within round" in line for line in attribution["evidence"])


@pytest.mark.parametrize(
    ("key", "first", "second"),
    [("dataset_sha256", "aa" * 32, "bb" * 32), ("input_tokens", 256, 512), ("shared_prefix_tokens", None, 192)],
)
def test_different_inputs_are_refused(tmp_path, key, first, second):
    base = {"protocol": "openai-chat", "max_tokens": 64, "ignore_eos": True, "temperature": 0.0, "seed": 0}
    a = ladder_round(tmp_path / "a", workload={**base, key: first})
    b = ladder_round(tmp_path / "b", workload={**base, key: second})

    with pytest.raises(WorkloadMismatch, match=f"{key}: .* has {first!r}, .* has {second!r}"):
        compare_rounds([a, b])


def test_concurrent_difference_without_any_single_request_figure_is_undetermined(tmp_path):
    # ladders from 2 users and no baseline runs: no single-request figure in either round
    a = ladder_round(tmp_path / "a", max_num_seqs=2, users=(2, 4, 8))
    b = ladder_round(tmp_path / "b", max_num_seqs=8, users=(2, 4, 8), seed=5)

    attribution = comparison_json(compare_rounds([a, b]))["attribution"]

    assert attribution["single_request"]["decode_tps_ratio"]["value"] is None
    assert _tps(b, 8) / _tps(a, 2) > 1.5  # the concurrent difference is clear, recomputed from the files
    assert attribution["kind"] == "undetermined", attribution["evidence"]
    assert "cannot be split" in attribution["evidence"][-1]


def test_prorated_step_throughput_with_its_bins_interval(tmp_path):
    run = ladder_round(tmp_path / "a")

    summary = compare_rounds([run, ladder_round(tmp_path / "b", seed=3)]).rounds[0]

    assert sorted(summary.step_tps_prorated) == [1.0, 2.0, 4.0, 8.0]
    for users, estimate in summary.step_tps_prorated.items():
        assert estimate.value == pytest.approx(_prorated(run, users), rel=1e-9)
        assert estimate.low <= estimate.value <= estimate.high
        # the bootstrap replicates are kept for the ratio intervals (stats.ratio_of)
        assert estimate.samples is not None and len(estimate.samples) == 2000


def test_compare_json_says_its_schema(tmp_path):
    result = comparison_json(compare_rounds([ladder_round(tmp_path / "a"), ladder_round(tmp_path / "b", seed=3)]))

    assert result["schema"] == 2  # the prorated ratios and the what-moved fields (docs-notes/attribution.md)
    assert set(result["attribution"]) >= {"batch_ceiling", "critical_concurrency", "shares"}
