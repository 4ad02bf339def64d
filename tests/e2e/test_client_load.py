"""``client_load.csv`` from a real master + 2 workers (issue 9 item 3): one row per worker per second,
CPU in cores within [0, 1.2], and a worker kept busy on purpose (a CPU-burning greenlet, started
only in that worker) shows more CPU and more event-loop lag than the idle one."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import pandas as pd
import pytest

from llm_locust.client.load import CLIENT_LOAD_COLUMNS
from llm_locust.run.demo import SIM_MODEL, start_sim_server
from llm_locust.run.launcher import free_port, stop_process
from tests.e2e.locust_cluster import run_master_and_workers

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BURN_CHUNK_S = 0.05
"""The burner holds the event loop this long at a time on average (0.5-1.5x, at random), then
yields. Not a fixed length: chunks of 50 ms + a 1 ms yield phase-lock with the probe's 100 ms
sleep (its deadline fell ~1 ms before a chunk's end again and again: seen in CI, max lag 18 ms)."""

LOCUSTFILE = f'''
import os
import random
import time
from pathlib import Path

import gevent
from locust import events

import llm_locust.plugin  # noqa: F401
from llm_locust.client.user import LLMUser


class ChatUser(LLMUser):
    pass


@events.test_start.add_listener
def burn_cpu(environment, **_kwargs):
    """Test only: in the worker started with LLM_LOCUST_TEST_BURN_CPU=<file>, write its client id
    there and keep the event loop busy {BURN_CHUNK_S} s at a time until the process ends."""
    target = os.environ.get("LLM_LOCUST_TEST_BURN_CPU")
    if not target:
        return
    Path(target).write_text(environment.runner.client_id)

    def burn():
        while True:
            end = time.perf_counter() + random.uniform(0.5, 1.5) * {BURN_CHUNK_S}
            while time.perf_counter() < end:
                pass
            gevent.sleep(0.001)  # a timer, not sleep(0): lets the loop run its timers and I/O

    gevent.spawn(burn)
'''


@pytest.fixture(scope="module")
def loaded_run(tmp_path_factory):
    """A 10 s run, 2 users (one per worker), worker 0 burning CPU: ``(run_dir, busy client id)``."""
    tmp = tmp_path_factory.mktemp("load")
    locustfile = tmp / "burn.py"
    locustfile.write_text(LOCUSTFILE)
    sim_port = free_port()
    server = start_sim_server(port=sim_port, max_num_seqs=8, log_path=tmp / "server.log")
    run_dir = tmp / "run"
    busy_id_file = tmp / "busy_worker_id"
    quiet = {k: v for k, v in os.environ.items() if k != "LLM_LOCUST_TEST_BURN_CPU"}
    try:
        run_master_and_workers(
            tmp, locustfile,
            ["--host", f"http://127.0.0.1:{sim_port}", "--model", SIM_MODEL, "--max-tokens", "32",
             "-u", "2", "-r", "2", "-t", "10s", "--run-dir", str(run_dir), "--only-summary"],
            worker_envs=[{**quiet, "LLM_LOCUST_TEST_BURN_CPU": str(busy_id_file)}, quiet],
        )  # fmt: skip
    finally:
        stop_process(server, grace_s=10)
    return run_dir, busy_id_file.read_text()


def test_one_row_per_worker_per_second(loaded_run):
    run_dir, _ = loaded_run
    with open(run_dir / "client_load.csv") as f:
        assert f.readline().strip() == ",".join(CLIENT_LOAD_COLUMNS)
    load = pd.read_csv(run_dir / "client_load.csv")
    meta = json.loads((run_dir / "run.json").read_text())
    assert sorted(load["worker"].unique()) == sorted(meta["workers"])
    for worker, rows in load.groupby("worker"):
        t_s = rows["t_s"].sort_values().to_numpy()
        gaps = t_s[1:] - t_s[:-1]
        assert gaps.min() > 0.1 and 0.5 < gaps[:-1].min() and gaps[:-1].max() < 1.6, (
            worker,
            gaps,
        )  # the last is partial
        span_s = t_s[-1] - t_s[0]
        assert abs(len(t_s) - (round(span_s) + 1)) <= 1, (worker, len(t_s), span_s)
        # from the worker's start of the test (its spawn message, late on a loaded machine) to the end
        assert 0 < t_s[0] - meta["started_at_s"] < 4 and 0 < meta["ended_at_s"] - t_s[-1] < 3, (worker, t_s, meta)
        assert len(t_s) >= 7  # a 10 s test
        assert rows["open_streams"].between(0, 1).all() and (rows["open_streams"] == 1).any()
    assert load["cpu_cores"].between(0.0, 1.2).all(), load["cpu_cores"].describe()


def test_a_busy_worker_shows_more_cpu_and_loop_lag_than_an_idle_one(loaded_run):
    run_dir, busy_id = loaded_run
    load = pd.read_csv(run_dir / "client_load.csv")
    busy, idle = load[load["worker"] == busy_id], load[load["worker"] != busy_id]
    assert len(busy) >= 5 and len(idle) >= 5
    busy_cpu, idle_cpu = statistics.median(busy["cpu_cores"]), statistics.median(idle["cpu_cores"])
    # not an absolute figure: on a shared machine a spinning process gets its share of the cores
    assert busy_cpu > 0.1 and busy_cpu > 3 * idle_cpu, (busy_cpu, idle_cpu)
    busy_lag, idle_lag = statistics.median(busy["loop_lag_ms_mean"]), statistics.median(idle["loop_lag_ms_mean"])
    assert busy_lag > idle_lag, (busy_lag, idle_lag)
    # a probe whose deadline falls early in a chunk wakes up most of a chunk late
    assert busy["loop_lag_ms_max"].max() >= 0.5 * BURN_CHUNK_S * 1000
    assert (busy["loop_lag_ms_max"] >= busy["loop_lag_ms_mean"]).all()
