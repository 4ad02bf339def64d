"""``--tokens-per-chunk``: the embedded server writes several tokens per SSE chunk, and
``stream_options.continuous_usage_stats`` puts the running totals in every chunk (vLLM's
``should_include_usage``: only together with ``include_usage``). One server, 3 tokens a chunk,
20 ms steps."""

from __future__ import annotations

import json
import time

import pytest

from llm_locust.simserver.text import TokenTextGenerator
from tests.unit.simserver.test_simserver_http import CHAT, post, sse_events, start_server, stop_server

STEP_S = 0.020


@pytest.fixture(scope="module")
def port():
    proc, port = start_server("--tokens-per-chunk", "3", "--decode-base-ms", "20", "--decode-per-seq-ms", "0",
                              "--prefill-ms-per-token", "0")  # fmt: skip
    try:
        yield port
    finally:
        stop_server(proc)


def _chunks(raw: bytes) -> list[dict]:
    return [json.loads(p) for p in sse_events(raw) if p != b"[DONE]"]


def test_tokens_are_written_three_to_a_chunk_with_running_usage(port):
    stream_options = {"include_usage": True, "continuous_usage_stats": True}
    body = {"messages": CHAT, "max_tokens": 8, "stream": True, "stream_options": stream_options}
    status, raw = post(port, "/v1/chat/completions", body)
    assert status == 200
    chunks = _chunks(raw)
    role, tokens, final = chunks[0], chunks[1:-1], chunks[-1]
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert role["usage"]["completion_tokens"] == 0
    assert [c["usage"]["completion_tokens"] for c in tokens] == [3, 6, 8]  # 3 + 3 + the last 2
    assert [c["choices"][0]["finish_reason"] for c in tokens] == [None, None, "length"]
    prompt = final["usage"]["prompt_tokens"]
    assert all(c["usage"]["total_tokens"] == prompt + c["usage"]["completion_tokens"] for c in tokens)
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == 8
    # the texts are the 8 tokens a token-by-token stream of the same request would carry (its
    # arrival number depends on the tests run before it on this server)
    text = "".join(c["choices"][0]["delta"]["content"] for c in tokens)
    streams = [TokenTextGenerator(seed=0, request_number=n) for n in range(1, 8)]
    assert text in ["".join(g.next_token() for _ in range(8)) for g in streams]


def test_without_continuous_usage_no_chunk_but_the_last_has_usage(port):
    body = {"prompt": "Once upon a time", "max_tokens": 7, "stream": True, "stream_options": {"include_usage": True}}
    status, raw = post(port, "/v1/completions", body)
    chunks = _chunks(raw)
    assert status == 200
    assert ["usage" in c for c in chunks] == [False, False, False, True]  # 3 + 3 + 1, then usage
    # continuous_usage_stats alone (no include_usage) changes nothing, as in vLLM
    body["stream_options"] = {"continuous_usage_stats": True}
    _, raw = post(port, "/v1/completions", body)
    assert ["usage" in c for c in _chunks(raw)] == [False, False, False]


def test_a_chunk_waits_for_its_three_tokens(port):
    started = time.perf_counter()
    conn_body = {"messages": CHAT, "max_tokens": 3, "stream": True}
    status, raw = post(port, "/v1/chat/completions", conn_body)
    elapsed_s = time.perf_counter() - started
    assert status == 200 and len(_chunks(raw)) == 2  # role, then one chunk of 3 tokens
    assert elapsed_s >= 3 * STEP_S * 0.9
