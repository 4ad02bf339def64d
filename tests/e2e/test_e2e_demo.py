"""The main job end to end: ``llm-locust demo`` (embedded server, master + 2 workers, analysis).

A short ladder against a batch ceiling of 2. Expected figures come from the embedded server's
schedule, worked out here from its settings (defaults: decode step 20 ms + 1 ms per running
sequence, prefill 0.1 ms per prompt token), not from the code under test.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from llm_locust.analysis.pipeline import analyze_run
from tests.verdict_contract import assert_verdict_contract

pytestmark = pytest.mark.slow

MAX_NUM_SEQS = 2
MAX_TOKENS = 32
DECODE_BASE_MS, DECODE_PER_SEQ_MS = 20.0, 1.0


def step_ms(batch: int) -> float:
    return DECODE_BASE_MS + DECODE_PER_SEQ_MS * batch


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("demo") / "run"
    completed = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "demo", "--run-dir", str(run_dir), "--ladder", "1,2,4",
         "--max-num-seqs", str(MAX_NUM_SEQS), "--dwell-s", "10", "--warmup-s", "2", "--max-tokens", str(MAX_TOKENS)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return run_dir, completed


def test_demo_finds_the_batch_ceiling_and_writes_the_report(demo_run):
    run_dir, completed = demo_run
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert f"Critical concurrency: {MAX_NUM_SEQS} " in completed.stdout
    assert "\nBottleneck: scheduler_ceiling — " in completed.stdout
    verdict = json.loads((run_dir / "report" / "verdict.json").read_text())
    assert verdict["bottleneck"] == "scheduler_ceiling"
    assert verdict["critical_concurrency"] == MAX_NUM_SEQS
    assert_verdict_contract(verdict, completed.stdout[-3000:])
    assert all(step["valid"] for step in verdict["steps"])
    for name in (
        "throughput.png",
        "latency.png",
        "timeline.png",
        "errors.png",
        "summary.md",
        "steps.csv",
        "verdict.json",
    ):
        path = run_dir / "report" / name
        assert path.stat().st_size > 1000, path
        assert str(path) in completed.stdout
    assert (run_dir / "report" / "throughput.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Engine 000:" in (run_dir / "server.log").read_text()


def test_requests_csv_has_one_row_per_locust_request_over_two_workers(demo_run):
    run_dir, _ = demo_run
    with open(run_dir / "requests.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    with open(run_dir / "locust_stats.csv", newline="") as f:
        aggregated = [r for r in csv.DictReader(f) if r["Name"] == "Aggregated"][0]
    assert len(rows) == int(aggregated["Request Count"]) > 50
    assert len({r["request_id"] for r in rows}) == len(rows)
    assert len({r["worker_id"] for r in rows}) == 2
    assert all(not r["error_kind"] and int(r["output_tokens"]) == MAX_TOKENS for r in rows)


def test_measured_figures_match_the_servers_schedule(demo_run):
    run_dir, _ = demo_run
    table = analyze_run(run_dir, write=False).table.set_index("target_users")

    # c <= max_num_seqs: every request decodes in a batch of c; one token per step per request
    for c in (1, 2):
        assert table.loc[c, "tpot_p50_ms"] == pytest.approx(step_ms(c), abs=2.0), table
        expected_tps = c * MAX_TOKENS / (MAX_TOKENS * step_ms(c) / 1000.0)
        assert table.loc[c, "output_tps"] == pytest.approx(expected_tps, rel=0.15), table
        assert table.loc[c, "server_running"] == pytest.approx(c, abs=0.25), table
        assert table.loc[c, "server_waiting"] < 0.25, table
    # c = 4 > 2: two run, two wait about one whole request (32 steps of a batch of 2) for a slot
    assert table.loc[4, "server_running"] == pytest.approx(2, abs=0.25), table
    assert table.loc[4, "server_waiting"] == pytest.approx(2, abs=0.5), table
    assert table.loc[4, "output_tps"] == pytest.approx(table.loc[2, "output_tps"], rel=0.1), table
    assert table.loc[4, "ttft_p50_ms"] == pytest.approx(MAX_TOKENS * step_ms(2), rel=0.3), table
    assert table.loc[4, "client_inflight"] == pytest.approx(4, abs=0.3), table


def test_the_columnar_and_csv_paths_give_the_same_step_table(demo_run, tmp_path):
    """The master wrote ``requests.arrow`` beside ``requests.csv``; the analysis of the run
    directory with it and of a copy without it (the CSV read and parsed, as for a run directory
    written before the Arrow file existed) give the same frame of requests and the same step
    table, every figure. Shares the module's demo run; ~4 s (two analyses)."""
    import shutil

    import pandas as pd

    from llm_locust.analysis.rundir.columnar import open_requests_arrow
    from llm_locust.analysis.rundir.reader import load_run

    run_dir, _ = demo_run
    columnar, csv_only = tmp_path / "columnar", tmp_path / "csv"
    for copy in (columnar, csv_only):
        shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("report"))
    (csv_only / "requests.arrow").unlink()
    arrow = open_requests_arrow(columnar / "requests.csv")
    assert arrow is not None and arrow.num_rows > 50

    by_arrow, by_csv = analyze_run(columnar, write=False), analyze_run(csv_only, write=False)

    pd.testing.assert_frame_equal(by_arrow.run.requests, by_csv.run.requests)
    pd.testing.assert_frame_equal(by_arrow.table, by_csv.table)
    assert by_arrow.table["itl_p50_ms"].notna().all()  # the token times were read on both paths
    assert by_arrow.critical == by_csv.critical
    pd.testing.assert_frame_equal(load_run(columnar).requests, load_run(csv_only).requests)  # every column
