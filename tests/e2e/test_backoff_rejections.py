"""Users back off after 429s (issue 14: 56k requests in 40 s against ``sim-server --max-queue 1``),
the pauses are recorded but are no requests, the verdict shows the time spent pausing, and
``--fail-on`` turns the run's numbers into exit 3 (a malformed one is refused before any load:
``tests/unit/run/test_fail_on_cli.py``). One short real run: an embedded server with one batch slot and a queue of one, 8 users
on one worker; every figure checked is recomputed here from requests.csv."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest

from llm_locust.run.demo import SIM_MODEL, start_sim_server
from llm_locust.run.launcher import free_port, stop_process
from tests.e2e.fault_helpers import REPO, locust_request_count, read_requests
from tests.verdict_contract import assert_verdict_contract

pytestmark = pytest.mark.slow

USERS, DWELL_S, WARMUP_S = 8, 4.0, 1.0
GATES = ("error_rate>0.01", "bottleneck==client")


def most_tries(window_s: float) -> int:
    """Most rejected requests one streak can hold in ``window_s`` by the documented rule: the n-th
    failure in a row waits at least half of min(2, 0.1 * 2**(n-1)) s."""
    tries, elapsed = 0, 0.0
    while True:
        elapsed += 0.5 * min(2.0, 0.1 * 2**tries)
        if elapsed > window_s:
            return tries + 1
        tries += 1


def cli(*args: str, timeout_s: float = 90.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llm_locust.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout_s)  # fmt: skip


@pytest.fixture(scope="module")
def rejected_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("backoff")
    port = free_port()
    server = start_sim_server(port=port, max_num_seqs=1, log_path=base / "server.log", extra=["--max-queue", "1"])
    try:
        started = time.monotonic()
        done = cli(
            "run", "--workers", "1", "--run-dir", str(base / "run"), "--host", f"http://127.0.0.1:{port}",
            "--model", SIM_MODEL, "--max-tokens", "16", "--ladder", str(USERS), "--dwell-s", str(DWELL_S),
            "--warmup-s", str(WARMUP_S), "--drain-s", "1", "--timeout-s", "60",
            *[x for gate in GATES for x in ("--fail-on", gate)],
        )  # fmt: skip
        elapsed_s = time.monotonic() - started
    finally:
        stop_process(server, grace_s=5)
    return base / "run", done, elapsed_s


def test_a_threshold_failed_gives_exit_3_and_names_it(rejected_run):
    run_dir, done, elapsed_s = rejected_run
    requests = read_requests(run_dir)
    finished = requests[requests["error_kind"] != "interrupted"]  # cut by the test's stop: no failure
    error_rate = float((finished["error_kind"] != "").mean())
    assert done.returncode == 3, done.stdout[-3000:] + done.stderr[-2000:]
    assert f"FAILED error_rate>0.01: error_rate over the run is {error_rate:.4g} ratio" in done.stdout
    verdict = json.loads((run_dir / "report" / "verdict.json").read_text())
    [rate, kind] = verdict["thresholds"]
    assert rate["failed"] and rate["value"] == pytest.approx(error_rate, abs=1e-12)
    assert not kind["failed"] and kind["value"] == "rejections"
    assert "FAILED error_rate>0.01" in (run_dir / "report" / "summary.md").read_text()
    print(f"run took {elapsed_s:.1f} s")


def test_users_back_off_after_429_and_the_rate_is_bounded(rejected_run):
    run_dir, *_ = rejected_run
    requests = read_requests(run_dir)
    rejected = requests[requests["error_kind"] == "http_429"]
    ok = requests[requests["error_kind"] == ""]
    assert len(rejected) > 20 and len(ok) > 5 and (rejected["status_code"] == 429).all()
    # every rejection led to a pause within the documented bounds; a success to none
    assert rejected["backoff_ms"].between(50.0, 2000.0).all()
    assert (ok["backoff_ms"] == 0).all()
    # a pause is no request: Locust counted exactly the rows
    assert locust_request_count(run_dir) == len(requests)
    # each user's time is its requests plus its pauses (closed loop): never more than 8 users' run
    span_s = requests["end_s"].max() - requests["t_start_s"].min()
    busy_s = (requests["e2e_ms"] + requests["backoff_ms"]).sum() / 1000.0
    assert busy_s <= USERS * (span_s + 2.0)
    # the request rate in the steady window: every streak of rejections is started by a user at the
    # start or by a success (which ends a streak), and holds at most most_tries(W) rejections
    meta = json.loads((run_dir / "run.json").read_text())
    [step] = meta["shape"]["steps"]
    lo, hi = step["start_s"] + WARMUP_S, step["end_s"]
    sent = requests[(requests["t_start_s"] >= lo) & (requests["t_start_s"] < hi)]
    successes = int((sent["error_kind"] == "").sum())
    bound = (USERS + successes) * most_tries(hi - lo) + successes
    assert len(sent) <= bound, (len(sent), bound)
    rate = len(sent) / (hi - lo)
    assert rate < 60, rate  # requests/s for 8 users (without the pause: ~1,400/s)
    print(f"{len(sent)} requests in {hi - lo:.1f} s ({rate:.1f}/s), bound {bound}")


def test_the_pauses_are_counted_and_shown_in_the_verdict(rejected_run):
    run_dir, done, *_ = rejected_run
    requests = read_requests(run_dir)
    paused = requests[requests["backoff_ms"] > 0]
    report = json.loads((run_dir / "client_report.json").read_text())
    assert report["backoff"]["waits"] == len(paused)
    assert report["backoff"]["total_s"] == pytest.approx(paused["backoff_ms"].sum() / 1000.0, rel=1e-9)
    assert report["backoff"]["waits_by_kind"] == {"http_429": len(paused)}
    assert f"backed off: {len(paused)} pauses between requests" in done.stdout
    # share of the users' time spent pausing in the steady window, from requests.csv
    meta = json.loads((run_dir / "run.json").read_text())
    [step] = meta["shape"]["steps"]
    lo, hi = step["start_s"] + WARMUP_S, step["end_s"]
    start = paused["end_s"].to_numpy()
    end = start + paused["backoff_ms"].to_numpy() / 1000.0
    share = float(np.clip(np.minimum(end, hi) - np.maximum(start, lo), 0, None).sum() / (hi - lo) / USERS)
    verdict = json.loads((run_dir / "report" / "verdict.json").read_text())
    assert verdict["bottleneck"] == "rejections"
    assert_verdict_contract(verdict)
    [rejections] = [e for e in verdict["evidence"] if e["rule"] == "rejections"]
    assert share >= 0.1 and rejections["values"]["backoff_share"] == pytest.approx(share, abs=1e-9)
    assert "users spent their time pausing after refusals" in rejections["text"]
    assert verdict["steps"][0]["valid"]  # the pauses are the server's doing, not the client's limit
