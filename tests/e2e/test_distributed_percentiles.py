"""Percentiles across workers: a run with a Locust master and 2 workers reports, in
client_report.json (what the master prints at the end), the same p50/p99 TTFT and TPOT as
computed directly from requests.csv — merged from every worker's raw values, never averaged."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from llm_locust.analysis.perrequest.itl import request_itl
from llm_locust.run.demo import start_sim_server
from llm_locust.run.launcher import free_port, stop_process

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_worker_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("two") / "run"
    run_dir.mkdir()
    port = free_port()
    # batch ceiling 2 under 6 users: queueing spreads TTFTs, so per-worker percentiles differ
    server = start_sim_server(port=port, max_num_seqs=2, log_path=run_dir / "server.log")
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "llm_locust.cli", "run", "--shape", "none", "--workers", "2", "--run-dir",
             str(run_dir), "--host", f"http://127.0.0.1:{port}", "--model", "sim-llama", "--max-tokens", "16",
             "-u", "6", "-r", "6", "-t", "8s", "--timeout-s", "120"],
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
    finally:
        stop_process(server)
    return run_dir, completed


def test_two_workers_report_the_percentiles_of_requests_csv(two_worker_run):
    run_dir, completed = two_worker_run
    assert completed.returncode in (0, 1), completed.stdout + completed.stderr
    report = json.loads((run_dir / "client_report.json").read_text())
    requests = pd.read_csv(run_dir / "requests.csv", keep_default_na=False, na_values=[""])
    ok = requests[requests["error_kind"].isna() | (requests["error_kind"] == "")]
    assert requests["worker_id"].nunique() == 2 and len(ok) > 30

    ttft = ok["ttft_ms"].to_numpy(float)
    tpot = ((ok["e2e_ms"] - ok["ttft_ms"]) / (ok["output_tokens"] - 1)).to_numpy(float)
    for name, values in (("ttft", ttft), ("tpot", tpot)):
        p50, p99 = np.percentile(values, [50, 99])
        assert report["latency_ms"][name]["p50"] == pytest.approx(p50, rel=1e-12), name
        assert report["latency_ms"][name]["p99"] == pytest.approx(p99, rel=1e-12), name

    assert report["requests"] == len(requests) and report["successes"] == len(ok)
    with open(run_dir / "locust_stats.csv") as f:
        aggregated = [line for line in f if ",Aggregated," in line][0].split(",")
    assert int(aggregated[2]) == len(requests)  # Locust's own request count, row for row
    assert len(report["worker_cpu_peak_percent"]) == 2
    assert report["achieved_concurrency"] == pytest.approx(6, abs=1.0)
    # the pooled ITL the master accumulated as the rows came: numpy on each row's raw values
    pieces = [request_itl(r.ttft_ms, r.e2e_ms, r.output_tokens, r.token_times_us, r.event_tokens)
              for r in ok.astype({"token_times_us": object, "event_tokens": object}).fillna({"token_times_us": "", "event_tokens": ""}).itertuples(index=False)]  # fmt: skip
    values, weights = np.concatenate([v for v, _ in pieces]), np.concatenate([w for _, w in pieces])
    gaps = np.concatenate([np.diff([float(t) for t in str(cell).split()]) / 1000.0 for cell in ok["token_times_us"]])
    assert len(values) > 100
    for q in (0.50, 0.95, 0.99):
        expected = np.quantile(values, q, weights=weights, method="inverted_cdf")
        assert report["itl_ms"][f"itl_p{round(q * 100)}_ms"] == expected, q
    assert report["itl_ms"]["chunk_gap_p99_ms"] == pytest.approx(np.percentile(gaps, 99), rel=1e-12)
    assert report["itl_ms"]["itl_mean_ms"] == pytest.approx((values * weights).sum() / weights.sum(), rel=1e-9)
    assert "LLM requests:" in (run_dir / "locust_master.log").read_text()
