"""``--fail-on`` thresholds (issue 14): parsed by a small grammar, checked on the run's own numbers
after the analysis, exit 3 when one fails. Every value is recomputed here from the factory's
``requests.csv`` with the csv module and plain arithmetic (no analysis code)."""

from __future__ import annotations

import csv
import json
import math

import jsonschema
import pandas as pd
import pytest

from llm_locust.analysis.analyzecmd import main as analyze_main
from llm_locust.analysis.pipeline import analyze_run
from llm_locust.analysis.thresholds import (
    EXIT_THRESHOLD_FAILED,
    ThresholdError,
    evaluate,
    parse_threshold,
    parse_thresholds,
)
from llm_locust.analysis.verdict.jsonout import SCHEMA_PATH
from tests.analysis_factories import T0, scenario_ladder, step_spec

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)

DWELL_S = 10.0
USERS = (1, 2, 4, 8)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """Ladder 1, 2, 4, 8 (10 s steps, no warm-up); at 8 users every request is refused (429),
    so the verdict is ``rejections`` with critical concurrency 4. TTFTs are spread so that the
    percentiles are no single value: 40 + (37 i mod 120) ms for the i-th successful request."""
    path = scenario_ladder(
        tmp_path_factory.mktemp("thresholds") / "run",
        [step_spec(1), step_spec(2), step_spec(4), step_spec(8, fail_every=1, fail_e2e_ms=200.0)],
        dwell_s=DWELL_S,
    )
    with open(path / "requests.csv", newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = reader.fieldnames, list(reader)
    ok = [r for r in rows if not r["error_kind"]]
    for i, row in enumerate(ok):
        row["ttft_ms"] = 40 + (37 * i) % 120
    # a few failures at 2 users too, so the run's error rate is not the last step's alone
    for row in [r for r in rows if float(r["t_start_s"]) < T0 + 2 * DWELL_S and float(r["t_start_s"]) >= T0 + DWELL_S][
        ::5
    ]:
        row.update(error_kind="http_5xx", status_code=503, output_tokens=0, ttft_ms="", finish_reason="")
    with open(path / "requests.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return path


def requests_of(path):
    with open(path / "requests.csv", newline="") as f:
        return list(csv.DictReader(f))


def in_step(rows, users):
    """Requests that ended in the window of the step with ``users``."""
    k = USERS.index(users)
    start, end = T0 + k * DWELL_S, T0 + (k + 1) * DWELL_S
    return [r for r in rows if start <= float(r["t_start_s"]) + float(r["e2e_ms"]) / 1000 < end]


def percentile(values, q):
    """Linear interpolation between closest ranks (numpy's default), written out."""
    values = sorted(values)
    pos = q * (len(values) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def expected_numbers(path):
    rows = requests_of(path)
    knee_ok = [r for r in in_step(rows, 4) if not r["error_kind"]]
    at_2 = in_step(rows, 2)
    return {
        "error_rate": sum(1 for r in rows if r["error_kind"]) / len(rows),
        "ttft_p95_knee": percentile([float(r["ttft_ms"]) for r in knee_ok], 0.95),
        "ttft_p50_at_2": percentile([float(r["ttft_ms"]) for r in at_2 if not r["error_kind"]], 0.50),
        "output_tps_at_2": sum(float(r["output_tokens"]) for r in at_2 if not r["error_kind"]) / DWELL_S,
        "error_rate_at_2": sum(1 for r in at_2 if r["error_kind"]) / len(at_2),
    }


def checked(path, *expressions):
    result = analyze_run(path, fail_on=parse_thresholds(expressions))
    return result, {c.threshold.expression: c for c in result.thresholds}


def test_values_are_the_run_own_numbers(run_dir):
    expected = expected_numbers(run_dir)
    assert 0.3 < expected["error_rate"] < 0.99 and 0 < expected["error_rate_at_2"] < 0.3
    result, checks = checked(
        run_dir, "error_rate>0.01", "ttft_p95_ms>100", "ttft_p50_ms@2>=1000", "output_tps@2<500",
        "error_rate@2>0.5", "critical_concurrency<8", "bottleneck!=none",
    )  # fmt: skip
    assert result.verdict.bottleneck.value == "rejections" and result.verdict.critical_concurrency == 4
    assert checks["error_rate>0.01"].value == pytest.approx(expected["error_rate"], abs=1e-12)
    assert checks["ttft_p95_ms>100"].value == pytest.approx(expected["ttft_p95_knee"], abs=1e-9)
    assert checks["ttft_p50_ms@2>=1000"].value == pytest.approx(expected["ttft_p50_at_2"], abs=1e-9)
    assert checks["output_tps@2<500"].value == pytest.approx(expected["output_tps_at_2"], abs=1e-9)
    assert checks["error_rate@2>0.5"].value == pytest.approx(expected["error_rate_at_2"], abs=1e-12)
    assert checks["critical_concurrency<8"].value == 4.0 and checks["bottleneck!=none"].value == "rejections"
    # which fail follows from those numbers
    failed = {e for e, c in checks.items() if c.failed}
    want = {"error_rate>0.01", "critical_concurrency<8", "bottleneck!=none"}
    want |= {"ttft_p95_ms>100"} if expected["ttft_p95_knee"] > 100 else set()
    want |= {"output_tps@2<500"} if expected["output_tps_at_2"] < 500 else set()
    assert failed == want and result.exit_code == EXIT_THRESHOLD_FAILED
    assert "ttft_p95_ms at the knee (4 users) is" in checks["ttft_p95_ms>100"].text


def test_all_pass_exits_0_and_verdict_json_lists_them(run_dir):
    expected = expected_numbers(run_dir)
    gates = ["error_rate>0.99", f"ttft_p95_ms>{expected['ttft_p95_knee'] + 1:.3f}", "critical_concurrency<4",
             "bottleneck==compute", "output_tps@4<1"]  # fmt: skip
    result, checks = checked(run_dir, *gates)
    assert not any(c.failed for c in checks.values()) and result.exit_code == 0
    data = json.loads((run_dir / "report" / "verdict.json").read_text())
    jsonschema.validate(data, json.loads(SCHEMA_PATH.read_text()))
    assert [t["expression"] for t in data["thresholds"]] == gates
    assert data["thresholds"][0]["value"] == pytest.approx(expected["error_rate"], abs=1e-12)
    assert data["thresholds"][0]["where"] == "run" and data["thresholds"][4]["where"] == 4
    assert data["thresholds"][1]["where"] == "knee" and data["thresholds"][1]["unit"] == "ms"


def test_analyze_cli_exit_codes_and_summary(run_dir, capsys):
    expected = expected_numbers(run_dir)
    code = analyze_main([str(run_dir), "--fail-on", "error_rate>0.01", "--fail-on", "ttft_p95_ms>100000"])
    out = capsys.readouterr().out
    assert code == EXIT_THRESHOLD_FAILED == 3
    assert "Thresholds: 1 of 2 failed (exit 3)" in out
    assert f"FAILED error_rate>0.01: error_rate over the run is {expected['error_rate']:.4g} ratio" in out
    summary = (run_dir / "report" / "summary.md").read_text()
    assert "## Thresholds (--fail-on)" in summary and "- **FAILED error_rate>0.01" in summary
    assert "- passed ttft_p95_ms>100000" in summary
    assert analyze_main([str(run_dir), "--fail-on", "ttft_p95_ms>100000"]) == 0


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("ttft_p99_ms>5", "unknown metric 'ttft_p99_ms'"),
        ("ttft_p95_ms=>5", "expected one operator"),
        ("ttft_p95_ms 5", "expected one operator"),
        ("ttft_p95_ms>fast", "'fast' is not a number"),
        ("output_tps@3<500", "no ladder step has 3 users; the steps: 1, 2, 4, 8"),
        ("output_tps@x<500", "@ takes a ladder step's users"),
        ("critical_concurrency@4<8", "takes no @"),
        ("bottleneck>none", "compared with == or != only"),
        ("bottleneck!=slow", "unknown bottleneck kind 'slow'"),
    ],
)
def test_malformed_is_refused_before_the_analysis(run_dir, tmp_path, capsys, expression, message):
    report = run_dir / "report"
    before = {p.name: p.stat().st_mtime_ns for p in report.iterdir()} if report.exists() else {}
    assert analyze_main([str(run_dir), "--fail-on", expression]) == 2
    assert message in capsys.readouterr().err
    after = {p.name: p.stat().st_mtime_ns for p in report.iterdir()} if report.exists() else {}
    assert after == before  # nothing analysed or written


def test_grammar_spacing_and_parts():
    t = parse_threshold("  output_tps @ knee >= 12.5 ")
    assert (t.metric, t.where, t.op, t.limit) == ("output_tps", "knee", ">=", 12.5)
    with pytest.raises(ThresholdError):
        parse_threshold("")


def table(users, **columns):
    frame = pd.DataFrame({"step": range(len(users)), "target_users": [float(u) for u in users], **columns})
    frame["valid"] = True
    frame["failures_dominate"] = False
    return frame


NO_REQUESTS = pd.DataFrame({"error_kind": pd.Series([], dtype=str)})


@pytest.mark.parametrize(
    ("expression", "failed", "value"),
    [
        ("critical_concurrency<2", False, 2.0),  # at least 2: never below 2
        ("critical_concurrency<=1", False, 2.0),
        ("critical_concurrency>=1", True, 2.0),  # at least 2: always >= 1
        ("critical_concurrency!=1", True, 2.0),
        ("critical_concurrency<8", True, None),  # 2..inf: cannot tell, so not shown to pass
    ],
)
def test_critical_concurrency_not_reached_is_a_lower_bound(expression, failed, value):
    [check] = evaluate(
        parse_thresholds([expression]), table=table([1, 2]), requests=NO_REQUESTS, critical_users=None,
        bottleneck="none",
    )  # fmt: skip
    assert (check.failed, check.value) == (failed, value)


def test_unmeasured_values_fail_and_say_why():
    frame = table([1, 2, 4], ttft_p95_ms=[10.0, 20.0, math.nan])
    frame.loc[2, "valid"] = False  # the top step is invalid: the knee falls back to 2 users
    checks = evaluate(
        parse_thresholds(["ttft_p95_ms>15", "ttft_p95_ms@4>15", "critical_concurrency<8", "bottleneck==client"]),
        table=frame, requests=NO_REQUESTS, critical_users=None, bottleneck="client",
    )  # fmt: skip
    knee, at_4, critical, kind = checks
    assert knee.failed and knee.value == 20.0 and "the highest usable step, 2 users" in knee.text
    assert at_4.failed and at_4.value is None and "not measured" in at_4.text
    assert critical.failed and critical.value is None and "load client was the limit" in critical.text
    assert kind.failed and kind.value == "client"


def test_a_rate_ladder_reads_the_knee_at_its_critical_rate_and_refuses_users(tmp_path):
    # rounds_factory.rate_round: 4 slots of ~1 s serve 4 req/s; at 8 req/s requests queue, so the
    # critical rate is 4 req/s, where every request's TTFT is its 40 ms prefill (no queue yet)
    from tests.unit.analysis.compare.rounds_factory import rate_round

    run_dir = rate_round(tmp_path / "rate")
    result = analyze_run(run_dir, fail_on=parse_thresholds(["ttft_p95_ms@knee>100", "critical_concurrency>=2"]))
    knee, critical = result.thresholds
    assert knee.value == pytest.approx(40.0) and not knee.failed
    assert knee.text == "passed ttft_p95_ms@knee>100: ttft_p95_ms at the knee (4 req/s) is 40 ms"
    assert critical.failed and "a request-rate ladder has a critical rate" in critical.text
    with pytest.raises(ThresholdError, match="this request-rate ladder's steps are requests/s: use @knee"):
        analyze_run(run_dir, fail_on=parse_thresholds(["ttft_p95_ms@64<1000"]))  # 64: the pool, no step
