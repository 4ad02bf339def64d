"""Every evidence value of ``report/verdict.json`` recomputed here, independently, from the
``requests.csv`` / ``server_metrics.csv`` / ``client_load.csv`` the factories wrote (plain csv
module and arithmetic; no analysis code)."""

import csv
import json
import statistics

import pytest

from llm_locust.analysis.pipeline import analyze_run
from tests.analysis_factories import T0, scenario_ladder, step_spec

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)

DWELL_S = 10.0


def rows(path, name):
    with open(path / name, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def window(k):
    return T0 + k * DWELL_S, T0 + (k + 1) * DWELL_S


def finished_in(reqs, k):
    start, end = window(k)
    return [r for r in reqs if start <= float(r["t_start_s"]) + float(r["e2e_ms"]) / 1000 < end]


def prorated_tps(reqs, k):
    """Tokens generated in step k's window: each successful request's tokens spread evenly
    from its first token to its end (what the verdict judges throughput on)."""
    start, end = window(k)
    total = 0.0
    for r in reqs:
        if r["error_kind"]:
            continue
        t0 = float(r["t_start_s"])
        first, last = t0 + float(r["ttft_ms"]) / 1000, t0 + float(r["e2e_ms"]) / 1000
        tokens = float(r["output_tokens"])
        if last <= first:
            total += tokens if start <= last < end else 0.0
        else:
            total += tokens * max(0.0, min(last, end) - max(first, start)) / (last - first)
    return total / DWELL_S


def server_mean(samples, metric, k):
    start, end = window(k)
    values = [float(s["value"]) for s in samples if s["metric"] == metric and start <= float(s["t_s"]) < end]
    return sum(values) / len(values)  # one sample a second, each holding 1 s of the window


def inflight(reqs, k):
    start, end = window(k)
    total = 0.0
    for r in reqs:
        a, b = float(r["t_start_s"]), float(r["t_start_s"]) + float(r["e2e_ms"]) / 1000
        total += max(0.0, min(b, end) - max(a, start))
    return total / DWELL_S


def verdict_of(run_dir):
    analyze_run(run_dir)
    data = json.loads((run_dir / "report" / "verdict.json").read_text())
    return data, {e["rule"]: e for e in data["evidence"]}


def test_rejections_evidence_from_requests_csv(tmp_path):
    run = scenario_ladder(
        tmp_path / "run", [step_spec(1), step_spec(2), step_spec(4), step_spec(8, fail_every=1, fail_e2e_ms=5.0)]
    )
    data, ev = verdict_of(run)
    reqs = rows(run, "requests.csv")
    failed = [r for r in finished_in(reqs, 3) if r["error_kind"]]
    share = len(failed) / len(finished_in(reqs, 3))
    assert len(failed) / len(reqs) > 0.99  # the whole run: over 99 % of requests are 429s
    assert data["bottleneck"] == "rejections" and data["critical_concurrency"] == 4
    values = ev["rejections"]["values"]
    assert values["failed_share"] == pytest.approx(share)
    assert values["client_http_429"] == sum(r["error_kind"] == "http_429" for r in failed)
    assert values["failed"] == len(failed) and values["users"] == 8
    assert data["steps"] == [{"users": u, "valid": True, "invalid_reason": ""} for u in (1, 2, 4, 8)]


def test_scheduler_ceiling_evidence_from_server_metrics_csv(tmp_path):
    queued = step_spec(8, e2e_ms=2000.0, ttft_ms=1100.0, running=4, waiting=4)
    run = scenario_ladder(tmp_path / "run", [step_spec(1), step_spec(2), step_spec(4), queued])
    data, ev = verdict_of(run)
    reqs, samples = rows(run, "requests.csv"), rows(run, "server_metrics.csv")
    assert data["bottleneck"] == "scheduler_ceiling" and data["critical_concurrency"] == 4
    values = ev["scheduler_ceiling"]["values"]
    assert values["server_waiting"] == pytest.approx(server_mean(samples, "vllm:num_requests_waiting", 3))
    assert values["server_running"] == pytest.approx(server_mean(samples, "vllm:num_requests_running", 3))
    assert values["ceiling"] == pytest.approx(
        max(server_mean(samples, "vllm:num_requests_running", k) for k in range(4))
    )
    assert values["gain_per_doubling"] == pytest.approx(prorated_tps(reqs, 3) / prorated_tps(reqs, 2))
    ok = [float(r["ttft_ms"]) for r in finished_in(reqs, 3) if not r["error_kind"]]
    assert values["ttft_p50_ms"] == pytest.approx(statistics.median(ok))


def test_client_evidence_from_requests_and_client_load_csv(tmp_path):
    steps = [
        step_spec(1, cpu_cores=0.3),
        step_spec(2, cpu_cores=0.4),
        step_spec(4, active=3, cpu_cores=0.95),
        step_spec(8, active=3, cpu_cores=0.97),
    ]
    run = scenario_ladder(tmp_path / "run", steps)
    data, ev = verdict_of(run)
    reqs, load = rows(run, "requests.csv"), rows(run, "client_load.csv")
    start, end = window(2)
    cpu = [float(r["cpu_cores"]) for r in load if start < float(r["t_s"]) <= end]
    values = ev["client"]["values"]
    assert data["bottleneck"] == "client" and data["critical_concurrency"] is None
    assert values["users"] == 4
    assert values["client_inflight"] == pytest.approx(inflight(reqs, 2))
    assert values["inflight_ratio"] == pytest.approx(inflight(reqs, 2) / 4)
    assert values["client_cpu_cores"] == pytest.approx(sum(cpu) / len(cpu))
    assert [s["valid"] for s in data["steps"]] == [True, True, False, False]
    assert "0.95 CPU cores" in data["steps"][2]["invalid_reason"]
    assert not set(data["secondary"]) - {"none"}


def test_kv_cache_evidence_from_server_metrics_csv(tmp_path):
    full = step_spec(8, e2e_ms=2000.0, ttft_ms=1100.0, running=4, waiting=4, kv=0.97, preemptions_per_s=0.5)
    run = scenario_ladder(tmp_path / "run", [step_spec(1), step_spec(2), step_spec(4, kv=0.6), full])
    data, ev = verdict_of(run)
    samples = rows(run, "server_metrics.csv")
    start, end = window(3)
    counter = sorted(
        (float(s["t_s"]), float(s["value"])) for s in samples if s["metric"] == "vllm:num_preemptions_total"
    )
    inside = [(t, v) for t, v in counter if start <= t < end]
    rate = (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
    values = ev["kv_cache"]["values"]
    assert data["bottleneck"] == "kv_cache" and data["critical_concurrency"] == 4
    assert values["kv_usage_ratio"] == pytest.approx(server_mean(samples, "vllm:kv_cache_usage_perc", 3))
    assert values["preemptions_per_s"] == pytest.approx(rate)


def test_compute_evidence_from_both_csvs(tmp_path):
    # 8 users: every request runs at once (running 8, no queue) but lasts twice as long
    run = scenario_ladder(tmp_path / "run", [step_spec(1), step_spec(2), step_spec(4), step_spec(8, e2e_ms=2050.0)])
    data, ev = verdict_of(run)
    reqs, samples = rows(run, "requests.csv"), rows(run, "server_metrics.csv")
    values = ev["compute"]["values"]
    assert data["bottleneck"] == "compute" and data["critical_concurrency"] == 4
    assert values["gain_per_doubling"] == pytest.approx(prorated_tps(reqs, 3) / prorated_tps(reqs, 2))
    assert values["server_running"] == pytest.approx(server_mean(samples, "vllm:num_requests_running", 3))
    assert values["previous_server_running"] == pytest.approx(server_mean(samples, "vllm:num_requests_running", 2))
    tpot = [
        (float(r["e2e_ms"]) - float(r["ttft_ms"])) / (float(r["output_tokens"]) - 1)
        for r in finished_in(reqs, 3)
        if not r["error_kind"]
    ]
    assert values["tpot_p50_ms"] == pytest.approx(statistics.median(tpot))


def test_timeout_evidence_from_requests_csv_and_run_json(tmp_path):
    timed_out = step_spec(8, fail_every=1, fail_kind="ttft_timeout", fail_e2e_ms=3000.0, running=4, waiting=4)
    workload = {
        "protocol": "openai-chat",
        "max_tokens": 64,
        "timeouts_s": {"connect": 60.0, "ttft": 3.0, "stall": 300.0, "total": 0.0},
    }
    run = scenario_ladder(tmp_path / "run", [step_spec(1), step_spec(2), step_spec(4), timed_out], workload=workload)
    data, ev = verdict_of(run)
    reqs, samples = rows(run, "requests.csv"), rows(run, "server_metrics.csv")
    failed = [r for r in finished_in(reqs, 3) if r["error_kind"] == "ttft_timeout"]
    assert data["bottleneck"] == "timeouts" and data["critical_concurrency"] == 4
    assert ev["timeouts"]["values"]["client_ttft_timeout"] == len(failed)
    cause = ev["timeout_cause"]["values"]
    assert cause["ttft_timeout_s"] == 3.0
    assert cause["server_waiting"] == pytest.approx(server_mean(samples, "vllm:num_requests_waiting", 3))
    assert cause["server_queue"] == 1
