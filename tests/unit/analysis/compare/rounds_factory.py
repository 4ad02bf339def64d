"""Rounds for the compare tests, written with :mod:`tests.analysis_factories`' writers.

A round is a closed-loop ladder against a continuous-batching model with ``max_num_seqs``
slots whose per-token cost is multiplied by ``slowdown`` (a heavier or lighter model build):
prefill ``40 * slowdown`` ms, TPOT ``slowdown * (20 + 2 b) * (1 + jitter)`` ms at batch ``b``,
``jitter`` a fixed pseudo-random value in [-4 %, +4 %] per request (so medians have intervals).
Above ``max_num_seqs`` users a request first queues ``(c / S - 1) * D(S)``.
"""

from __future__ import annotations

import random
from pathlib import Path

from tests.analysis_factories import T0, make_request, server_row, write_run_dir

TOKENS = 64


def ladder_round(
    path: Path,
    *,
    max_num_seqs: int = 4,
    slowdown: float = 1.0,
    users: tuple[int, ...] = (1, 2, 4, 8),
    dwell_s: float = 30.0,
    warmup_s: float = 5.0,
    seed: int = 1,
    labels: dict | None = None,
    workload: dict | None = None,
    ttft_ms: float = 40.0,
) -> Path:
    """Write one ladder round; returns its run directory (``ttft_ms``: a single request's TTFT
    before ``slowdown``)."""
    rng = random.Random(seed)
    requests, server, steps = [], [], []
    for k, c in enumerate(users):
        start, end = T0 + k * dwell_s, T0 + (k + 1) * dwell_s
        steps.append((c, start, end))
        batch = min(c, max_num_seqs)
        full_ms = slowdown * (40.0 + 63 * (20.0 + 2 * max_num_seqs))
        queue_ms = max(c / max_num_seqs - 1.0, 0.0) * full_ms
        for u in range(c):
            t = start + u * 0.01
            while t < end:
                tpot = slowdown * (20.0 + 2 * batch) * (1 + rng.uniform(-0.04, 0.04))
                ttft = queue_ms + ttft_ms * slowdown
                e2e = ttft + 63 * tpot
                requests.append(
                    make_request(t, e2e_ms=e2e, ttft_ms=ttft, output_tokens=TOKENS, request_id=f"u{c}-{u}-{t:.4f}")
                )
                t += e2e / 1000.0
        for second in range(int(dwell_s)):
            server += [
                server_row(start + second, "vllm:num_requests_running", batch),
                server_row(start + second, "vllm:num_requests_waiting", max(c - max_num_seqs, 0)),
            ]
    meta = {"labels": labels or {}}
    if workload is not None:
        meta["workload"] = workload
    return write_run_dir(path, requests=requests, steps=steps, warmup_s=warmup_s, server=server, **meta)


def baseline_round(
    path: Path, *, slowdown: float = 1.0, n: int = 12, seed: int = 2, labels: dict | None = None
) -> Path:
    """Write a baseline (single-request) run of ``n`` requests one at a time."""
    rng = random.Random(seed)
    requests, t = [], T0
    for i in range(n):
        tpot = slowdown * 22.0 * (1 + rng.uniform(-0.04, 0.04))
        ttft = 40.0 * slowdown * (1 + rng.uniform(-0.04, 0.04))
        e2e = ttft + 63 * tpot
        requests.append(make_request(t, e2e_ms=e2e, ttft_ms=ttft, output_tokens=TOKENS, request_id=f"b{i}"))
        t += e2e / 1000.0 + 0.05
    path = write_run_dir(path, requests=requests, steps=[(1, T0, t + 1.0)], kind="baseline", labels=labels or {})
    import json

    meta = json.loads((path / "run.json").read_text())
    meta["shape"]["requests"] = n
    (path / "run.json").write_text(json.dumps(meta))
    return path


def rate_round(
    path: Path,
    *,
    rates: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0),
    max_num_seqs: int = 4,
    slowdown: float = 1.0,
    dwell_s: float = 20.0,
    warmup_s: float = 5.0,
    pool: int = 64,
    lag_s: float = 0.001,
    labels: dict | None = None,
) -> Path:
    """Write one request-rate ladder round (``shape.kind == "rate"``, steps with ``rate_rps``).

    Step ``k`` plans ``rate * dwell_s`` sends on an even grid (``scheduled_s``), each sent
    ``lag_s`` late. The server runs ``max_num_seqs`` requests at once, first come first served:
    a request starts when it is sent or when a slot frees, whichever is later; it then takes
    ``40 * slowdown`` ms to its first token and ``63 * 15 * slowdown`` ms more (about 1 s a
    request at ``slowdown`` 1: ``max_num_seqs`` req/s at most). Every request carries ``TOKENS``
    tokens. The pool of users is ``pool`` at every step (no load level).
    """
    import heapq
    import json

    free_at = [0.0] * max_num_seqs
    requests, server, steps = [], [], []
    busy: list[tuple[float, float, float]] = []  # (sent, service start, end) per request
    for k, rate in enumerate(rates):
        start, end = T0 + k * dwell_s, T0 + (k + 1) * dwell_s
        steps.append((pool, start, end))
        for j in range(round(rate * dwell_s)):
            scheduled = start + j / rate
            sent = scheduled + lag_s
            service = max(sent, heapq.heappop(free_at))
            ttft = (service - sent) * 1000.0 + 40.0 * slowdown
            e2e = ttft + 63 * 15.0 * slowdown
            heapq.heappush(free_at, sent + e2e / 1000.0)
            busy.append((sent, service, sent + e2e / 1000.0))
            row = make_request(sent, e2e_ms=e2e, ttft_ms=ttft, output_tokens=TOKENS, request_id=f"r{k}-{j}")
            row["scheduled_s"] = scheduled
            requests.append(row)
    for second in range(int(len(rates) * dwell_s)):
        t = T0 + second + 0.5
        running = sum(1 for _, s, e in busy if s <= t < e)
        waiting = sum(1 for a, s, _ in busy if a <= t < s)
        server += [
            server_row(t, "vllm:num_requests_running", running),
            server_row(t, "vllm:num_requests_waiting", waiting),
        ]
    path = write_run_dir(
        path, requests=requests, steps=steps, warmup_s=warmup_s, server=server, kind="rate", labels=labels or {}
    )
    meta = json.loads((path / "run.json").read_text())
    for step, rate in zip(meta["shape"]["steps"], rates):
        step["rate_rps"] = rate
    (path / "run.json").write_text(json.dumps(meta))
    return path
