"""The verdict's contract over a few hundred generated step tables (issue 25, item 1).

Each table is a closed-loop ladder of a server with a random batch ceiling (configured or not),
random noise, queues, KV pressure, failures of one kind, missing server counts, a client short of
its target, hidden requests and short windows. Whatever comes out, :func:`contract_problems`
must find nothing: the primary's own evidence holds and never says "not", an ``undetermined``
names its candidates and the measurement that separates them, and the critical concurrency is
before the step the primary's evidence names.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.verdict import ClientSide, ServerSide, diagnose
from llm_locust.analysis.verdict.jsonout import verdict_json
from tests.verdict_contract import contract_problems

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)

T0 = 1_700_000_000.0


def generated_table(seed: int) -> tuple[pd.DataFrame, ServerConfig]:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 7))
    users = 2.0 ** np.arange(n)
    ceiling = float(2 ** rng.integers(0, 5))
    configured = bool(rng.random() < 0.6)
    per_seq_tps = float(rng.uniform(10, 60))
    slowdown = rng.uniform(0.0, 0.08)  # per sequence in the batch: compute cost of batching
    batch = np.minimum(users, ceiling)
    tput = batch * per_seq_tps / (1 + slowdown * batch) * rng.normal(1.0, float(rng.choice([0.01, 0.05, 0.15])), n)
    queue = np.maximum(users - ceiling, 0.0)
    service_ms = 1000.0 * float(rng.uniform(0.3, 12.0))
    ttft = 40.0 + queue / np.maximum(batch, 1) * service_ms
    window_s = float(rng.choice([5.0, 10.0, 20.0, 40.0]))
    running = batch * rng.normal(1.0, 0.03, n)
    waiting = queue * rng.normal(1.0, 0.05, n)
    inflight = users.copy()
    if rng.random() < 0.15:  # the client falls short from some step on
        inflight[int(rng.integers(1, n)) :] *= 0.7
    if rng.random() < 0.2:  # requests the counters miss (a gateway, a batcher's next batch)
        waiting = np.zeros(n)
    if rng.random() < 0.15:
        running[:], waiting[:] = np.nan, np.nan
    kv = np.where(rng.random() < 0.2, np.minimum(1.0, users / ceiling * 0.5), 0.1) * np.ones(n)
    errors = np.zeros(n, int)
    kinds = [""] * n
    if rng.random() < 0.25:
        kind = str(rng.choice(["http_429", "http_503", "ttft_timeout", "total_timeout"]))
        for i in range(int(rng.integers(1, n)), n):
            errors[i] = int(rng.integers(1, 200))
            kinds[i] = f"{kind}:{errors[i]}"
    completed = np.maximum(1, (tput / 64.0 * window_s).astype(int))
    table = pd.DataFrame(
        {
            "step": np.arange(n),
            "target_users": users,
            "window_start_s": T0 + window_s * np.arange(n),
            "window_end_s": T0 + window_s * (np.arange(n) + 1),
            "window_s": window_s,
            "client_inflight": inflight,
            "server_running": running,
            "server_waiting": waiting,
            "kv_usage_ratio": kv,
            "server_preemptions_per_s": 0.0,
            "conn_wait_ms_mean": 0.0,
            "completed": completed,
            "output_tps": tput,
            "output_tps_prorated": tput,
            "request_rps": completed / window_s,
            "ttft_p50_ms": ttft,
            "tpot_p50_ms": 20.0,
            "e2e_p50_ms": ttft + service_ms,
            "errors": errors,
            "error_kinds": kinds,
        }
    )
    config = ServerConfig(
        engine="vllm",
        batch_ceiling=int(ceiling) if configured else None,
        batch_ceiling_name="max_num_seqs" if configured else None,
    )
    return table, config


@pytest.mark.parametrize("seed", range(300))
def test_generated_tables_keep_the_contract(seed):
    table, config = generated_table(seed)
    verdict = diagnose(table, ServerSide(family="vllm"), config, ClientSide(), warmup_s=5.0)
    data = verdict_json(verdict)
    assert contract_problems(data) == [], (seed, verdict.line, verdict.critical.text)
    assert math.isfinite(len(data["steps"]))
