"""Ladder steps last ``--dwell-s`` to within 50 ms on a busy 2-core machine (issue 27): two CPU
burner processes (one per core, each bounded to 60 s) run beside the master, two workers and the
embedded server for the whole ladder. Each step's length is run.json's ``end_s - start_s`` (the
master's clock), and each step's ``duration_s`` says the same. ~20 s.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from llm_locust.run.demo import SIM_MODEL, start_sim_server
from llm_locust.run.launcher import LocustRun, free_port, run_locust, stop_process
from tests.e2e.fault_helpers import LOCUSTFILES

pytestmark = pytest.mark.slow

DWELL_S = 2.5
LADDER = (1, 2, 3, 4)
TOLERANCE_S = 0.05
BURNER = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end:\n    pass\n"


def test_steps_last_their_dwell_on_a_busy_machine(tmp_path):
    port = free_port()
    server = start_sim_server(port=port, max_num_seqs=4, log_path=tmp_path / "engine.log")
    burners = [subprocess.Popen([sys.executable, "-c", BURNER]) for _ in range(2)]
    try:
        run = LocustRun(locustfile=LOCUSTFILES / "ladder.py", run_dir=tmp_path / "run", workers=2, timeout_s=90,
                        locust_args=["--host", f"http://127.0.0.1:{port}", "--model", SIM_MODEL,
                                     "--ladder", ",".join(map(str, LADDER)), "--dwell-s", str(DWELL_S),
                                     "--warmup-s", "0.5", "--max-tokens", "16"])  # fmt: skip
        code = run_locust(run, progress_every_s=0, echo=lambda _line: None)
        assert all(burner.poll() is None for burner in burners)  # the machine was busy all along
    finally:
        for burner in burners:
            burner.kill()
            burner.wait(timeout=10)
        stop_process(server, grace_s=10)
    assert code == 0, (run.run_dir / "locust_master.log").read_text()[-3000:]
    steps = json.loads((run.run_dir / "run.json").read_text())["shape"]["steps"]
    assert [step["users"] for step in steps] == list(LADDER)
    lengths = [step["end_s"] - step["start_s"] for step in steps]
    assert all(abs(length - DWELL_S) <= TOLERANCE_S for length in lengths), lengths
    assert [step["duration_s"] for step in steps] == pytest.approx(lengths, abs=1e-5)
