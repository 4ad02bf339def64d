"""``llm-locust compare`` on request-rate ladders: steps keyed by the offered rate, achieved vs
requested rate per step, and a concurrency ladder against a rate ladder refused.

Expected figures are worked out here from the factory's grid (``rounds_factory.rate_round``),
not read back from the analysis: at 2 req/s, step 1 sends ``j = 0..39`` at
``T0 + 20 + j / 2 + 0.001``; each takes 985 ms (40 ms to the first token, 63 x 15 ms more) and
none waits (2 req/s x 0.985 s < 4 slots).
"""

from __future__ import annotations

import json
import math

import pytest

from llm_locust.analysis.compare import compare_rounds, comparison_json, write_comparison
from llm_locust.analysis.compare.changes import LoadAxisMismatch, load_round
from llm_locust.analysis.compare.comparecmd import main
from llm_locust.analysis.compare.rounds import summarize_round
from llm_locust.analysis.compare.table import format_round_table
from llm_locust.analysis.loadaxis import RATE
from tests.unit.analysis.compare.rounds_factory import TOKENS, ladder_round, rate_round

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)

WINDOW_S = 15.0  # dwell 20 s - warm-up 5 s


def _step1_by_hand() -> tuple[float, float]:
    """(output tokens/s, sends/s) of the 2 req/s step's window [T0 + 25, T0 + 40)."""
    sent = [20 + j / 2 + 0.001 for j in range(40)]
    done = [t for t in sent if 25 <= t + 0.985 < 40]
    in_window = [t for t in sent if 25 <= t < 40]
    return len(done) * TOKENS / WINDOW_S, len(in_window) / WINDOW_S


def test_two_rate_rounds_are_compared_step_by_step_on_the_offered_rate(tmp_path):
    a = rate_round(tmp_path / "a", labels={"build": "fp16"})
    b = rate_round(tmp_path / "b", slowdown=0.5, labels={"build": "int4"})

    comparison = compare_rounds([a, b])
    result = comparison_json(comparison)

    expected_tps, expected_sent = _step1_by_hand()
    assert (expected_tps, expected_sent) == (128.0, 2.0)  # 30 completions, 30 sends in 15 s
    assert result["load_axis"] == "rate"
    for summary in comparison.rounds:
        assert summary.axis is RATE
        assert sorted(summary.step_tps) == [1.0, 2.0, 4.0, 8.0]  # not the pool of 64 users
    for row in result["rounds"]:
        assert row["output_tps_r2"] == pytest.approx(expected_tps)
        assert row["achieved_rate_rps_r2"] == pytest.approx(expected_sent)
        assert "knee_users" not in row and "critical_concurrency" not in row
        assert not any(key.startswith("output_tps_c") for key in row)
        by_step = {s["rate_rps"]: s for s in row["output_tps_by_step"]}
        assert by_step[2.0]["achieved_rate_rps"] == pytest.approx(expected_sent)
    # round a: 4 slots of ~1 s serve 4 req/s; at 8 req/s throughput stays, requests wait -> 4.
    # round b: ~0.49 s a request serves 8 req/s without a queue -> no critical rate, knee at 8.
    assert [r["critical_rate_rps"] for r in result["rounds"]] == [4.0, None]
    assert [r["knee_rate_rps"] for r in result["rounds"]] == [4.0, 8.0]
    # round a's knee step, 4 req/s: 60 sends on the grid in its 15 s window, each 1 ms late
    assert result["rounds"][0]["achieved_rate_rps_knee"] == pytest.approx(60 / WINDOW_S)
    assert result["rounds"][0]["send_lag_p99_ms_knee"] == pytest.approx(1.0, abs=0.01)

    attribution = result["attribution"]
    assert [s["rate_rps"] for s in attribution["concurrent"]["common_steps"]] == [1, 2, 4, 8]
    assert attribution["kind"] == "undetermined"  # no baseline runs, and no concurrency-1 step
    text = "\n".join(attribution["evidence"])
    assert "(4 vs 8 req/s)" in text and " users" not in text
    assert "request-rate ladder has no one-request-at-a-time step" in text

    console = format_round_table(comparison.table)
    for header in ("tok/s @2 req/s", "sent req/s @2 req/s", "knee req/s", "critical req/s"):
        assert header in console, console
    # round b's knee figures are its top step's: the cell says so, round a's found knee does not
    knee_line = next(line for line in console.splitlines() if line.startswith("knee req/s"))
    assert knee_line.split()[2:] == ["4", "|", "8", "(top", "step,", "no", "knee)"], knee_line


def test_a_rate_pool_of_one_user_is_no_single_request_step(tmp_path):
    summary = summarize_round(load_round(rate_round(tmp_path / "r", pool=1, rates=(1.0, 2.0))))
    assert summary.single_source == "none"
    assert math.isnan(summary.single_decode_tps.value)


@pytest.mark.parametrize("allow", [False, True])
def test_a_concurrency_ladder_and_a_rate_ladder_are_refused(tmp_path, allow):
    ladder = ladder_round(tmp_path / "ladder")
    rate = rate_round(tmp_path / "rate")
    with pytest.raises(LoadAxisMismatch) as info:
        compare_rounds([ladder, rate], allow_different_workload=allow)
    message = str(info.value)
    assert "different load axes" in message
    assert f"{ladder}: concurrency ladder" in message and f"{rate}: request-rate ladder" in message


def test_cli_refuses_a_mixed_pair_with_exit_2(tmp_path, capsys):
    ladder = ladder_round(tmp_path / "ladder")
    rate = rate_round(tmp_path / "rate")
    assert main([str(rate), str(ladder), "--out", str(tmp_path / "cmp")]) == 2
    assert "different load axes" in capsys.readouterr().err
    assert not (tmp_path / "cmp").exists()


def test_written_rate_comparison(tmp_path):
    a = rate_round(tmp_path / "a", labels={"build": "fp16"})
    b = rate_round(tmp_path / "b", slowdown=0.5, labels={"build": "int4"})
    out = write_comparison(compare_rounds([a, b]), tmp_path / "cmp").out_dir
    data = json.loads((out / "compare.json").read_text())
    assert data["load_axis"] == "rate"
    header = (out / "rounds.csv").read_text().splitlines()[0].split(",")
    assert "output_tps_r8" in header and "achieved_rate_rps_r8" in header and "critical_rate_rps" in header
    assert (out / "throughput_by_round.png").stat().st_size > 0
