"""``--input-tokens`` end to end against the embedded server (whose prompt count is a documented
formula, ``llm_locust/simserver/openai_request.py``): ``llm-locust run`` sizes the prompts before
the load and hands the calibration to the worker, which sends prompts the server counts exactly.
(Datasets and the sources themselves: ``tests/unit/client/workload/test_sources_on_sim.py``.)
"""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

pytestmark = pytest.mark.slow


def _run(host: str, run_dir, *extra: str) -> pd.DataFrame:
    completed = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "run", "--host", host, "--workers", "1", "--run-dir", str(run_dir),
         "--no-analyze", "--timeout-s", "60", "--ladder", "2", "--dwell-s", "2", "--warmup-s", "0.5", *extra],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return pd.read_csv(run_dir / "requests.csv")


def test_input_tokens_are_exact_as_the_server_counts_them(sim_host, tmp_path):
    requests = _run(sim_host, tmp_path / "run", "--input-tokens", "64", "--input-tokens-stddev", "8", "--seed", "4",
                    "--max-tokens", "4")  # fmt: skip

    assert len(requests) >= 5
    assert (requests["prompt_tokens"] == requests["prompt_tokens_target"]).all()
    assert requests["prompt_tokens_target"].nunique() > 1  # lengths drawn, not fixed
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    workload = meta["workload"]
    assert (workload["input_tokens"], workload["input_tokens_stddev"], workload["seed"]) == (64, 8.0, 4)
    assert workload["input_calibration"]["base_tokens"] == 1 + 4 + 3  # "Words:" in one message
    assert "--input-calibration" in meta["command_line"]
