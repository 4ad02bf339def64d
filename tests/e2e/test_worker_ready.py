"""Ready before load (issue 27): a worker whose llm-locust init is slow (env
``LLM_LOCUST_TEST_SLOW_INIT_S``: it waits 2.5 s, handling messages meanwhile, before it sets up its
record shipping) gets no users before that init has run. Before, the master started the ladder as
soon as the workers were connected, their first users ran during the init and the records of
those requests were never shipped: ``requests.csv`` held fewer rows than Locust counted. A worker
whose init does not end within the master's wait (``LLM_LOCUST_TEST_READY_TIMEOUT_S``) is named
in an ERROR line and the run stops before any load with exit code 1. ~25 s.
"""

from __future__ import annotations

import re

import pandas as pd
import pytest

from llm_locust.master.workerready import READY_TIMEOUT_ENV, SLOW_INIT_ENV
from llm_locust.run.demo import SIM_MODEL, start_sim_server
from llm_locust.run.launcher import LocustRun, free_port, run_locust, stop_process
from tests.e2e.fault_helpers import LOCUSTFILES, locust_request_count

pytestmark = pytest.mark.slow

SLOW_INIT_S = 2.5


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ready")
    port = free_port()
    server = start_sim_server(port=port, max_num_seqs=8, log_path=tmp / "engine.log")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(server, grace_s=10)


def _run(tmp_path, url: str) -> tuple[int, LocustRun]:
    run = LocustRun(locustfile=LOCUSTFILES / "ladder.py", run_dir=tmp_path / "run", workers=2, timeout_s=90,
                    locust_args=["--host", url, "--model", SIM_MODEL, "--ladder", "2,4", "--dwell-s", "3",
                                 "--warmup-s", "0.5", "--max-tokens", "8"])  # fmt: skip
    return run_locust(run, progress_every_s=0, echo=lambda _line: None), run


def test_a_slow_worker_init_loses_no_row(tmp_path, monkeypatch, server_url):
    monkeypatch.setenv(SLOW_INIT_ENV, str(SLOW_INIT_S))
    code, run = _run(tmp_path, server_url)
    log = (run.run_dir / "locust_master.log").read_text()
    assert code == 0, log[-3000:]
    rows = pd.read_csv(run.run_dir / "requests.csv")
    assert len(rows) == locust_request_count(run.run_dir) > 20, log[-3000:]
    assert rows["worker_id"].nunique() == 2
    assert "llm-locust init before the first users" in log  # the master did wait


def test_a_worker_never_ready_is_named_and_nothing_is_sent(tmp_path, monkeypatch, server_url):
    monkeypatch.setenv(SLOW_INIT_ENV, "8")
    monkeypatch.setenv(READY_TIMEOUT_ENV, "1.5")
    code, run = _run(tmp_path, server_url)
    log = (run.run_dir / "locust_master.log").read_text()
    assert code == 1, log[-3000:]
    error = [line for line in log.splitlines() if "never became ready" in line]
    assert error and "/ERROR/" in error[0], log[-3000:]
    workers = re.findall(r"locust.runners: (\S+) \(index \d+\) reported as ready", log)
    assert len(workers) == 2 and all(worker in error[0] for worker in workers), (workers, error)
    stats = run.run_dir / "locust_stats.csv"
    assert not stats.exists() or locust_request_count(run.run_dir) == 0
