"""``--shape baseline --baseline-requests N`` sends exactly N requests (issue 14: N = 3 sent 4, and 30
with ``--max-tokens 4``): counted by the embedded server itself (its ``vllm:request_success_total``
counter, which also counts the first request sent before the load), by Locust and in ``requests.csv``,
over master + 2 workers."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def finished_on_server(host: str) -> int:
    """Requests the server finished so far (every ``finished_reason``), from its own /metrics."""
    text = requests.get(host + "/metrics", timeout=10).text
    return int(sum(sample.value for family in text_string_to_metric_families(text)
                   if family.name == "vllm:request_success" for sample in family.samples
                   if sample.name == "vllm:request_success_total"))  # fmt: skip


@pytest.mark.parametrize(("n", "max_tokens"), [(3, 64), (3, 4), (7, 1), (1, 4)])
def test_baseline_sends_exactly_n_requests(sim_host, tmp_path, n, max_tokens):
    before = finished_on_server(sim_host)
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "run", "--shape", "baseline", "--host", sim_host,
         "--baseline-requests", str(n), "--max-tokens", str(max_tokens), "--workers", "2",
         "--run-dir", str(run_dir), "--no-analyze"],
        capture_output=True, text=True, timeout=180, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    with open(run_dir / "requests.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    with open(run_dir / "locust_stats.csv", newline="") as f:
        (total,) = [row for row in csv.DictReader(f) if row["Name"] == "Aggregated"]
    assert "first request: POST " in out.stdout  # one request before the load, shown and counted here
    assert finished_on_server(sim_host) - before == n + 1
    assert int(total["Request Count"]) == n
    assert len(rows) == n and all(not row["error_kind"] for row in rows)
    assert len({row["worker_id"] for row in rows}) == 1  # one user, on one of the two workers
