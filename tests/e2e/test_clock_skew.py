"""Clocks across hosts: two workers whose wall clocks are off by +2 s and -2 s (env
``LLM_LOCUST_TEST_CLOCK_SKEW_S``, read only by llm_locust/client/clock.py) against a plain Locust
master. Each measures its offset over Locust's messages; run.json records offsets within their
measured uncertainty of the injected ones, every request lies inside the run on the master's
clock, and the steps and the critical concurrency are those of the server.

The master takes up each worker's first three pings half a second late (env
``LLM_LOCUST_TEST_SLOW_PINGS``, read only by llm_locust/master/clocksync.py), as a master busy at
the test's start does: a worker that stamped its first requests before a good answer (offset 0:
its own clock, 2 s off) put a request into the wrong place (one CI run: 1.11 in flight at the
one-user step)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from llm_locust.analysis.pipeline import analyze_run
from llm_locust.master.clocksync import SLOW_PINGS_ENV
from llm_locust.run.demo import start_sim_server
from llm_locust.run.launcher import free_port, stop_process
from llm_locust.wallclock import SKEW_ENV
from tests.e2e.locust_cluster import run_master_and_workers

pytestmark = pytest.mark.slow

LADDER = Path(__file__).resolve().parents[2] / "llm_locust" / "locustfiles" / "ladder.py"
MAX_NUM_SEQS = 2
SKEWS_S = (2.0, -2.0)


@pytest.fixture(scope="module")
def skewed_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("skew")
    run_dir = tmp / "run"
    port = free_port()
    server = start_sim_server(port=port, max_num_seqs=MAX_NUM_SEQS, log_path=tmp / "engine.log")
    try:
        code = run_master_and_workers(
            tmp, LADDER,
            ["--host", f"http://127.0.0.1:{port}", "--model", "sim-llama", "--ladder", "1,2,4", "--dwell-s", "5",
             "--warmup-s", "1.5", "--max-tokens", "24", "--run-dir", str(run_dir), "--only-summary"],
            master_env={**os.environ, SLOW_PINGS_ENV: "3"},
            worker_envs=[{**os.environ, SKEW_ENV: str(skew_s)} for skew_s in SKEWS_S],
        )  # fmt: skip
    finally:
        stop_process(server, grace_s=10)
    assert code == 0, (tmp / "master.out").read_text()[-3000:]
    return run_dir


def test_offsets_recorded_within_their_uncertainty(skewed_run):
    meta = json.loads((skewed_run / "run.json").read_text())
    requests = pd.read_csv(skewed_run / "requests.csv")
    offsets = {entry["worker"]: entry for entry in meta["clock_offsets"]}
    assert set(offsets) == set(requests["worker_id"]) and len(offsets) == len(SKEWS_S)
    measured = sorted(entry["offset_s"] for entry in offsets.values())
    for entry, injected in zip(sorted(offsets.values(), key=lambda e: e["offset_s"]), sorted(-s for s in SKEWS_S)):
        # the master's clock is the reference: a worker 2 s ahead is corrected by -2 s
        assert abs(entry["offset_s"] - injected) <= entry["uncertainty_s"] + 1e-5, (measured, entry)
        assert 0 < entry["uncertainty_s"] < 0.05 and entry["samples"] >= 8


def test_every_request_is_placed_on_the_masters_clock(skewed_run):
    meta = json.loads((skewed_run / "run.json").read_text())
    requests = pd.read_csv(skewed_run / "requests.csv")
    first_step_s = min(float(step["start_s"]) for step in meta["shape"]["steps"])
    ended_s = float(meta["ended_at_s"])
    for worker, rows in requests.groupby("worker_id"):
        assert rows["t_start_s"].min() >= first_step_s - 0.2, worker  # uncorrected: 2 s early for one
        assert (rows["t_start_s"] + rows["e2e_ms"] / 1000).max() <= ended_s + 0.2, worker  # and 2 s late
    steps = sorted(meta["shape"]["steps"], key=lambda step: float(step["start_s"]))
    first = requests[
        (requests["t_start_s"] >= float(steps[0]["start_s"])) & (requests["t_start_s"] < float(steps[1]["start_s"]))
    ]
    # step 0 holds one user, on one worker: the other's first requests (step 1 on) must not be
    # placed in it (2 s early, uncorrected), nor must the first worker's step-0 requests leave it
    assert first["worker_id"].nunique() == 1 and len(first) >= 3, first[["worker_id", "t_start_s"]]
    assert requests["t_start_s"].min() >= float(steps[0]["start_s"])
    load = pd.read_csv(skewed_run / "client_load.csv")
    assert load["t_s"].max() <= ended_s + 1.5 and load["t_s"].min() >= float(meta["started_at_s"]) - 1.5


def test_steps_and_knee_are_the_servers(skewed_run):
    result = analyze_run(skewed_run, write=False)
    assert not [note for note in result.run.notes if "clock" in note]
    assert result.critical.users == MAX_NUM_SEQS, "\n".join(result.critical.evidence)
    table = result.table.set_index("target_users")
    assert list(table.index) == [1, 2, 4]
    for users in (1, 2, 4):  # a worker's requests 2 s off would add or drop in-flight near the edges
        assert table.loc[users, "client_inflight"] == pytest.approx(users, abs=0.1), table["client_inflight"]
