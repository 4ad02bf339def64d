"""Round deltas recomputed from a run directory's files alone (csv + json, no analysis code).

Used by the compare tests (unit, e2e, real) to check ``compare.json`` against numbers worked out
independently of :mod:`llm_locust.analysis.compare`.
"""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path


def ok_rows(run_dir: Path) -> list[dict]:
    """Successful rows of ``requests.csv``."""
    with open(run_dir / "requests.csv", newline="") as f:
        return [r for r in csv.DictReader(f) if not r["error_kind"]]


def decode_tps(row: dict) -> float:
    """``(output_tokens - 1) / (E2E - TTFT)``, tokens/s (DESIGN.md's decode rate)."""
    return (float(row["output_tokens"]) - 1) / ((float(row["e2e_ms"]) - float(row["ttft_ms"])) / 1000.0)


def step_requests(run_dir: Path, users: float) -> tuple[list[dict], float]:
    """Successful requests completed in the steady window of the step at ``users``, and its length, s."""
    meta = json.loads((run_dir / "run.json").read_text())
    warmup = meta["shape"].get("warmup_s") or 0.0
    step = next(s for s in meta["shape"]["steps"] if s["users"] == users)
    lo, hi = step["start_s"] + warmup, step["end_s"]
    done = [r for r in ok_rows(run_dir) if lo <= float(r["t_start_s"]) + float(r["e2e_ms"]) / 1000.0 < hi]
    return done, hi - lo


def step_tps(run_dir: Path, users: float) -> float:
    """Output tokens/s of the step at ``users``: completed tokens / window."""
    done, window = step_requests(run_dir, users)
    return sum(float(r["output_tokens"]) for r in done) / window


def single_decode_median(run_dir: Path) -> float:
    """Median decode rate of a baseline run's first N requests, or of a ladder's concurrency-1 step."""
    meta = json.loads((run_dir / "run.json").read_text())
    if meta["shape"]["kind"] == "baseline":
        rows = sorted(ok_rows(run_dir), key=lambda r: float(r["t_start_s"]))[: meta["shape"]["requests"]]
    else:
        rows, _ = step_requests(run_dir, 1)
    return statistics.median(decode_tps(r) for r in rows)


def single_ttft_median(run_dir: Path) -> float:
    """Median TTFT (ms) of a baseline run's first N requests."""
    meta = json.loads((run_dir / "run.json").read_text())
    rows = sorted(ok_rows(run_dir), key=lambda r: float(r["t_start_s"]))[: meta["shape"]["requests"]]
    return statistics.median(float(r["ttft_ms"]) for r in rows)


def _arrivals(row: dict) -> list[tuple[float, float]]:
    """(instant, tokens) of each token event of a row, tokens scaled to its ``output_tokens``
    (DESIGN.md: the first event one token and the others ``(N - 1) / (m - 1)`` each unless
    ``event_tokens`` gives the counts); [] when the row recorded no event times."""
    times = [float(x) for x in (row.get("token_times_us") or "").split()]
    total = float(row["output_tokens"])
    if not times or not total > 0:
        return []
    given = [float(x) for x in (row.get("event_tokens") or "").split()]
    if len(given) != len(times):
        given = [1.0] + [(total - 1) / (len(times) - 1)] * (len(times) - 1) if len(times) > 1 else [total]
    scale = total / sum(given)
    start = float(row["t_start_s"])
    return [(start + t / 1e6, n * scale) for t, n in zip(times, given)]


def step_tps_prorated(run_dir: Path, users: float) -> float:
    """Prorated output tokens/s of the step at ``users``: the tokens that arrived in the steady
    window / window (each token at its recorded arrival; a row without event times spreads its
    tokens evenly over ``[t_start + ttft, t_end]``)."""
    meta = json.loads((run_dir / "run.json").read_text())
    warmup = meta["shape"].get("warmup_s") or 0.0
    step = next(s for s in meta["shape"]["steps"] if s["users"] == users)
    lo, hi = step["start_s"] + warmup, step["end_s"]
    tokens = 0.0
    for row in ok_rows(run_dir):
        events = _arrivals(row)
        if events:
            tokens += sum(n for t, n in events if lo <= t < hi)
            continue
        first = float(row["t_start_s"]) + float(row["ttft_ms"]) / 1000.0
        end = float(row["t_start_s"]) + float(row["e2e_ms"]) / 1000.0
        if end > first:
            tokens += float(row["output_tokens"]) * max(0.0, min(end, hi) - max(first, lo)) / (end - first)
        elif lo <= end < hi:
            tokens += float(row["output_tokens"])
    return tokens / (hi - lo)
