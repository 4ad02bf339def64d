"""``--protocol generic``, ``--no-stream`` and server timings, through the real HTTP stack against
scripted loopback servers. Expected values are worked out by hand from each script; instants
against the server's own send stamps (``SENT`` lines)."""

from __future__ import annotations

import json
import math

import pytest

from llm_locust.options import check_protocol
from tests.conftest import STAMP_TOLERANCE_MS, fixture_path, server_log, stop
from tests.locust_env import make_user
from tests.scripted_server import sse_script

FORMAT = """
[request]
path = "/v2/infer"
[request.body]
input = "Q: {prompt}"
params = { limit = "{max_tokens}", stream = "{stream}", greedy = true }

[response]
framing = "jsonl"
text = "out.piece"
finish_reason = "done_reason"
tokens = "usage.generated"
error = "err.msg"
[response.timings]
server_queue_ms = "t.queue"
server_prompt_ms = "t.prefill"
server_decode_ms = "t.decode"
"""


def format_file(tmp_path, text: str = FORMAT, **replace: str):
    for old, new in replace.items():
        text = text.replace(old, new)
    path = tmp_path / "proto.toml"
    path.write_text(text)
    return str(path)


def line(value: dict) -> str:
    return json.dumps(value) + "\n"


def stamps_ms(record, log: dict, write_index: int) -> float:
    return (log["sent"][write_index] - record.t_start_s) * 1000.0


def test_jsonl_stream_timed_per_line_with_body_from_the_template(scripted_server, tmp_path):
    final = {"out": {"piece": "!"}, "done_reason": "length", "usage": {"generated": 3},
             "t": {"queue": 12.5, "prefill": 40.0, "decode": 61.0}}  # fmt: skip
    events = [(0.05, line({"out": {"piece": "Hel"}})), (0.03, line({"out": {"piece": "lo"}}) + line({"hb": 1})),
              (0.03, line(final))]  # fmt: skip
    url, process = scripted_server(sse_script(events, content_type="application/jsonl"))
    user, _, _ = make_user(
        url, "--protocol", "generic", "--protocol-format", format_file(tmp_path), "--max-tokens", "3"
    )

    record = user.send("Why?")
    stop(process)
    log = server_log(process)

    assert record.ok, record.error_message
    assert log["requests"][0].startswith("POST /v2/infer ")
    assert json.loads(log["bodies"][0]) == {"input": "Q: Why?", "params": {"limit": 3, "stream": True, "greedy": True}}
    assert record.ttft_ms == pytest.approx(stamps_ms(record, log, 1), abs=STAMP_TOLERANCE_MS)
    assert record.e2e_ms == pytest.approx(stamps_ms(record, log, 3), abs=STAMP_TOLERANCE_MS)
    assert (record.content_events, record.output_tokens, record.tokens_source) == (3, 3, "usage")
    assert record.finish_reason == "length" and record.max_tokens == 3
    assert (record.server_queue_ms, record.server_prompt_ms, record.server_decode_ms) == (12.5, 40.0, 61.0)
    assert math.isnan(record.server_prompt_tokens)


def test_one_json_body_records_e2e_and_tokens_and_no_ttft(scripted_server, tmp_path):
    body = json.dumps({"out": {"piece": "Hello world"}, "done_reason": "stop", "usage": {"generated": 2}})
    events = [(0.08, body[:20]), (0.04, body[20:])]
    url, process = scripted_server(sse_script(events, content_type="application/json", framing="length"))
    fmt = format_file(tmp_path, **{'framing = "jsonl"': 'framing = "json"'})
    user, _, _ = make_user(url, "--protocol", "generic", "--protocol-format", fmt)

    record = user.send("Why?")
    stop(process)
    log = server_log(process)

    assert record.ok, record.error_message
    assert json.loads(log["bodies"][0])["params"]["stream"] is False
    assert math.isnan(record.ttft_ms) and math.isnan(record.first_answer_ms)  # not streamed: never faked
    assert record.token_times_us == "" and record.content_events == 0
    assert record.e2e_ms == pytest.approx(stamps_ms(record, log, 2), abs=STAMP_TOLERANCE_MS)
    assert (record.output_tokens, record.tokens_source, record.finish_reason) == (2, "usage", "stop")


def test_error_after_200_is_a_stream_error(scripted_server, tmp_path):
    events = [(0.02, line({"out": {"piece": "a"}})), (0.02, line({"err": {"msg": "engine died"}}))]
    url, _ = scripted_server(sse_script(events, content_type="application/jsonl"))
    user, _, _ = make_user(url, "--protocol", "generic", "--protocol-format", format_file(tmp_path))

    record = user.send("x")

    assert (record.error_kind, record.error_message) == ("stream_error", "engine died")
    assert record.content_events == 1  # what came before the error is kept


def test_jsonl_cut_mid_message_is_a_connection_error(scripted_server, tmp_path):
    events = [(0.02, line({"out": {"piece": "a"}})), (0.02, {"close": True})]
    url, _ = scripted_server(sse_script(events, content_type="application/jsonl", end=False))
    user, _, _ = make_user(url, "--protocol", "generic", "--protocol-format", format_file(tmp_path))

    record = user.send("x")

    assert record.error_kind == "connection_error" and record.content_events == 1


