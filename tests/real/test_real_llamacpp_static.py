"""Static batching, the embedded server's ``--batching static`` against real llama.cpp
``llama-server --no-cont-batching``: the same two requests, the behaviour both must show.

llama.cpp batches pending prompts in only when no slot is decoding (``server-context.cpp``
``update_slots``: ``if (params_base.cont_batching || batch.size() == 0)``), so a request that
arrives while a batch decodes waits for the whole batch to finish, although a slot is free. The
probe: request A (100 tokens) alone, request B (5 tokens) sent 0.3 s later, while A decodes.
Static: B's first token comes after A's last. Continuous (the control, same servers without the
flag): B's first token comes while A still decodes. Measured on this machine's slow model
(2026-12-07): ``--no-cont-batching`` A last token 1.84 s, B first 1.86 s; ``--cont-batching``
A last 2.04 s, B first 0.42 s.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from llm_locust.run.launcher import free_port
from llm_locust.simserver.config import SimConfig
from llm_locust.simserver.server import serve
from tests.real_servers import real_server

pytestmark = [pytest.mark.slow, pytest.mark.real_server]

A_TOKENS, B_TOKENS, B_DELAY_S = 100, 5, 0.3


async def _stream(session, url: str, model: str, max_tokens: int, t0: float) -> list[float]:
    """Arrival instants of the content chunks, s after ``t0``."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
    }
    times: list[float] = []
    async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=60)) as response:
        assert response.status == 200, await response.text()
        async for line in response.content:
            if line.startswith(b"data: {") and b'"content"' in line:
                times.append(time.perf_counter() - t0)
    return times


async def _probe(base_url: str, model: str) -> tuple[list[float], list[float]]:
    """(A's chunk instants, B's chunk instants), s after A was sent."""
    async with aiohttp.ClientSession() as session:
        url = base_url + "/v1/chat/completions"
        await _stream(session, url, model, 2, time.perf_counter())  # warm: first-request costs
        t0 = time.perf_counter()
        a = asyncio.create_task(_stream(session, url, model, A_TOKENS, t0))
        await asyncio.sleep(B_DELAY_S)
        b = asyncio.create_task(_stream(session, url, model, B_TOKENS, t0))
        return await a, await b


async def _probe_sim(batching: str) -> tuple[list[float], list[float]]:
    # the slow model's pace here: ~18 ms per decode step at 1-2 sequences
    config = SimConfig(port=free_port(), flavor="llamacpp", max_num_seqs=4, batching=batching, decode_base_ms=18.0)
    stop = asyncio.Event()
    task = asyncio.create_task(serve(config, stop=stop))
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(100):
                try:
                    async with session.get(f"http://127.0.0.1:{config.port}/health") as response:
                        if response.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.05)
        return await _probe(f"http://127.0.0.1:{config.port}", config.model_name)
    finally:
        stop.set()
        await task


@pytest.fixture(scope="module")
def probes(tmp_path_factory) -> dict[str, tuple[list[float], list[float]]]:
    tmp = tmp_path_factory.mktemp("static")
    out = {}
    env = {"MODEL": "slow", "SLOTS": "4"}
    with real_server("llama-cpp", ["--no-cont-batching"], env, tmp / "static.log") as url:
        out["llamacpp_static"] = asyncio.run(_probe(url, "slow-llama"))
    with real_server("llama-cpp", [], env, tmp / "cont.log") as url:
        out["llamacpp_continuous"] = asyncio.run(_probe(url, "slow-llama"))
    out["sim_static"] = asyncio.run(_probe_sim("static"))
    out["sim_continuous"] = asyncio.run(_probe_sim("continuous"))
    return out


@pytest.mark.parametrize("server", ["llamacpp_static", "sim_static"])
def test_a_request_arriving_while_a_static_batch_decodes_waits_for_all_of_it(probes, server):
    a, b = probes[server]
    assert len(a) >= A_TOKENS * 0.9 and len(b) >= 1, (len(a), len(b))
    # B was sent while A decoded (A's last token well after B was sent) and started after A ended
    assert a[-1] > B_DELAY_S + 0.5, a[-1]
    assert b[0] >= a[-1] - 0.05, (server, b[0], a[-1])


@pytest.mark.parametrize("server", ["llamacpp_continuous", "sim_continuous"])
def test_the_control_continuous_batching_admits_it_at_once(probes, server):
    a, b = probes[server]
    assert b[0] < a[-1] - 0.5, (server, b[0], a[-1])
    assert b[0] - B_DELAY_S < 0.5, (server, b[0])
