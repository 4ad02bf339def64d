"""Trace replay end to end: ``llm-locust run --trace T --trace-format mooncake --trace-speed 2
--workers 2`` (a real Locust master and 2 workers) against a fresh embedded server.

Checked independently of the client's figures:

- the server's own counters (its ``/metrics``, scraped here after the run: a fresh server, and no
  probe requests, so they hold the replay alone): requests finished = the trace's rows, prompt
  tokens = the sum of the trace's ``input_length``, generated tokens = the sum of ``output_length``;
- per request, the server's own ``usage`` counts in ``requests.csv`` joined to the trace by
  ``trace_row``: every row once, each with its row's input and output lengths;
- the send times: scheduled times are the trace's offsets / 2 from the first one, exactly; each
  real send leaves within its own recorded lag of that, and the lag percentiles the analysis
  reports are those of these sends.

The prompts are sized with ``--input-calibration`` from the embedded server's documented counting
rule (``llm_locust/simserver/openai_request.py``: a chat prompt counts its words + 4 per message
+ 3; ``Words:`` is one word), so no calibration probe adds to the server's counters.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import urllib.request

import numpy as np
import pandas as pd
import pytest

from llm_locust.analysis.perstep.table import step_table, step_windows
from llm_locust.analysis.rundir.reader import load_run
from llm_locust.client.workload.synthetic import CANDIDATE_WORDS

pytestmark = pytest.mark.slow

ROWS, SPEED, BLOCK = 30, 2.0, 512
SIM_BASE_TOKENS = 1 + 4 + 3  # "Words:" in one user message


def mooncake_trace(seed: int = 5) -> list[dict]:
    """Rows in Mooncake's format: ms timestamps (some equal), lengths, chained block ids where a
    third of the rows continue an earlier row's first block (a shared prefix)."""
    rng = random.Random(seed)
    rows, t_ms, next_id = [], 0, 0
    for _ in range(ROWS):
        t_ms += rng.choice([0, 40, 90, 150, 260])
        input_length = rng.randint(20, 1300)
        blocks = -(-input_length // BLOCK)
        if rows and rng.random() < 0.35 and blocks > 1:
            first = rng.choice(rows)["hash_ids"][:1]
        else:
            first, next_id = [next_id], next_id + 1
        hash_ids = first + list(range(next_id, next_id + blocks - 1))
        next_id += blocks - 1
        rows.append({"timestamp": t_ms, "input_length": input_length, "output_length": rng.randint(1, 12),
                     "hash_ids": hash_ids})  # fmt: skip
    return rows


def scrape(host: str) -> dict[str, float]:
    """The server's counters, summed over their labels."""
    text = urllib.request.urlopen(f"{host}/metrics", timeout=5).read().decode()
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.split("{")[0].split(" ")[0], float(line.rsplit(" ", 1)[1])
            totals[name] = totals.get(name, 0.0) + value
    return totals


@pytest.fixture(scope="module")
def fresh_host(tmp_path_factory):
    from tests.e2e.conftest import embedded_server

    with embedded_server(tmp_path_factory, max_num_seqs=32) as host:
        yield host


def test_a_mooncake_trace_replayed_at_twice_its_speed_over_two_workers(fresh_host, tmp_path):
    trace = mooncake_trace()
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in trace))
    calibration = {"base_tokens": SIM_BASE_TOKENS, "words": list(CANDIDATE_WORDS[:16]), "method": "server"}
    run_dir = tmp_path / "run"
    completed = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "run", "--host", fresh_host, "--workers", "2", "--out", str(run_dir),
         "--timeout-s", "60", "--no-analyze", "--no-first-request", "--trace", str(path), "--trace-format", "mooncake",
         "--trace-speed", str(SPEED), "--max-users", "64", "--drain-s", "10",
         "--input-calibration", json.dumps(calibration)],
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr
    server = scrape(fresh_host)
    inputs = np.array([row["input_length"] for row in trace])
    outputs = np.array([row["output_length"] for row in trace])
    assert server["vllm:request_success_total"] == ROWS
    assert server["vllm:prompt_tokens_total"] == inputs.sum()
    assert server["vllm:generation_tokens_total"] == outputs.sum()

    requests = pd.read_csv(run_dir / "requests.csv", dtype={"error_kind": str}, keep_default_na=False)
    assert (requests["error_kind"] == "").all()
    assert sorted(requests["trace_row"]) == list(range(ROWS))  # every row once
    requests = requests.set_index("trace_row").sort_index()
    assert (requests["prompt_tokens"].to_numpy() == inputs).all()  # the server's own usage counts
    assert (requests["output_tokens"].to_numpy() == outputs).all()
    assert (requests["max_tokens"].to_numpy() == outputs).all()
    workers = requests.groupby("worker_id").apply(lambda g: sorted(g.index), include_groups=False)
    assert sorted(map(tuple, workers)) == [tuple(range(0, ROWS, 2)), tuple(range(1, ROWS, 2))]

    stamps_ms = np.array([row["timestamp"] for row in trace])
    offsets_s = (stamps_ms - stamps_ms[0]) / 1000.0  # the replay starts at the trace's first request
    scheduled = requests["scheduled_s"].to_numpy(float)
    np.testing.assert_allclose(scheduled - scheduled[0], offsets_s / SPEED, atol=1e-6)
    lag_s = requests["t_start_s"].to_numpy(float) - scheduled
    assert (lag_s >= -0.002).all()  # never early (clock read granularity)
    sent_from_first = requests["t_start_s"].to_numpy(float) - scheduled[0]
    assert (np.abs(sent_from_first - offsets_s / SPEED) <= np.maximum(lag_s, 0) + 0.002).all()
    assert np.median(lag_s) < 0.05  # the schedule was kept

    run = load_run(run_dir)
    assert run.meta["shape"]["trace_rows"] == ROWS and run.meta["workload"]["trace_format"] == "mooncake"
    # the first send 0.5 s into the step (its warm-up, nothing sent), the last 1 s before its end
    step = run.meta["shape"]["steps"][0]
    assert scheduled[0] == pytest.approx(step["start_s"] + 0.5, abs=1e-6)
    assert step["end_s"] - scheduled.max() == pytest.approx(1.0, abs=1e-6)
    steps = step_table(run.requests, step_windows(run.steps, run.warmup_s))
    assert len(steps) == 1 and steps["planned_sends"].iloc[0] == ROWS and steps["unsent"].iloc[0] == 0
    assert steps["send_lag_p99_ms"].iloc[0] == pytest.approx(np.quantile(lag_s * 1000.0, 0.99), rel=1e-6)
