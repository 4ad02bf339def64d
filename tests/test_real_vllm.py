"""The main job against a real vLLM (CPU build, random-weight model, ``--max-num-seqs 4``).

Expected behaviour comes from the server's configuration, not from this project's code: with a
batch ceiling of 4, running ≈ min(c, 4), waiting leaves zero only at c = 8, output throughput
rises from 1 to 4 and stops rising from 4 to 8. (An independent client measured 55, 92, 216 and
227 output tokens/s and TTFT p50 of 50, 83, 150 and 1227 ms at 1, 2, 4 and 8.)
"""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from analysis.report import analyze_run
from tests.real_servers import real_server

pytestmark = [pytest.mark.slow, pytest.mark.real_server]

LADDER = [1, 2, 4, 8]
MAX_NUM_SEQS = 4


@pytest.fixture(scope="module")
def vllm_ladder_run(tmp_path_factory):
    """One ladder run against a real vLLM; yields the run directory."""
    tmp = tmp_path_factory.mktemp("vllm")
    with real_server("vllm-cpu", ["--max-num-seqs", str(MAX_NUM_SEQS)], {"MODEL": "slow"}, tmp / "vllm.log") as url:
        run_dir = tmp / "run"
        completed = subprocess.run(
            [sys.executable, "-m", "llm_locust.cli", "run", "--host", url, "--workers", "2", "--run-dir", str(run_dir),
             "--no-analyze", "--timeout-s", "400", "--ladder", ",".join(map(str, LADDER)), "--dwell-s", "25",
             "--warmup-s", "5", "--max-tokens", "64", "--ignore-eos", "true"],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert completed.returncode == 0, completed.stdout + completed.stderr
    return run_dir


def test_critical_concurrency_is_the_batch_ceiling(vllm_ladder_run):
    result = analyze_run(vllm_ladder_run)
    table = result.table.set_index("target_users")

    assert result.critical.users == MAX_NUM_SEQS, "\n".join(result.critical.evidence)
    for c in LADDER:
        expected_running = min(c, MAX_NUM_SEQS)
        assert table.loc[c, "server_running"] == pytest.approx(expected_running, rel=0.2), table
        if c <= MAX_NUM_SEQS:
            assert table.loc[c, "server_waiting"] < 0.5, table
    assert table.loc[8, "server_waiting"] > 1.0, table
    tput = table["output_tps"]
    assert tput[4] / tput[1] >= 1.5, tput
    assert tput[8] / tput[4] < 1.15, tput
    assert table.loc[8, "ttft_p50_ms"] > 2 * table.loc[4, "ttft_p50_ms"], table
    assert result.paths.throughput_png.stat().st_size > 10_000


def test_every_request_recorded_once_and_ttft_on_first_content(vllm_ladder_run):
    with open(vllm_ladder_run / "requests.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    with open(vllm_ladder_run / "locust_stats.csv", newline="") as f:
        aggregated = [r for r in csv.DictReader(f) if r["Name"] == "Aggregated"][0]

    assert len(rows) == int(aggregated["Request Count"])
    assert len({r["request_id"] for r in rows}) == len(rows)
    assert len({r["worker_id"] for r in rows}) == 2
    ok = [r for r in rows if not r["error_kind"]]
    assert len(ok) == len(rows)
    for r in ok:
        # vLLM's role-only first chunk carries content "": it must be neither a token nor TTFT
        assert int(r["output_tokens"]) == int(r["content_events"]) == 64
        assert r["tokens_source"] == "usage"
        assert float(r["headers_ms"]) <= float(r["ttft_ms"]) < float(r["e2e_ms"])
