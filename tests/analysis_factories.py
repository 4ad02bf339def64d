"""Factories for synthetic run directories with numbers checkable by hand."""

from __future__ import annotations

import csv
import json
from pathlib import Path

REQUEST_COLUMNS = (
    "request_id", "worker_id", "name", "t_start_s", "headers_ms", "ttft_ms", "e2e_ms",
    "prompt_tokens", "output_tokens", "tokens_source", "content_events", "finish_reason",
    "status_code", "error_kind", "error_message",
)
T0 = 1_700_000_000.0
"""Wall-clock origin of every synthetic run (Unix s)."""

LABELS = '{"engine": "0", "model_name": "sim-llama"}'
SOURCE = "http://127.0.0.1:8000/metrics"


def make_request(t_start_s: float, *, e2e_ms: float = 1000.0, ttft_ms: float = 100.0,
                 output_tokens: float = 64, error_kind: str = "", request_id: str = "") -> dict:
    """One ``requests.csv`` row; a failure gets status 500 or 429 to match its kind."""
    ok = error_kind == ""
    return {
        "request_id": request_id or f"w0-{t_start_s:.3f}", "worker_id": "w0", "name": "chat",
        "t_start_s": t_start_s, "headers_ms": 5.0, "ttft_ms": ttft_ms, "e2e_ms": e2e_ms,
        "prompt_tokens": 20, "output_tokens": output_tokens, "tokens_source": "usage",
        "content_events": output_tokens, "finish_reason": "length" if ok else "",
        "status_code": 200 if ok else (429 if error_kind == "http_429" else 500),
        "error_kind": error_kind, "error_message": "" if ok else error_kind,
    }


def server_row(t_s: float, metric: str, value: float, labels: str = LABELS,
               source: str = SOURCE) -> dict:
    """One ``server_metrics.csv`` row."""
    return {"t_s": t_s, "source": source, "metric": metric, "labels": labels, "value": value}


def write_run_dir(path: Path, *, requests: list[dict], steps: list[tuple[int, float, float | None]],
                  warmup_s: float = 0.0, server: list[dict] | None = None,
                  ended_at_s: float | None = None, kind: str = "ladder", **meta) -> Path:
    """Write run.json, requests.csv and (when ``server`` is given) server_metrics.csv.

    ``steps`` are ``(users, start_s, end_s)`` triples; ``end_s`` None is written as null.
    """
    path.mkdir(parents=True, exist_ok=True)
    ends = [e for _, _, e in steps if e is not None]
    run = {
        "schema_version": 1, "started_at_s": T0,
        "ended_at_s": ended_at_s if ended_at_s is not None else max(ends, default=T0 + 10.0),
        "command_line": ["llm-locust", "run"], "host": "http://127.0.0.1:8000",
        "model": "sim-llama",
        "workload": {"protocol": "openai-chat", "max_tokens": 64, "ignore_eos": True,
                     "temperature": 0.0, "prompt_set_sha256": "abc"},
        "shape": {"kind": kind, "warmup_s": warmup_s, "dwell_s": 20.0,
                  "steps": [{"index": k, "users": u, "start_s": s, "end_s": e}
                            for k, (u, s, e) in enumerate(steps)]},
        "metrics_urls": [SOURCE], "scrape_interval_s": 1.0, "workers": [], "versions": {},
        "labels": {},
    }
    run.update(meta)
    (path / "run.json").write_text(json.dumps(run), encoding="utf-8")
    with open(path / "requests.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=REQUEST_COLUMNS)
        writer.writeheader()
        writer.writerows(requests)
    if server is not None:
        with open(path / "server_metrics.csv", "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=["t_s", "source", "metric", "labels", "value"])
            writer.writeheader()
            writer.writerows(server)
    return path


def synthetic_ladder(path: Path, *, users: tuple[int, ...] = (1, 2, 4, 8, 16),
                     max_num_seqs: int = 4, dwell_s: float = 20.0, warmup_s: float = 5.0,
                     with_server: bool = True) -> Path:
    """A closed-loop ladder against a continuous-batching model with ``max_num_seqs`` slots.

    Per request: 64 output tokens, prefill 40 ms, TPOT ``20 + 2 * batch`` ms, so service time
    ``D(b) = 40 + 63 * (20 + 2 b)`` ms. Up to ``max_num_seqs`` users every request runs at once;
    above it a request first queues ``(c / max_num_seqs - 1) * D(max_num_seqs)``. Throughput is
    ``min(c, S) * 64 / D(min(c, S))``, flat above ``S``: the critical concurrency is ``S``.
    Server samples every second: running ``min(c, S)``, waiting ``max(c - S, 0)``.
    """
    requests, server, steps = [], [], []
    for k, c in enumerate(users):
        start, end = T0 + k * dwell_s, T0 + (k + 1) * dwell_s
        steps.append((c, start, end))
        batch = min(c, max_num_seqs)
        service_ms = 40.0 + 63 * (20.0 + 2 * batch)
        full_ms = 40.0 + 63 * (20.0 + 2 * max_num_seqs)
        queue_ms = max(c / max_num_seqs - 1.0, 0.0) * full_ms
        e2e_ms = queue_ms + service_ms
        for u in range(c):
            t = start + u * e2e_ms / 1000.0 / c
            while t < end:
                requests.append(make_request(t, e2e_ms=e2e_ms, ttft_ms=queue_ms + 40.0,
                                             request_id=f"u{c}-{u}-{t:.3f}"))
                t += e2e_ms / 1000.0
        if not with_server:
            continue
        for second in range(int(dwell_s)):
            t_s = start + second
            server += [server_row(t_s, "vllm:num_requests_running", batch),
                       server_row(t_s, "vllm:num_requests_waiting", max(c - max_num_seqs, 0)),
                       server_row(t_s, "vllm:kv_cache_usage_perc", 0.05 * batch)]
    return write_run_dir(path, requests=requests, steps=steps, warmup_s=warmup_s,
                         server=server if with_server else None)
