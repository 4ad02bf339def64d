"""Static batches, ceilings that did not take effect and rejections, over real HTTP on 127.0.0.1
(the server in this process's event loop, an aiohttp client)."""

from __future__ import annotations

import asyncio
import json
import re
import time

import aiohttp
import pytest

from llm_locust.run.launcher import free_port
from llm_locust.simserver.config import SimConfig
from llm_locust.simserver.server import serve

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)

BODY = {
    "model": "sim-llama",
    "messages": [{"role": "user", "content": "hi"}],
    "max_tokens": 4,
    "stream": True,
    "ignore_eos": True,
}


async def with_server(config: SimConfig, client):
    stop = asyncio.Event()
    task = asyncio.create_task(serve(config, stop=stop))
    url = f"http://127.0.0.1:{config.port}"
    async with aiohttp.ClientSession() as session:
        for _ in range(100):
            try:
                async with session.get(url + "/health") as response:
                    if response.status == 200:
                        break
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.05)
        try:
            return await client(session, url + "/v1/chat/completions")
        finally:
            stop.set()
            await task


async def first_token_s(session, url) -> tuple[int, float]:
    """(status, seconds from sending to the first data line or the error body)."""
    sent = time.perf_counter()
    async with session.post(url, json=BODY) as response:
        if response.status != 200:
            await response.read()
            return response.status, time.perf_counter() - sent
        async for line in response.content:
            if line.startswith(b"data: {") and b'"content"' in line:
                first = time.perf_counter() - sent
                await response.read()
                return 200, first
    return 200, float("nan")


def test_a_lone_request_waits_the_batch_wait_and_the_batch_is_logged(tmp_path):
    log = tmp_path / "server.log"
    config = SimConfig(
        port=free_port(),
        flavor="generic",
        max_num_seqs=4,
        batching="static",
        batch_wait_ms=300.0,
        decode_base_ms=5.0,
        stats_log=str(log),
    )

    async def client(session, url):
        return await first_token_s(session, url)

    status, ttft_s = asyncio.run(with_server(config, client))
    assert status == 200 and 0.3 <= ttft_s < 0.6
    text = log.read_text()
    assert "batching=static, max_batch_wait_ms=300" in text
    waits = [float(w) for w in re.findall(r"batch started size=1 wait=([\d.]+)ms queue=0", text)]
    assert len(waits) == 1 and 299.0 <= waits[0] < 400.0


def test_full_batches_start_at_once(tmp_path):
    config = SimConfig(
        port=free_port(), flavor="generic", max_num_seqs=2, batching="static", batch_wait_ms=5000.0, decode_base_ms=5.0
    )

    async def client(session, url):
        return await asyncio.gather(first_token_s(session, url), first_token_s(session, url))

    results = asyncio.run(with_server(config, client))
    assert [status for status, _ in results] == [200, 200]
    assert max(t for _, t in results) < 1.0  # the batch filled: no 5 s wait


@pytest.mark.parametrize(
    "flavor, status, expected",
    [
        ("vllm", 503, {"type": "ServiceUnavailable", "code": 503}),
        ("tgi", 429, {"error": "Model is overloaded", "error_type": "overloaded"}),
    ],
)
def test_a_full_queue_answers_the_configured_status(flavor, status, expected):
    # one slot, nothing queued beyond it: the second of two concurrent requests is refused
    config = SimConfig(
        port=free_port(), flavor=flavor, max_num_seqs=1, max_queue=1, reject_status=status, decode_base_ms=100.0
    )

    async def client(session, url):
        async def post():
            async with session.post(url, json=BODY) as response:
                return response.status, await response.read()

        return await asyncio.gather(post(), post(), post())

    results = asyncio.run(with_server(config, client))
    refused = [json.loads(body) for code, body in results if code == status]
    assert sorted(code for code, _ in results) == sorted([200, 200, status])
    body = refused[0].get("error") if flavor == "vllm" else refused[0]
    assert {k: body[k] for k in expected} == expected


def test_the_effective_ceiling_serialises_requests(tmp_path):
    log = tmp_path / "server.log"
    config = SimConfig(
        port=free_port(), max_num_seqs=8, effective_max_num_seqs=1, decode_base_ms=50.0, stats_log=str(log)
    )

    async def client(session, url):
        return await asyncio.gather(*[first_token_s(session, url) for _ in range(3)])

    results = sorted(t for _, t in asyncio.run(with_server(config, client)))
    # 4 tokens of ~50 ms each: the second request starts after the first finished
    assert results[1] - results[0] > 0.15 and results[2] - results[1] > 0.15
    assert "'max_num_seqs': 8" in log.read_text()