def test_openai_chat_no_stream_reads_the_message_body(scripted_server):
    body = json.dumps({"id": "chatcmpl-9", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi there"},
                       "finish_reason": "length"}], "usage": {"prompt_tokens": 5, "completion_tokens": 4}})  # fmt: skip
    url, process = scripted_server(sse_script([(0.05, body)], content_type="application/json", framing="length"))
    user, _, _ = make_user(url, "--no-stream", "--max-tokens", "4")

    record = user.send("hi")
    stop(process)
    log = server_log(process)

    sent = json.loads(log["bodies"][0])
    assert sent["stream"] is False and "stream_options" not in sent
    assert record.ok and math.isnan(record.ttft_ms)
    assert (record.output_tokens, record.prompt_tokens, record.response_id) == (4, 5.0, "chatcmpl-9")
    assert record.e2e_ms == pytest.approx(stamps_ms(record, log, 1), abs=STAMP_TOLERANCE_MS)


def test_llama_cpp_timings_of_the_captured_stream_are_recorded(scripted_server):
    text = fixture_path("llama-cpp-b1-0c1e570", "sse_chat_stream.txt").read_text()
    raw_events = [e + "\n\n" for e in text.split("\n\n") if e.strip()]
    timings = next(json.loads(e[6:])["timings"] for e in raw_events if '"timings"' in e)
    url, _ = scripted_server(sse_script([(0.005, e) for e in raw_events]))
    user, _, _ = make_user(url)

    record = user.send("hi")

    assert record.ok
    assert (record.server_prompt_ms, record.server_prompt_tokens) == (timings["prompt_ms"], timings["prompt_n"])
    assert (record.server_decode_ms, record.server_decode_tokens) == (timings["predicted_ms"], timings["predicted_n"])
    assert math.isnan(record.server_queue_ms)  # llama.cpp does not report the wait for a slot


@pytest.mark.parametrize(
    ("replace", "message"),
    [
        ({'framing = "jsonl"': 'framing = "xml"'}, "[response] framing: must be one of sse, jsonl, json"),
        ({'text = "out.piece"\n': ""}, "[response] text: missing"),
        ({'input = "Q: {prompt}"': 'input = "{promt}"'}, "[request.body].input: unknown placeholder {promt}"),
        ({'input = "Q: {prompt}"': 'input = "fixed"'}, "no {prompt} placeholder"),
        ({'path = "/v2/infer"': 'path = "v2"'}, "[request] path: must be a string starting with '/'"),
        ({'tokens = "usage.generated"': 'tokens = "usage..generated"'}, "[response] tokens:"),
        ({'server_queue_ms = "t.queue"': 'queue_ms = "t.queue"'}, "[response.timings] unknown key 'queue_ms'"),
        ({"[response]\n": "[respons]\n"}, "unknown table [respons]"),
        ({"[request]": "[request"}, "not TOML"),
        ({"greedy = true": "greedy = true, temp = nan"}, "[request.body].params.temp: nan is not a JSON number"),
        ({"greedy = true": "greedy = true, top = -inf"}, "[request.body].params.top: -inf is not a JSON number"),
        ({"greedy = true": "greedy = true, seed = 2026-12-04"}, "[request.body].params.seed: a TOML date or time"),
    ],
)
def test_malformed_format_file_is_refused_naming_the_key(tmp_path, replace, message):
    path = format_file(tmp_path, **replace)

    with pytest.raises(ValueError) as caught:
        check_protocol("generic", path, False)

    assert message in str(caught.value) and path in str(caught.value)


def test_protocol_and_flag_combinations_are_checked(tmp_path):
    with pytest.raises(ValueError, match="needs --protocol-format"):
        check_protocol("generic", "", False)
    with pytest.raises(ValueError, match='set framing = "json"'):
        check_protocol("generic", format_file(tmp_path), True)
    with pytest.raises(ValueError, match="is for --protocol generic, not tgi"):
        check_protocol("tgi", format_file(tmp_path), False)
    for protocol in ("openai-chat", "openai-completions", "tgi"):
        check_protocol(protocol, "", True)  # each has a non-streamed form


def test_tgi_no_stream_reads_the_body_and_the_timing_headers(scripted_server):
    body = json.dumps({"generated_text": "Hi there", "details": {"finish_reason": "length", "generated_tokens": 4}})
    head = (
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
        "x-compute-type: gpu+optimized\r\nx-total-time: 480\r\nx-validation-time: 1\r\nx-queue-time: 37\r\n"
        "x-inference-time: 442\r\nx-time-per-token: 110\r\nx-prompt-tokens: 9\r\nx-generated-tokens: 4\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    url, process = scripted_server({"writes": [[0.05, head + body], [0.0, {"close": True}]]})
    user, _, _ = make_user(url, "--protocol", "tgi", "--no-stream", "--max-tokens", "4")

    record = user.send("hi")
    stop(process)
    log = server_log(process)

    assert log["requests"][0].startswith("POST /generate ")
    assert record.ok and math.isnan(record.ttft_ms)
    assert (record.output_tokens, record.tokens_source, record.finish_reason) == (4, "usage", "length")
    assert (record.server_queue_ms, record.server_prompt_tokens, record.server_decode_tokens) == (37.0, 9.0, 4.0)
    assert math.isnan(record.server_prompt_ms) and math.isnan(record.server_decode_ms)
