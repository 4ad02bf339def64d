"""``diagnose --slo ... --search`` end to end against the embedded server with 2 batch slots
(``--max-num-seqs 2``, 16-token answers of about 0.35 s): up to 2 users no request waits, from 3
on every third request waits for a whole answer, so ``ttft_ms<=150`` holds for all requests at 2
and for at most about two thirds at 3. The search brackets 1, 2, 4 and bisects to 3: capacity 2,
interval [2, 3). Each probe's met share is recomputed here from its own ``requests.csv``; the
verdict at the first failing probe (a 2,3 ladder after the search) is the 2 slots' ceiling.
~80 s on 2 cores.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from tests.e2e.conftest import embedded_server

pytestmark = pytest.mark.slow

SLO_MS = 150.0


@pytest.fixture(scope="module")
def two_slot_host(tmp_path_factory):
    with embedded_server(tmp_path_factory, max_num_seqs=2) as host:
        yield host


def test_search_finds_the_largest_concurrency_meeting_the_slo(two_slot_host, tmp_path):
    out = tmp_path / "diag"
    completed = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "diagnose", "--host", two_slot_host, "--out", str(out),
         "--ladder", "1,2,4", "--dwell-s", "5", "--warmup-s", "1", "--max-tokens", "16", "--workers", "1",
         "--baseline-requests", "2", "--max-users", "8", "--slo", f"ttft_ms<={SLO_MS:g}", "--search",
         "--no-first-request"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    capacity = json.loads((out / "round-a" / "search" / "capacity.json").read_text())
    assert [p["users"] for p in capacity["probes"]] == [1, 2, 4, 3]
    assert (capacity["capacity_users"], capacity["failing_users"]) == (2, 3)
    for probe in capacity["probes"]:
        run_dir = out / "round-a" / "search" / f"probe-{probe['users']}"
        steps = pd.read_csv(run_dir / "report" / "steps.csv")
        requests = pd.read_csv(run_dir / "requests.csv", dtype={"error_kind": str}, keep_default_na=False)
        ended = requests["t_start_s"] + requests["e2e_ms"] / 1000.0
        window = steps.iloc[0]
        done = requests[(ended >= window["window_start_s"]) & (ended < window["window_end_s"])]
        ttft = pd.to_numeric(done["ttft_ms"], errors="coerce")
        share = float(((done["error_kind"] == "") & (ttft <= SLO_MS)).mean())
        assert probe["met_share"] == pytest.approx(share)
        assert probe["met"] == (share >= 0.9 and not probe["short"])
    assert "Capacity at SLO ttft_ms<=150 (90% of requests): 2 users (interval [2, 3) users)" in completed.stdout
    assert "limiting metric ttft_ms<=150" in completed.stdout
    assert "Bottleneck (the ladder's verdict, step 4): scheduler_ceiling" in completed.stdout
    # the verdict at the first failing probe: a ladder of the capacity then that level (2, 3 users)
    failing = capacity["failing_verdict"]
    assert (failing["users"], failing["ladder"]) == (3, [2, 3])
    verdict_dir = out / "round-a" / "search" / failing["run_dir"]
    assert [s["users"] for s in json.loads((verdict_dir / "run.json").read_text())["shape"]["steps"]] == [2, 3]
    # the server's 2 slots: at 3 users a request waits (the server's own gauge, time-averaged by
    # scrape over the step) while running stays at 2
    samples = pd.read_csv(verdict_dir / "server_metrics.csv")
    step = json.loads((verdict_dir / "run.json").read_text())["shape"]["steps"][1]
    held = samples[(samples["t_s"] >= step["start_s"] + 1) & (samples["t_s"] < step["end_s"])]
    waiting = held[held["metric"] == "vllm:num_requests_waiting"]["value"]
    running = held[held["metric"] == "vllm:num_requests_running"]["value"]
    assert waiting.mean() > 0.5 and running.max() == 2, (waiting.describe(), running.describe())
    assert (failing["bottleneck"], failing["critical_users"]) == ("scheduler_ceiling", 2), failing
    assert json.loads((verdict_dir / "report" / "verdict.json").read_text())["bottleneck"] == failing["bottleneck"]
    assert "Bottleneck at the first failing probe (3 users, ladder 2,3): scheduler_ceiling - " in completed.stdout


def test_search_without_slo_is_refused_before_any_load(two_slot_host, tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "diagnose", "--host", two_slot_host, "--out", str(tmp_path / "d"),
         "--search"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert completed.returncode == 2
    assert "--search finds the largest concurrency meeting the SLOs: give --slo too" in completed.stderr
    assert not (tmp_path / "d").exists()
