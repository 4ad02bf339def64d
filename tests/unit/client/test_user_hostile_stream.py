"""A server that sends an SSE event far larger than any LLM chunk (10 MB), or bytes that never end a
line: the client stops reading at :data:`~llm_locust.client.stream.MAX_EVENT_BYTES` held, records
``bad_response`` with the tokens before it kept, closes that connection, and the user's next
request goes on normally (issue 14)."""

from __future__ import annotations

import time

import pytest

from llm_locust.client.stream import MAX_EVENT_BYTES
from tests.conftest import stop
from tests.locust_env import make_user
from tests.scripted_server import sse_script
from tests.sse_payloads import DONE, chat, sse, usage_chunk

A, B = sse(chat("a")), sse(chat("b"))
TEN_MB = {"repeat": "x" * 1024, "times": 10 * 1024}
GOOD = sse_script([(0.01, A), (0.01, B), (0.01, sse(chat("", finish="length"))), (0.0, sse(usage_chunk(3, 2))),
                   (0.0, DONE)])  # fmt: skip
HOLD_S = 20.0
"""After its hostile bytes the server holds the connection this long: a client that has not
bounded its buffer would wait for it (or be read out by the close), never fail in time."""

HOSTILE = {
    # one event of 10 MB, then a clean end: the event is well-formed but beyond any LLM chunk
    "10 MB event": [(0.01, A), (0.01, 'data: {"choices": [{"index": 0, "delta": {"content": "'), (0.0, TEN_MB),
                    (0.0, '"}}]}\n\n'), (HOLD_S, DONE)],
    # a line that never ends: 10 MB with no line end at all
    "line never ends": [(0.01, A), (0.01, "data: "), (0.0, TEN_MB), (HOLD_S, "\n\n")],
    # an event of many short data lines that never ends (LF but never the blank line)
    "event never ends": [(0.01, A), (0.0, {"repeat": "data: " + "y" * 58 + "\n", "times": 160 * 1024}),
                         (HOLD_S, "\n")],
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_an_oversized_event_is_a_bad_response_and_the_user_goes_on(scripted_server, shared_reader, case):
    script = sse_script(HOSTILE[case], framing="close")
    script["later_connections"] = GOOD["writes"]
    url, process = scripted_server(script)
    user, environment, fired = make_user(url, shared_reader=shared_reader)

    started = time.perf_counter()
    hostile = user.send("hi")
    elapsed_s = time.perf_counter() - started
    after = user.send("hi")
    stop(process)

    assert hostile.error_kind == "bad_response", hostile.error_message
    assert f"longer than {MAX_EVENT_BYTES} bytes" in hostile.error_message
    assert hostile.status_code == 200 and hostile.content_events == 1  # the token before it is kept
    assert elapsed_s < HOLD_S / 2  # it stopped reading; it did not wait for the server's end
    # the next request, on a new connection, is measured as usual
    assert (after.error_kind, after.content_events, after.output_tokens) == ("", 2, 2), after.error_message
    assert [str(e["exception"]).split(":")[0] for e in fired] == ["bad_response", "None"]


def test_an_event_just_under_the_bound_is_read(scripted_server, shared_reader):
    """The bound refuses only what is beyond it: an event of nearly MAX_EVENT_BYTES is framed and
    interpreted like any other (its text counts as one token event)."""
    text = "z" * (MAX_EVENT_BYTES - 200)
    events = [(0.01, sse(chat(text))), (0.01, sse(chat("", finish="length"))), (0.0, DONE)]
    url, process = scripted_server(sse_script(events, framing="close"))
    user, _, _ = make_user(url, shared_reader=shared_reader)

    record = user.send("hi")
    stop(process)

    assert record.error_kind == "", record.error_message
    assert record.content_events == 1
