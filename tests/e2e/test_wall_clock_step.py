"""The load machine's OS wall clock steps forward in mid-run (NTP or chrony correcting it, a virtual
machine resumed): nothing the run records may move with it.

Found in CI (3 Dec 2026) against a real vLLM: the machine's clock stepped +7.2 s during the last
ladder step; the recorder stamped the step's end on the stepped clock while the shape counted on
the monotonic one, so the 12-s step was recorded as 19.3 s with a 7-s hole without requests, and
the analysis rejected it (client in-flight 4.44 of 8 users). A step of 2.3 s had stretched a step
of a llama.cpp run the same way.

Here a ``sitecustomize`` (on ``PYTHONPATH`` for the master and both workers only) makes
``time.time``/``time.time_ns`` jump :data:`STEP_S` forward at one moment of the system-wide
monotonic clock, the same for every process, as an OS step does. The sim server keeps the real
clock (it is another machine's server). Expected from the settings alone: every step's window is
``dwell - warm-up`` long, holds its users in flight, the workers' offsets to the master stay 0,
and Locust's own stats (on ``time.time``) show the step did happen.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pandas as pd
import pytest

from llm_locust.analysis.pipeline import analyze_run
from llm_locust.run.demo import start_sim_server
from llm_locust.run.launcher import free_port, stop_process
from tests.e2e.locust_cluster import run_master_and_workers

pytestmark = pytest.mark.slow

LADDER = Path(__file__).resolve().parents[2] / "llm_locust" / "locustfiles" / "ladder.py"
MAX_NUM_SEQS = 2
USERS = (1, 2, 4)
DWELL_S, WARMUP_S = 5.0, 1.5
STEP_S = 4.0
"""How far the OS wall clock jumps forward, s."""
STEP_AFTER_LAUNCH_S = 8.0
"""When, after the processes are launched: the test starts 1-4 s after launch, so the jump falls in
its first or second step (the run lasts 15 s), never before it."""

SITECUSTOMIZE = """
import os, time
_at = float(os.environ["TEST_WALL_STEP_AT_MONOTONIC"])
_step_s = float(os.environ["TEST_WALL_STEP_S"])
_time, _time_ns = time.time, time.time_ns
def _stepped_time():
    return _time() + (_step_s if time.monotonic() >= _at else 0.0)
def _stepped_time_ns():
    return _time_ns() + (int(_step_s * 1e9) if time.monotonic() >= _at else 0)
time.time, time.time_ns = _stepped_time, _stepped_time_ns
"""


@pytest.fixture(scope="module")
def stepped_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wallstep")
    run_dir = tmp / "run"
    site = tmp / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    port = free_port()
    server = start_sim_server(port=port, max_num_seqs=MAX_NUM_SEQS, log_path=tmp / "engine.log")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
        "TEST_WALL_STEP_AT_MONOTONIC": str(time.monotonic() + STEP_AFTER_LAUNCH_S),
        "TEST_WALL_STEP_S": str(STEP_S),
    }
    try:
        code = run_master_and_workers(
            tmp, LADDER,
            ["--host", f"http://127.0.0.1:{port}", "--model", "sim-llama", "--ladder", ",".join(map(str, USERS)),
             "--dwell-s", str(DWELL_S), "--warmup-s", str(WARMUP_S), "--max-tokens", "24", "--run-dir", str(run_dir),
             "--csv", str(run_dir / "locust"), "--csv-full-history", "--only-summary"],
            master_env=env, worker_envs=[env, env],
        )  # fmt: skip
    finally:
        stop_process(server, grace_s=10)
    assert code == 0, (tmp / "master.out").read_text()[-3000:]
    return run_dir


def test_the_os_clock_did_step_during_the_run(stepped_run):
    # Locust's own stats history is stamped with time.time (whole seconds, a row a second): it spans
    # the ladder's three steps plus the jump
    history = pd.read_csv(stepped_run / "locust_stats_history.csv")
    history_s = history["Timestamp"].max() - history["Timestamp"].min()
    assert history_s >= len(USERS) * DWELL_S + STEP_S - 1.5, history_s


def test_steps_last_their_dwell_on_the_run_clock(stepped_run):
    steps = json.loads((stepped_run / "run.json").read_text())["shape"]["steps"]
    assert [step["users"] for step in steps] == list(USERS)
    for step in steps:
        assert float(step["end_s"]) - float(step["start_s"]) == pytest.approx(DWELL_S, abs=0.15), steps


def test_requests_hold_every_step_and_the_knee_is_the_servers(stepped_run):
    meta = json.loads((stepped_run / "run.json").read_text())
    for entry in meta["clock_offsets"]:  # the same machine: the offsets stay 0 through the step
        assert abs(entry["offset_s"]) <= entry["uncertainty_s"] + 0.005, meta["clock_offsets"]
    requests = pd.read_csv(stepped_run / "requests.csv")
    starts = requests["t_start_s"].sort_values()
    steps = meta["shape"]["steps"]
    assert starts.diff().max() < 1.5, "a hole without requests"  # requests run 0.3-0.6 s here
    assert starts.min() >= float(steps[0]["start_s"]) and starts.max() <= float(steps[-1]["end_s"])

    result = analyze_run(stepped_run, write=False)
    table = result.table.set_index("target_users")
    for users in USERS:
        assert table.loc[users, "window_s"] == pytest.approx(DWELL_S - WARMUP_S, abs=0.15), table["window_s"]
        assert table.loc[users, "client_inflight"] == pytest.approx(users, abs=0.15), table["client_inflight"]
    assert result.verdict.table["valid"].all(), result.verdict.table["invalid_reason"].tolist()
    assert result.critical.users == MAX_NUM_SEQS, "\n".join(result.critical.evidence)
