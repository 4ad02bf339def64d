"""Factories for synthetic run directories with numbers checkable by hand."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from llm_locust.analysis.schema import (
    REQUEST_SCHEMA,
    REQUESTS_CSV,
    RUN_JSON,
    SCHEMA_VERSION,
    SERVER_METRICS_COLUMNS,
    SERVER_METRICS_CSV,
)
from llm_locust.client.record import CSV_COLUMNS, RequestRecord
from llm_locust.master.runwriter import CsvAppender

REQUEST_COLUMNS: tuple[str, ...] = tuple(c.name for c in REQUEST_SCHEMA if c.required)
"""The columns every ``requests.csv`` has (the optional ones are left out: the loader fills them)."""
T0 = 1_700_000_000.0
"""Wall-clock origin of every synthetic run (Unix s)."""

LABELS = '{"engine": "0", "model_name": "sim-llama"}'
SOURCE = "http://127.0.0.1:8000/metrics"


def make_request(
    t_start_s: float,
    *,
    e2e_ms: float = 1000.0,
    ttft_ms: float = 100.0,
    output_tokens: float = 64,
    error_kind: str = "",
    request_id: str = "",
) -> dict:
    """One ``requests.csv`` row; a failure gets status 500 or 429 to match its kind, and none
    (0, no headers) for a connection that never reached the server (``connection_error``,
    ``connect_timeout``; a stream cut after its 200 is ``status_code=200`` set by the caller)."""
    ok = error_kind == ""
    unreached = error_kind in ("connection_error", "connect_timeout")
    return {
        "request_id": request_id or f"w0-{t_start_s:.3f}",
        "worker_id": "w0",
        "name": "chat",
        "t_start_s": t_start_s,
        "headers_ms": "" if unreached else 5.0,
        "ttft_ms": ttft_ms,
        "e2e_ms": e2e_ms,
        "prompt_tokens": 20,
        "output_tokens": output_tokens,
        "tokens_source": "usage",
        "content_events": output_tokens,
        "finish_reason": "length" if ok else "",
        "status_code": 200 if ok else 0 if unreached else (429 if error_kind == "http_429" else 500),
        "error_kind": error_kind,
        "error_message": "" if ok else error_kind,
    }


def server_row(t_s: float, metric: str, value: float, labels: str = LABELS, source: str = SOURCE) -> dict:
    """One ``server_metrics.csv`` row."""
    return {"t_s": t_s, "source": source, "metric": metric, "labels": labels, "value": value}


def write_run_dir(
    path: Path,
    *,
    requests: list[dict],
    steps: list[tuple[int, float, float | None]],
    warmup_s: float = 0.0,
    server: list[dict] | None = None,
    ended_at_s: float | None = None,
    kind: str = "ladder",
    **meta,
) -> Path:
    """Write run.json, requests.csv and (when ``server`` is given) server_metrics.csv.

    ``steps`` are ``(users, start_s, end_s)`` triples; ``end_s`` None is written as null.
    """
    path.mkdir(parents=True, exist_ok=True)
    ends = [e for _, _, e in steps if e is not None]
    run = {
        "schema_version": SCHEMA_VERSION,
        "started_at_s": T0,
        "ended_at_s": ended_at_s if ended_at_s is not None else max(ends, default=T0 + 10.0),
        "command_line": ["llm-locust", "run"],
        "host": "http://127.0.0.1:8000",
        "model": "sim-llama",
        "workload": {
            "protocol": "openai-chat",
            "max_tokens": 64,
            "ignore_eos": True,
            "temperature": 0.0,
            "prompt_set_sha256": "abc",
        },
        "shape": {
            "kind": kind,
            "warmup_s": warmup_s,
            "dwell_s": 20.0,
            "steps": [{"index": k, "users": u, "start_s": s, "end_s": e} for k, (u, s, e) in enumerate(steps)],
        },
        "metrics_urls": [SOURCE],
        "scrape_interval_s": 1.0,
        "workers": [],
        "versions": {},
        "labels": {},
    }
    run.update(meta)
    (path / RUN_JSON).write_text(json.dumps(run), encoding="utf-8")
    extra = [k for row in requests for k in row if k not in REQUEST_COLUMNS]
    with open(path / REQUESTS_CSV, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=[*REQUEST_COLUMNS, *dict.fromkeys(extra)])
        writer.writeheader()
        writer.writerows(requests)
    if server is not None:
        with open(path / SERVER_METRICS_CSV, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=SERVER_METRICS_COLUMNS)
            writer.writeheader()
            writer.writerows(server)
    return path


def synthetic_ladder(
    path: Path,
    *,
    users: tuple[int, ...] = (1, 2, 4, 8, 16),
    max_num_seqs: int = 4,
    dwell_s: float = 20.0,
    warmup_s: float = 5.0,
    with_server: bool = True,
) -> Path:
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
                requests.append(make_request(t, e2e_ms=e2e_ms, ttft_ms=queue_ms + 40.0, request_id=f"u{c}-{u}-{t:.3f}"))
                t += e2e_ms / 1000.0
        if not with_server:
            continue
        for second in range(int(dwell_s)):
            t_s = start + second
            server += [
                server_row(t_s, "vllm:num_requests_running", batch),
                server_row(t_s, "vllm:num_requests_waiting", max(c - max_num_seqs, 0)),
                server_row(t_s, "vllm:kv_cache_usage_perc", 0.05 * batch),
            ]
    return write_run_dir(
        path, requests=requests, steps=steps, warmup_s=warmup_s, server=server if with_server else None
    )


CLIENT_LOAD_COLUMNS = ("t_s", "worker", "cpu_cores", "loop_lag_ms_mean", "loop_lag_ms_max", "open_streams")


def client_load_row(
    t_s: float,
    *,
    worker: str = "w0",
    cpu_cores: float = 0.2,
    loop_lag_ms_mean: float = 1.0,
    loop_lag_ms_max: float = 3.0,
    open_streams: int = 1,
) -> dict:
    """One ``client_load.csv`` row (the interval ending at ``t_s``)."""
    return {
        "t_s": t_s,
        "worker": worker,
        "cpu_cores": cpu_cores,
        "loop_lag_ms_mean": loop_lag_ms_mean,
        "loop_lag_ms_max": loop_lag_ms_max,
        "open_streams": open_streams,
    }


def write_client_load(path: Path, rows: list[dict]) -> Path:
    """Write ``<path>/client_load.csv`` with exactly :data:`CLIENT_LOAD_COLUMNS`."""
    with open(path / "client_load.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CLIENT_LOAD_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return path / "client_load.csv"


def step_spec(
    users: int,
    *,
    active: int | None = None,
    e2e_ms: float = 1000.0,
    ttft_ms: float = 100.0,
    tokens: int = 64,
    fail_every: int = 0,
    fail_kind: str = "http_429",
    fail_e2e_ms: float | None = None,
    conn_wait_ms: float = 0.0,
    running: float | None = None,
    waiting: float = 0.0,
    kv: float = 0.1,
    preemptions_per_s: float = 0.0,
    cpu_cores: float | None = None,
    loop_lag_ms: float | None = None,
) -> dict:
    """One step of :func:`scenario_ladder`; every figure is held constant over the step."""
    return dict(
        users=users,
        active=users if active is None else active,
        e2e_ms=e2e_ms,
        ttft_ms=ttft_ms,
        tokens=tokens,
        fail_every=fail_every,
        fail_kind=fail_kind,
        fail_e2e_ms=e2e_ms if fail_e2e_ms is None else fail_e2e_ms,
        conn_wait_ms=conn_wait_ms,
        running=running,
        waiting=waiting,
        kv=kv,
        preemptions_per_s=preemptions_per_s,
        cpu_cores=cpu_cores,
        loop_lag_ms=loop_lag_ms,
    )


def scenario_ladder(path: Path, steps: list[dict], *, dwell_s: float = 10.0, **meta) -> Path:
    """A ladder whose every step is a :func:`step_spec`, numbers checkable by hand.

    In step ``k`` (``[T0 + k * dwell_s, T0 + (k + 1) * dwell_s)``, no warm-up) each of the
    ``active`` users sends back to back (a closed loop): it first waits ``conn_wait_ms`` for a
    connection, then its request lasts ``e2e_ms`` (``fail_e2e_ms`` when it fails); every
    ``fail_every``-th request of a user in the step fails with ``fail_kind``. A user's last
    request of a step may end in the next one, where the user goes on from its end (new users
    start at the step's start).
    Server samples every second: ``running`` (default ``active``), ``waiting``, ``kv``, and
    ``vllm:num_preemptions_total`` rising by ``preemptions_per_s`` a second. With
    ``cpu_cores`` / ``loop_lag_ms`` set, ``client_load.csv`` gets one row per second.
    """
    requests, server, bounds, load = [], [], [], []
    preempted, next_t = 0.0, {}
    for k, spec in enumerate(steps):
        start, end = T0 + k * dwell_s, T0 + (k + 1) * dwell_s
        bounds.append((spec["users"], start, end))
        for u in range(spec["active"]):
            t, j = max(start, next_t.get(u, start)), 0
            while t < end:
                t += spec["conn_wait_ms"] / 1000.0
                fails = spec["fail_every"] and (j + 1) % spec["fail_every"] == 0
                e2e = spec["fail_e2e_ms"] if fails else spec["e2e_ms"]
                row = make_request(
                    t,
                    e2e_ms=e2e,
                    ttft_ms=min(spec["ttft_ms"], e2e),
                    output_tokens=0 if fails else spec["tokens"],
                    error_kind=spec["fail_kind"] if fails else "",
                    request_id=f"s{k}-u{u}-{j}",
                )
                if fails:
                    row["ttft_ms"] = ""
                row["conn_wait_ms"] = spec["conn_wait_ms"]
                requests.append(row)
                t += e2e / 1000.0
                j += 1
            next_t[u] = t
        running = spec["active"] if spec["running"] is None else spec["running"]
        for second in range(int(dwell_s)):
            t_s = start + second
            server += [
                server_row(t_s, "vllm:num_requests_running", running),
                server_row(t_s, "vllm:num_requests_waiting", spec["waiting"]),
                server_row(t_s, "vllm:kv_cache_usage_perc", spec["kv"]),
                server_row(t_s, "vllm:num_preemptions_total", preempted),
            ]
            preempted += spec["preemptions_per_s"]
            if spec["cpu_cores"] is not None or spec["loop_lag_ms"] is not None:
                load.append(
                    client_load_row(
                        t_s + 1.0,
                        cpu_cores=spec["cpu_cores"] if spec["cpu_cores"] is not None else 0.2,
                        loop_lag_ms_mean=spec["loop_lag_ms"] if spec["loop_lag_ms"] is not None else 1.0,
                        open_streams=spec["active"],
                    )
                )
    out = write_run_dir(path, requests=requests, steps=bounds, server=server, **meta)
    if load:
        write_client_load(path, load)
    return out


def writer_rows(n: int, seed: int = 0, *, worker_id: str = "w") -> list[tuple]:
    """``n`` rows as the worker writes them (``RequestRecord.to_row``): a fifth failed, quoted
    cells (a quote and a CRLF in the failures' messages; a comma too with a ``worker_id`` that
    holds one), NaN cells and per-event times."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        failed = rng.random() < 0.2
        record = RequestRecord(
            request_id=f"w-{i}", worker_id=worker_id, name="chat", t_start_s=T0 + i * 0.37,
            headers_ms=float(rng.random()), ttft_ms=math.nan if failed else float(rng.uniform(10, 90)),
            e2e_ms=float(rng.uniform(100, 900)), output_tokens=int(rng.integers(0, 64)),
            error_kind="http_5xx" if failed else "", error_message='said "no", then\r\nclosed' if failed else "",
            connect_ms=math.nan if i % 3 else 0.25,
            token_times_us=" ".join(str(t) for t in sorted(rng.integers(1, 10**6, 5))), event_tokens="1 1 1 1 1",
        )  # fmt: skip
        rows.append(record.to_row())
    return rows


def write_writer_rows(path: Path, rows: list[tuple]) -> None:
    """``rows`` appended to ``path`` by the master's own CSV appender (header first when new)."""
    writer = CsvAppender(path, CSV_COLUMNS)
    writer.write_rows(rows)
    writer.close()
