"""Every failure kind, through the real HTTP stack: in the record, in Locust's failure table, and
in the client report (the LLM stats). Tokens received before a failure stay in the record; a
request that produced no token has no TTFT (NaN, never 0)."""

from __future__ import annotations

import json
import math
import socket

import pytest

from llm_locust.master.clientreport import ClientReport
from tests.conftest import STAMP_TOLERANCE_MS, LoopLag, server_log, stop
from tests.locust_env import make_user
from tests.scripted_server import sse_script
from tests.sse_payloads import DONE, chat, sse, usage_chunk

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)

ROLE, A, B = sse(chat(role=True)), sse(chat("a")), sse(chat("b"))


def http_error(status: str, body: str, content_type: str = "application/json") -> dict:
    return {"writes": [[0.0, f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: "
                             f"{len(body.encode())}\r\nConnection: close\r\n\r\n{body}"]]}  # fmt: skip


ERROR_OBJECT = sse({"error": {"message": "engine died", "type": "InternalServerError", "code": 500}})

# (case, script, extra options, kind, status, message part, token events kept, failure at write index)
CASES = [
    ("http 429", http_error("429 Too Many Requests", '{"error": {"message": "queue full", "code": 429}}'),
     [], "http_429", 429, "HTTP 429 queue full", 0, None),
    ("http 503", http_error("503 Service Unavailable", '{"detail": "engine is restarting"}'),
     [], "http_5xx", 503, "HTTP 503 engine is restarting", 0, None),
    ("http 400 vLLM body", http_error("400 Bad Request", '{"error":{"message":"max_tokens=5000 cannot be greater '
                                      'than max_model_len=2048.","type":"BadRequestError","code":400}}'),
     [], "http_4xx", 400, "HTTP 400 max_tokens=5000 cannot be greater than max_model_len=2048.", 0, None),
    ("http 500 text body", http_error("500 Internal Server Error", "oops " * 100, "text/plain"),
     [], "http_5xx", 500, "HTTP 500 oops oops", 0, None),
    ("error object in a 200 stream", sse_script([(0.02, ROLE), (0.02, A), (0.02, ERROR_OBJECT), (0.0, DONE)]),
     [], "stream_error", 200, "engine died", 1, 3),
    ("event: error in a 200 stream", sse_script([(0.02, A), (0.02, "event: error\ndata: overloaded\n\n"), (0.0, DONE)]),
     [], "stream_error", 200, "overloaded", 1, 2),
    ("bare error: field", sse_script([(0.02, A), (0.02, B), (0.02, 'error: {"message": "oom"}\n\n')]),
     [], "stream_error", 200, "oom", 2, 3),
    ("error before any token", sse_script([(0.02, ROLE), (0.02, ERROR_OBJECT)]),
     [], "stream_error", 200, "engine died", 0, 2),
    ("truncated: no [DONE] nor finish_reason", sse_script([(0.02, ROLE), (0.02, A), (0.02, B)]),
     [], "truncated", 200, "without [DONE]", 2, None),
    ("truncated inside the last event", sse_script([(0.02, A), (0.02, B[:-1])]),
     [], "truncated", 200, "without [DONE]", 1, None),
    ("unparseable payload", sse_script([(0.02, A), (0.02, "data: {not json\n\n"), (0.0, DONE)]),
     [], "bad_response", 200, "unparseable event", 1, 2),
    # valid JSON that is not the protocol's: the payload's fault, never a crash nor a count
    ("choices not a list", sse_script([(0.02, A), (0.02, 'data: {"choices": {"0": 1}}\n\n'), (0.0, DONE)]),
     [], "bad_response", 200, "KeyError", 1, 2),
    ("usage not an object", sse_script([(0.02, A), (0.02, sse({"choices": [], "usage": 5})), (0.0, DONE)]),
     [], "bad_response", 200, "usage is not a JSON object: 5", 1, 2),
    ("negative completion_tokens", sse_script([(0.02, A), (0.02, sse(usage_chunk(3, -3))), (0.0, DONE)]),
     [], "bad_response", 200, "usage.completion_tokens is not a token count: -3", 1, 2),
    ("completion_tokens 1e300", sse_script([(0.02, A), (0.02, 'data: {"choices": [], "usage": '
                                            '{"completion_tokens": 1e300}}\n\n'), (0.0, DONE)]),
     [], "bad_response", 200, "usage.completion_tokens is not a token count: 1e+300", 1, 2),
    ("prompt_tokens a string", sse_script([(0.02, A), (0.02, sse({"choices": [], "usage": {"prompt_tokens": "x"}})),
                                           (0.0, DONE)]),
     [], "bad_response", 200, "usage.prompt_tokens is not a token count: 'x'", 1, 2),
    ("continuous usage as a string", sse_script([(0.02, sse(chat("a", usage={"completion_tokens": 1}))),
                                                 (0.02, sse(chat("b", usage={"completion_tokens": "2"}))), (0.0, DONE)]),
     ["--continuous-usage", "true"], "bad_response", 200, "usage.completion_tokens is not a token count: '2'", 1, 2),
    ("TGI token text a number", sse_script([(0.02, 'data: {"token": {"id": 1, "text": "a", "special": false}}\n\n'),
                                            (0.02, 'data: {"token": {"id": 2, "text": 5, "special": false}}\n\n')]),
     ["--protocol", "tgi"], "bad_response", 200, "generated text is not a string: 5", 1, 2),
    ("200 without SSE", http_error("200 OK", '{"choices": [{"message": {"content": "hi"}}]}'),
     [], "bad_response", 200, "no SSE event", 0, None),
    ("closed mid-stream", sse_script([(0.02, ROLE), (0.02, A)], end=False),
     [], "connection_error", 200, "closed", 1, None),
    ("reset mid-stream", sse_script([(0.02, ROLE), (0.02, A), (0.02, {"reset": True})], end=False),
     [], "connection_error", 200, "", 1, None),
    ("ttft timeout: headers, then nothing", sse_script([(0.02, ROLE), (1.0, A)]),
     ["--ttft-timeout-s", "0.2"], "ttft_timeout", 200, "no token within 0.2 s", 0, None),
    ("ttft timeout: no headers", {"writes": [[1.0, "HTTP/1.1 200 OK\r\n\r\n"]]},
     ["--ttft-timeout-s", "0.2"], "ttft_timeout", 0, "no token within 0.2 s", 0, None),
    ("stall timeout", sse_script([(0.02, A), (0.05, B), (1.0, sse(chat("c", finish="length"))), (0.0, DONE)]),
     ["--stall-timeout-s", "0.2"], "stall_timeout", 200, "no event for 0.2 s", 2, None),
    ("total timeout", sse_script([(0.05, A)] + [(0.05, B)] * 20 + [(0.0, DONE)]),
     ["--total-timeout-s", "0.3"], "total_timeout", 200, "longer than 0.3 s", 5, None),
]  # fmt: skip


