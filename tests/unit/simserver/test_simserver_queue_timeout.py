"""The generic flavour's queue timeout: a request never admitted within ``queue_timeout_ms`` is
dropped (engine), answered 504 ``timed out in queue`` with one log line (over real HTTP on
127.0.0.1), and the verdict counts the 5xx the log accounts for as a timeout."""

from __future__ import annotations

import asyncio
import re
import time

import aiohttp
import pandas as pd
import pytest

from llm_locust.analysis.server.userformat import load_user_format
from llm_locust.analysis.verdict.failures import client_failures, step_failure_kind
from llm_locust.analysis.verdict.types import BottleneckKind
from llm_locust.run.launcher import free_port
from llm_locust.simserver.config import SimConfig
from llm_locust.simserver.engine import BatchEngine, SimRequest
from llm_locust.simserver.flavors.generic import FORMAT_TOML
from llm_locust.simserver.server import serve


def request(n: int, arrival_s: float) -> SimRequest:
    return SimRequest(request_id=f"r{n}", prompt_tokens=4, max_tokens=50, stop_after_tokens=50, arrival_s=arrival_s)


def test_engine_drops_only_never_admitted_requests_past_the_timeout():
    engine = BatchEngine(max_num_seqs=1, batching="static", queue_timeout_ms=100.0)
    for n, t in enumerate((0.0, 0.01, 0.05)):
        engine.add_request(request(n, t))
    plan = engine.begin_step(0.05)
    assert plan is not None and plan.batch == ("r0",)
    engine.end_step(plan)
    assert engine.next_expiry_s() == pytest.approx(0.11)
    assert engine.expire_waiting(0.109) == []
    # r0 runs past its own deadline and is never dropped: only waiting, never-admitted requests
    assert [r.request_id for r in engine.expire_waiting(0.11)] == ["r1"]
    assert [r.request_id for r in engine.waiting] == ["r2"] and [r.request_id for r in engine.running] == ["r0"]
    assert [r.request_id for r in engine.expire_waiting(1.0)] == ["r2"]
    assert engine.next_expiry_s() is None


def test_queue_timeout_needs_the_generic_flavour():
    with pytest.raises(ValueError, match="generic"):
        SimConfig(flavor="vllm", queue_timeout_ms=10.0)


async def _drive(config: SimConfig, users: int) -> list[tuple[int, bytes, float]]:
    stop = asyncio.Event()
    task = asyncio.create_task(serve(config, stop=stop))
    url = f"http://127.0.0.1:{config.port}"
    body = {"prompt": "hello there", "max_new_tokens": 20, "stream": True, "ignore_eos": True}
    async with aiohttp.ClientSession() as session:
        for _ in range(100):
            try:
                async with session.get(url + "/health") as response:
                    if response.status == 200:
                        break
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.05)

        async def one() -> tuple[int, bytes, float]:
            sent = time.perf_counter()
            async with session.post(url + "/generate", json=body) as response:
                data = await response.read()
                return response.status, data, time.perf_counter() - sent

        try:
            return list(await asyncio.gather(*(one() for _ in range(users))))
        finally:
            stop.set()
            await task


def test_requests_queued_past_the_timeout_get_504_and_one_log_line_each(tmp_path):
    log = tmp_path / "server.log"
    # the batcher collects up to 50 ms, so the first two requests form one batch of 2 (20 steps
    # of 20 ms = 0.4 s); the 4 queued behind it wait longer than 150 ms and are dropped
    config = SimConfig(
        port=free_port(),
        flavor="generic",
        max_num_seqs=2,
        batching="static",
        batch_wait_ms=50.0,
        decode_base_ms=20.0,
        decode_per_seq_ms=0.0,
        queue_timeout_ms=150.0,
        stats_log=str(log),
    )
    results = asyncio.run(_drive(config, users=6))
    statuses = sorted(status for status, _, _ in results)
    assert statuses == [200, 200, 504, 504, 504, 504]
    for status, data, elapsed_s in results:
        if status == 504:
            assert b"timed out in queue" in data and 0.14 <= elapsed_s < 0.4
    text = log.read_text()
    waited = [float(ms) for ms in re.findall(r"WARN request req-\d+ timed out in queue after ([\d.]+)ms", text)]
    assert len(waited) == 4 and all(150.0 <= ms < 300.0 for ms in waited)
    # the format file a user writes reads these lines as kind "timeout"
    user = load_user_format(FORMAT_TOML)
    line = "request req-3 timed out in queue after 151.0ms"
    assert any(kind == "timeout" and re.search(pattern, line) for kind, pattern in user.error_patterns)


def _row(error_kinds: str, server_error_kinds: str):
    return next(pd.DataFrame({"error_kinds": [error_kinds], "server_error_kinds": [server_error_kinds]}).itertuples())


def test_a_5xx_the_server_log_says_timed_out_in_queue_is_a_timeout():
    # 6 http_5xx, 4 of them logged "timed out in queue", 2 "queue full": 4 timeouts, 2 rejections
    row = _row("http_5xx:6", "queue_full:2 timeout:4")
    assert client_failures(row) == {"http_5xx": 2, "http_5xx_timed_out": 4}
    assert step_failure_kind(row) is BottleneckKind.TIMEOUTS
    # without server timeout lines every 5xx stays a rejection
    row = _row("http_5xx:6", "queue_full:6")
    assert client_failures(row) == {"http_5xx": 6}
    assert step_failure_kind(row) is BottleneckKind.REJECTIONS
    # more timeout lines than 5xx answers move only the answers there are
    row = _row("http_5xx:1 http_429:3", "timeout:5")
    assert client_failures(row) == {"http_5xx_timed_out": 1, "http_429": 3}
    assert step_failure_kind(row) is BottleneckKind.REJECTIONS
