"""Goodput (``--slo``) and the server-side TTFT split, checked against values computed here from
``requests.csv`` with the csv module and plain arithmetic (not with the code under test)."""

from __future__ import annotations

import csv
import math

import pytest

from llm_locust.analysis.perstep.goodput import parse_slo
from llm_locust.analysis.pipeline import analyze_run
from tests.analysis_factories import T0, make_request, write_run_dir

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)

DWELL_S = 10.0
USERS = (1, 2, 4)


def ladder_requests() -> list[dict]:
    """Per step, requests of varied TTFT / E2E / tokens, some failed, some with server timings."""
    rows = []
    for k, users in enumerate(USERS):
        start = T0 + k * DWELL_S
        for i in range(6 * users):
            ttft = 100.0 + 60.0 * k + 40.0 * (i % 5)  # climbs with the step
            tokens = 20 + (i % 3) * 10
            e2e = ttft + (tokens - 1) * (25.0 + 5.0 * k + (i % 4) * 5.0)
            row = make_request(start + 0.01 + i * 0.3, ttft_ms=ttft, e2e_ms=e2e, output_tokens=tokens,
                               error_kind="http_5xx" if i % 7 == 6 else "", request_id=f"r{k}-{i}")  # fmt: skip
            if i % 2 == 0:  # half the requests carry the server's timings
                row.update(server_queue_ms=5.0 * k if k else "", server_prompt_ms=60.0 + i,
                           server_decode_ms=e2e - ttft - 3.0)  # fmt: skip
            rows.append(row)
    return rows


@pytest.fixture
def run_dir(tmp_path):
    steps = [(u, T0 + k * DWELL_S, T0 + (k + 1) * DWELL_S) for k, u in enumerate(USERS)]
    return write_run_dir(tmp_path / "run", requests=ladder_requests(), steps=steps, slo="ttft_ms<=300,tpot_ms<=40")


def read_requests(run_dir) -> list[dict]:
    with open(run_dir / "requests.csv", newline="") as f:
        return list(csv.DictReader(f))


def num(text: str) -> float:
    return float(text) if text not in ("", None) else math.nan


def in_step(row: dict, k: int) -> bool:
    end = num(row["t_start_s"]) + num(row["e2e_ms"]) / 1000
    return T0 + k * DWELL_S <= end < T0 + (k + 1) * DWELL_S


def test_goodput_per_step_matches_an_independent_count(run_dir):
    result = analyze_run(run_dir)
    rows = read_requests(run_dir)
    with open(run_dir / "report" / "steps.csv", newline="") as f:
        steps = list(csv.DictReader(f))

    best = None
    for k in range(len(USERS)):
        done = [r for r in rows if in_step(r, k)]
        met = []
        for r in done:
            ttft, e2e, n = num(r["ttft_ms"]), num(r["e2e_ms"]), num(r["output_tokens"])
            tpot = (e2e - ttft) / (n - 1)
            if r["error_kind"] == "" and ttft <= 300 and tpot <= 40:
                met.append(r)
        expected_tps = sum(num(r["output_tokens"]) for r in met) / DWELL_S
        assert num(steps[k]["goodput_tps"]) == pytest.approx(expected_tps)
        assert num(steps[k]["goodput_rps"]) == pytest.approx(len(met) / DWELL_S)
        assert num(steps[k]["slo_met_share"]) == pytest.approx(len(met) / len(done))
        if best is None or expected_tps > best[1]:
            best = (USERS[k], expected_tps)
    assert 0 < num(steps[2]["slo_met_share"]) < num(steps[0]["slo_met_share"]) <= 1  # the data's SLO misses grow
    assert result.goodput_knee_users == best[0]
    summary = (run_dir / "report" / "summary.md").read_text()
    assert f"Knee by goodput (SLO ttft_ms<=300,tpot_ms<=40): {best[0]} users" in summary


def test_analyze_slo_overrides_the_runs_and_none_means_no_columns(run_dir, tmp_path):
    loose = analyze_run(run_dir, write=False, slo="e2e_ms<=100000")
    ok = [r for r in read_requests(run_dir) if r["error_kind"] == "" and in_step(r, 0)]

    assert loose.table["goodput_tps"].iloc[0] == pytest.approx(sum(num(r["output_tokens"]) for r in ok) / DWELL_S)
    plain = write_run_dir(tmp_path / "plain", requests=ladder_requests(), steps=[(1, T0, T0 + DWELL_S)])
    assert "goodput_tps" not in analyze_run(plain, write=False).table.columns


def test_ttft_split_parts_are_means_of_the_server_timings(run_dir):
    result = analyze_run(run_dir)
    rows = read_requests(run_dir)

    for k in range(len(USERS)):
        timed = [r for r in rows if in_step(r, k) and r["error_kind"] == "" and r["server_prompt_ms"] != ""]
        queue = [num(r["server_queue_ms"]) if r["server_queue_ms"] != "" else 0.0 for r in timed]
        prompt = [num(r["server_prompt_ms"]) for r in timed]
        outside = [num(r["ttft_ms"]) - q - p for r, q, p in zip(timed, queue, prompt)]
        e2e_out = [num(r["e2e_ms"]) - q - p - num(r["server_decode_ms"]) for r, q, p in zip(timed, queue, prompt)]
        row = result.table.iloc[k]
        assert row["server_timed"] == len(timed)
        assert row["ttft_server_prefill_ms"] == pytest.approx(sum(prompt) / len(prompt))
        assert row["ttft_outside_ms"] == pytest.approx(sum(outside) / len(outside))
        assert row["e2e_outside_ms"] == pytest.approx(sum(e2e_out) / len(e2e_out))
        if k == 0:
            assert math.isnan(row["ttft_server_queue_ms"])  # no request of the step reported a queue time
        else:
            assert row["ttft_server_queue_ms"] == pytest.approx(5.0 * k)
        parts = (0 if k == 0 else row["ttft_server_queue_ms"]) + row["ttft_server_prefill_ms"] + row["ttft_outside_ms"]
        assert parts == pytest.approx(row["ttft_timed_mean_ms"])
    assert "## TTFT: server vs outside" in (run_dir / "report" / "summary.md").read_text()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no objective"),
        ("ttft<=5", "unknown metric 'ttft'"),
        ("ttft_ms>=5", "ttft_ms takes <="),
        ("ttft_ms<5", "is not METRIC<=NUMBER"),
        ("ttft_ms<=5,ttft_ms<=6", "named twice"),
        ("decode_tps<=5", "decode_tps takes >="),
    ],
)
def test_bad_slo_text_is_refused(text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("*", r"\*")):
        parse_slo(text)