@pytest.mark.parametrize(("case", "script", "args", "kind", "status", "message", "tokens", "at"), CASES,
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_failure_kinds(scripted_server, shared_reader, case, script, args, kind, status, message, tokens, at):
    url, process = scripted_server(script)
    user, environment, fired = make_user(url, *args, shared_reader=shared_reader)

    record = user.send("hi")
    stop(process)
    log = server_log(process)

    assert (record.error_kind, record.status_code) == (kind, status), record.error_message
    assert message in record.error_message and len(record.error_message) <= 200
    assert record.content_events == tokens
    if tokens:
        assert record.ttft_ms > 0 and record.output_tokens >= 1  # kept in the record
    else:
        assert math.isnan(record.ttft_ms) and not record.token_times_us
    if at is not None:  # the failure is stamped when the event that carried it arrived
        assert record.e2e_ms == pytest.approx((log["sent"][at] - record.t_start_s) * 1000, abs=STAMP_TOLERANCE_MS)
    # exactly one Locust request event, a failure whose table entry names the kind
    assert len(fired) == 1 and str(fired[0]["exception"]).startswith(kind + ":")
    entry = environment.stats.errors[next(iter(environment.stats.errors))]
    assert str(entry.error).startswith(kind + ":") and entry.occurrences == 1
    # and the client report counts it by kind, with the HTTP code kept
    report = ClientReport(environment)
    report.add_rows([record.to_row()])
    summary = report.summary()
    assert summary["failures_by_kind"] == {kind: 1} and summary["successes"] == 0
    assert summary["latency_ms"]["ttft"]["count"] == 0  # failures never enter success statistics
    if status not in (0, 200):
        assert summary["failures_by_status"] == {str(status): 1}


NO_TOKEN = [(0.02, ROLE), (2.0, A)]  # headers at once, a role chunk, then silence for 2 s
ONE_TOKEN = [(0.05, A), (2.0, B)]  # headers at once, the first token 50 ms later, then silence


@pytest.mark.parametrize(("case", "events", "args", "kind", "after_write", "expected_ms"), [
    ("ttft", NO_TOKEN, ["--ttft-timeout-s", "0.2"], "ttft_timeout", None, 200),
    ("total before ttft", NO_TOKEN, ["--ttft-timeout-s", "5", "--total-timeout-s", "0.15"], "total_timeout", None, 150),
    ("stall, TTFT deadline far away", ONE_TOKEN, ["--stall-timeout-s", "0.2"], "stall_timeout", 1, 200),
    ("stall, no TTFT timeout", ONE_TOKEN, ["--ttft-timeout-s", "0", "--stall-timeout-s", "0.2"], "stall_timeout", 1, 200),
    ("total after the first token", ONE_TOKEN, ["--total-timeout-s", "0.3"], "total_timeout", None, 300),
])  # fmt: skip
def test_timeouts_fire_on_time(scripted_server, shared_reader, case, events, args, kind, after_write, expected_ms):
    """Measured from the send, or (stall) from the server's send stamp of the last event."""
    url, process = scripted_server(sse_script(events))
    user, _, _ = make_user(url, *args, shared_reader=shared_reader)

    with LoopLag() as lag:
        record = user.send("hi")
    stop(process)
    log = server_log(process)

    assert record.error_kind == kind
    start_ms = 0.0 if after_write is None else (log["sent"][after_write] - record.t_start_s) * 1000
    # never early; late by no more than the loop itself was (a timer fires when the process runs)
    assert record.e2e_ms >= start_ms + expected_ms - STAMP_TOLERANCE_MS
    assert record.e2e_ms == pytest.approx(start_ms + expected_ms, abs=STAMP_TOLERANCE_MS * 2 + lag.max_ms)


def test_connect_timeout():
    # a listener with a full accept queue: the kernel drops the SYN, connect() never completes
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    filler = socket.create_connection(listener.getsockname(), timeout=1)
    try:
        user, _, fired = make_user(f"http://127.0.0.1:{listener.getsockname()[1]}", "--connect-timeout-s", "0.2")
        record = user.send("hi")
    finally:
        filler.close()
        listener.close()

    assert (record.error_kind, record.status_code) == ("connect_timeout", 0)
    assert record.e2e_ms == pytest.approx(200, abs=20)
    assert math.isnan(record.ttft_ms) and math.isnan(record.headers_ms)
    assert len(fired) == 1


def test_connect_refused_is_a_connection_error_without_ttft():
    user, _, fired = make_user("http://127.0.0.1:9")  # discard port: nothing listens on loopback

    record = user.send("hi")

    assert record.error_kind == "connection_error"
    assert record.status_code == 0
    assert math.isnan(record.ttft_ms) and math.isnan(record.headers_ms)
    assert len(fired) == 1


def test_default_timeouts_never_fail_a_slow_healthy_stream(scripted_server):
    # 1.5 s before the first token, 0.6 s gaps: slow, but healthy
    url, _ = scripted_server(sse_script([(1.5, A), (0.6, B), (0.6, sse(chat("c", finish="length"))), (0.0, DONE)]))
    user, _, _ = make_user(url)

    record = user.send("hi")

    assert record.ok, record.error_message
    assert json.loads(json.dumps(record.to_row()))  # the row is plain data
