"""Hostile ``/metrics`` endpoints during a real run (issue 14): ``llm-locust run`` (master + 1
worker) against the embedded server, with scripted loopback endpoints scraped beside or instead
of its own ``/metrics``.

- An endpoint that answers once, then hangs: the steps after the hang have no server data (``-``,
  NaN), never the one early sample held as zeros; the run still stops on time.
- A slow extra endpoint (answers after 2 s, the interval is 1 s) and a 100 MB one: the main
  endpoint still gets about one scrape per interval, the 100 MB body is aborted at the cap and
  recorded as failed, the steps keep their length, ``server_metrics.csv`` stays small.

Expected values come from what the scripted servers served and from the run directory's own
records (``server_scrapes.csv``, ``run.json``), never from the code under test.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time

import pytest

from llm_locust.analysis.pipeline import analyze_run
from tests.scripted_server import body_script

pytestmark = pytest.mark.slow

DWELL_S = 4.0
MIB = 1024 * 1024
STEP_TOLERANCE_S = 1.25
"""The ladder enters a step on Locust's 1 s shape tick: each step boundary is up to 1 s late."""
AT_START = (
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{engine="0",model_name="sim-llama"} 0.0\n'
    "# TYPE vllm:num_requests_waiting gauge\n"
    'vllm:num_requests_waiting{engine="0",model_name="sim-llama"} 0.0\n'
)
"""What the once-then-hang endpoint serves, once: an idle server (0 running, 0 waiting)."""


def run(host: str, run_dir, ladder: str, *extra: str) -> tuple[subprocess.CompletedProcess, float]:
    args = [
        sys.executable,
        "-m",
        "llm_locust.cli",
        "run",
        "--host",
        host,
        "--model",
        "sim-llama",
        "--workers",
        "1",
        "--run-dir",
        str(run_dir),
        "--timeout-s",
        "120",
        "--ladder",
        ladder,
        "--dwell-s",
        str(DWELL_S),
        "--warmup-s",
        "0",
        "--max-tokens",
        "16",
        *extra,
    ]
    started = time.monotonic()
    completed = subprocess.run(args, capture_output=True, text=True, timeout=180, check=False)
    return completed, time.monotonic() - started


