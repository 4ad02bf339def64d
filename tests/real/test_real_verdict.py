"""The verdict against real servers, in the cases the configuration decides (issue 9, item 8).

Expected answers come from how each server was started, not from this project's code:

- llama.cpp with one slot (``SLOTS=1``, ``--parallel 1``) can run one sequence at a time:
  batching is off, whatever the load. Running stays at 1, the rest wait, and output throughput
  does not rise from 1 to 2 users: ``batching_off`` at a critical concurrency of 1. (This ran on
  vLLM ``--max-num-seqs 1`` until the suite outgrew its 30 minutes: a vLLM start costs 60-100 s
  on 2 cores, llama.cpp's under one; vLLM's ceiling is read from its log in ``test_real_vllm``.)
- llama.cpp with 4 slots driven by 2 workers holding one connection each: the client can never
  have more than 2 requests open, so the ladder's 4 and 8 users are never reached and the server
  never queues: ``client``, and no server kind is blamed.

(``scheduler_ceiling`` at vLLM ``--max-num-seqs 4`` and llama.cpp ``SLOTS=4`` is asserted in
``test_real_vllm.py`` and ``test_real_llamacpp.py`` on their own ladder runs.)
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from tests.real_servers import real_server

pytestmark = [pytest.mark.slow, pytest.mark.real_server]


def _run(url: str, run_dir, ladder: list[int], *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "llm_locust.cli",
            "run",
            "--host",
            url,
            "--workers",
            "2",
            "--run-dir",
            str(run_dir),
            "--timeout-s",
            "400",
            "--ladder",
            ",".join(map(str, ladder)),
            "--dwell-s",
            "12",
            "--warmup-s",
            "3",
            "--max-tokens",
            "64",
            "--ignore-eos",
            "true",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )


def _steps(run_dir) -> list[dict[str, str]]:
    with open(run_dir / "report" / "steps.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_llamacpp_with_one_slot_is_batching_off(tmp_path):
    with real_server("llama-cpp", [], {"MODEL": "slow", "SLOTS": "1"}, tmp_path / "llama.log") as url:
        completed = _run(url, tmp_path / "run", [1, 2, 4], "--model", "slow-llama")
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    verdict = json.loads((tmp_path / "run" / "report" / "verdict.json").read_text())
    steps = {int(float(s["target_users"])): s for s in _steps(tmp_path / "run")}

    with open(tmp_path / "run" / "server_metrics.csv", newline="") as f:
        running = [float(r["value"]) for r in csv.DictReader(f) if r["metric"] == "llamacpp:requests_processing"]
    assert running and max(running) == 1.0, running
    for users in (1, 2, 4):
        assert 0.6 <= float(steps[users]["server_running"]) <= 1.0, steps[users]
        assert float(steps[users]["server_waiting"]) == pytest.approx(users - 1, abs=0.3), steps[users]
    assert verdict["bottleneck"] == "batching_off", completed.stdout[-3000:]
    assert verdict["critical_concurrency"] == 1, completed.stdout[-3000:]
    assert any("--parallel" in (r.get("flag") or "") for r in verdict["recommendations"]), verdict


def test_llamacpp_through_two_connections_is_the_client(tmp_path):
    with real_server("llama-cpp", [], {"MODEL": "slow", "SLOTS": "4"}, tmp_path / "llama.log") as url:
        completed = _run(url, tmp_path / "run", [1, 2, 4, 8], "--model", "slow-llama", "--connections", "1")
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    verdict = json.loads((tmp_path / "run" / "report" / "verdict.json").read_text())
    steps = {int(float(s["target_users"])): s for s in _steps(tmp_path / "run")}

    # two connections in all: the server never runs more than 2 and never queues
    for users in (4, 8):
        assert float(steps[users]["server_running"]) <= 2.1, steps[users]
        assert float(steps[users]["server_waiting"]) < 0.5, steps[users]
    assert verdict["bottleneck"] == "client", completed.stdout[-3000:]
    assert verdict["secondary"] == [], verdict["secondary"]
    assert verdict["critical_concurrency"] is None
    invalid = {s["users"] for s in verdict["steps"] if not s["valid"]}
    assert {4, 8} <= invalid, verdict["steps"]