def scrapes(run_dir) -> list[dict]:
    with open(run_dir / "server_scrapes.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def metric_rows(run_dir) -> list[dict]:
    with open(run_dir / "server_metrics.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def step_bounds(run_dir) -> list[tuple[float, float]]:
    meta = json.loads((run_dir / "run.json").read_text())
    return [(s["start_s"], s["end_s"]) for s in meta["shape"]["steps"]]


def test_one_answer_then_a_hang_leaves_later_steps_without_data(sim_host, scripted_server, tmp_path):
    url, _ = scripted_server(
        {"writes": body_script(AT_START), "later_connections": body_script(AT_START, delay_s=120.0)}
    )
    run_dir = tmp_path / "run"
    completed, wall_s = run(sim_host, run_dir, "1,2,4", "--metrics-url", url + "/metrics")
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    attempts = scrapes(run_dir)
    assert attempts[0]["ok"] == "1" and all(a["ok"] == "0" for a in attempts[1:])
    assert {a["error_kind"] for a in attempts[1:]} == {"timeout"}
    # the one sample is data from its scrape until the first failed attempt, nothing after
    fresh_from, fresh_to = float(attempts[0]["t_s"]), float(attempts[1]["t_s"])
    result = analyze_run(run_dir, write=False)
    table = result.table
    for i, (start, end) in enumerate(step_bounds(run_dir)):
        expected_s = max(0.0, min(end, fresh_to) - max(start, fresh_from))
        assert table.loc[i, "server_data_s"] == pytest.approx(expected_s, abs=1e-6)
        if expected_s > 0:  # the served values: an idle server
            assert table.loc[i, ["server_running", "server_waiting"]].tolist() == [0.0, 0.0]
        else:
            assert table.loc[i, ["server_running", "server_waiting"]].isna().all(), table
    assert table.loc[1:, "server_running"].isna().all()  # the hang came ~1 s into the run
    # the printed table: "-" for running and waiting after the hang, never 0.00
    lines = completed.stdout.splitlines()
    head = next(k for k, line in enumerate(lines) if line.split()[:3] == ["step", "users", "in-flight"])
    columns = lines[head].replace("server data s", "server_data_s").split()
    running, waiting = columns.index("running"), columns.index("waiting")
    for line in lines[head + 2 : head + 4]:  # steps 1 and 2
        cells = line.split()
        assert (cells[running], cells[waiting]) == ("-", "-"), line
    # on time: 3 steps of DWELL_S, the hung scrape abandoned at the stop
    bounds = step_bounds(run_dir)
    for start, end in bounds:
        assert end - start == pytest.approx(DWELL_S, abs=STEP_TOLERANCE_S)
    (first_start, _), (_, last_end) = bounds[0], bounds[-1]
    meta = json.loads((run_dir / "run.json").read_text())
    assert last_end - first_start == pytest.approx(3 * DWELL_S, abs=STEP_TOLERANCE_S)
    assert meta["ended_at_s"] - last_end < 5.0
    assert wall_s < 3 * DWELL_S + 40, wall_s


def test_a_slow_and_a_huge_endpoint_neither_starve_the_main_one_nor_slow_the_run(sim_host, scripted_server, tmp_path):
    slow, _ = scripted_server({"writes": body_script("gpu_utilization_ratio 0.42\n", delay_s=2.0)})
    line = 'vllm:num_requests_running{engine="9",model_name="x"} 7.0\n'
    huge, _ = scripted_server({"writes": body_script({"repeat": line, "times": 100 * MIB // len(line)}, length=False)})
    run_dir = tmp_path / "run"
    completed, _ = run(
        sim_host, run_dir, "1,2", "--metrics-url", sim_host + "/metrics",  # kept: --server-metrics-url alone replaces it
        "--server-metrics-url", slow + "/metrics", "--server-metrics-url", huge + "/metrics",
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    meta = json.loads((run_dir / "run.json").read_text())
    span_s = meta["ended_at_s"] - meta["started_at_s"]
    attempts = scrapes(run_dir)
    by_source = {
        url: [a for a in attempts if a["source"] == url]
        for url in (sim_host + "/metrics", slow + "/metrics", huge + "/metrics")
    }
    main_ok = [a for a in by_source[sim_host + "/metrics"] if a["ok"] == "1"]
    assert len(main_ok) >= 0.8 * span_s, (len(main_ok), span_s)  # ~1 per 1 s interval
    slow_ok = [a for a in by_source[slow + "/metrics"] if a["ok"] == "1"]
    assert 1 <= len(slow_ok) <= span_s / 2.0 + 1
    assert {(r["metric"], float(r["value"])) for r in metric_rows(run_dir) if r["source"] == slow + "/metrics"} == {
        ("gpu_utilization_ratio", 0.42)
    }
    huge_attempts = by_source[huge + "/metrics"]
    assert huge_attempts and {a["error_kind"] for a in huge_attempts} == {"too_large"}
    assert all(8 * MIB < int(a["bytes"]) <= 8 * MIB + 64 * 1024 for a in huge_attempts)
    assert not any(r["source"] == huge + "/metrics" for r in metric_rows(run_dir))
    assert (run_dir / "server_metrics.csv").stat().st_size < 4 * MIB
    for start, end in step_bounds(run_dir):  # the steps kept their length
        assert end - start == pytest.approx(DWELL_S, abs=STEP_TOLERANCE_S)
    assert "too_large" in completed.stdout + completed.stderr  # counted on the console
    table = analyze_run(run_dir, write=False).table
    assert table["server_running"].notna().all()
    assert (table["server_data_s"] >= table["window_s"] - 1.0).all(), table
