"""The client knobs through the real HTTP stack: keep-alive on and off, connections per worker
(the wait for a connection recorded apart from TTFT), a payload file sent verbatim."""

from __future__ import annotations

import json
import subprocess

import gevent
import pytest

from tests.conftest import STAMP_TOLERANCE_MS, server_log, stop
from tests.locust_env import make_user, make_users
from tests.scripted_server import sse_script
from tests.sse_payloads import DONE, chat, sse

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)

STREAM = [(0.02, sse(chat(role=True))), (0.02, sse(chat("a"))), (0.1, sse(chat("b", finish="length"))), (0.0, DONE)]


@pytest.mark.parametrize(("keep_alive", "connections"), [("true", 1), ("false", 3)])
def test_keep_alive_on_reuses_one_connection_off_opens_one_per_request(scripted_server, keep_alive, connections):
    url, process = scripted_server(sse_script(STREAM, keep_alive=True))
    user, _, _ = make_user(url, "--keep-alive", keep_alive)

    records = [user.send("hi") for _ in range(3)]
    stop(process)
    log = server_log(process)

    assert all(r.ok for r in records), [r.error_message for r in records]
    assert log["connections"] == connections == user.pool.opened
    assert [r.connect_ms == r.connect_ms for r in records] == (
        [True, False, False] if keep_alive == "true" else [True] * 3
    )


def test_server_closing_idle_keep_alive_connection_is_not_a_failure(scripted_server):
    # the server says keep-alive but closes after each answer (llama.cpp does this after a while)
    script = sse_script(STREAM, keep_alive=False)
    script["writes"][0][1] = script["writes"][0][1].replace("Connection: close", "Connection: keep-alive")
    url, process = scripted_server(script)
    user, _, _ = make_user(url)

    records = []
    for _ in range(3):
        records.append(user.send("hi"))
        gevent.sleep(0.05)  # the FIN arrives while the connection is idle
    stop(process)

    assert all(r.ok for r in records), [r.error_message for r in records]


def test_fewer_connections_than_users_waits_apart_from_ttft(scripted_server):
    url, process = scripted_server(sse_script(STREAM, keep_alive=True))
    users, _, fired = make_users(url, 2, "--connections", "1")

    first, second = gevent.spawn(users[0].send, "hi"), gevent.spawn(users[1].send, "hi")
    gevent.joinall([first, second], timeout=10)
    stop(process)
    log = server_log(process)

    a, b = sorted([first.value, second.value], key=lambda r: r.conn_wait_ms)
    assert a.ok and b.ok and log["connections"] == 1
    # the host's wake-up delay bounds every in-process stamp (STAMP_TOLERANCE_MS: 5-15 ms); a
    # TTFT that counted the wait would be off by the first request's whole E2E (~140 ms)
    tolerance_ms = 2 * STAMP_TOLERANCE_MS
    assert a.conn_wait_ms == pytest.approx(0, abs=STAMP_TOLERANCE_MS)
    # the second waited the whole first request (its E2E) for the connection, and its TTFT excludes that wait
    assert b.conn_wait_ms == pytest.approx(a.e2e_ms, abs=tolerance_ms)
    assert b.ttft_ms == pytest.approx(a.ttft_ms, abs=tolerance_ms)
    assert a.e2e_ms > 3 * tolerance_ms  # the script's 140 ms: the bounds above tell the two apart
    assert b.t_start_s >= a.t_start_s + a.e2e_ms / 1000 - STAMP_TOLERANCE_MS / 1000
    assert len(fired) == 2


def test_payload_file_is_sent_verbatim(scripted_server, tmp_path):
    body = b'{"model": "mine", "messages": [{"role": "user", "content": "fixed"}], "stream": true,\n "max_tokens": 2}'
    (tmp_path / "payload.json").write_bytes(body)
    url, process = scripted_server(sse_script(STREAM))
    user, _, _ = make_user(url, "--payload-file", str(tmp_path / "payload.json"))

    record = user.send("ignored")
    stop(process)
    log = server_log(process)

    assert log["bodies"] == [body]
    assert record.ok and record.max_tokens == 2 and record.ignore_eos_violated == 0


def test_payload_file_with_a_prompt_list(scripted_server, tmp_path):
    (tmp_path / "prompts.json").write_text(json.dumps(["first prompt", "second prompt"]))
    url, process = scripted_server(sse_script(STREAM, keep_alive=True))
    user, _, _ = make_user(url, "--payload-file", str(tmp_path / "prompts.json"))

    user.stream_one()
    user.stream_one()
    stop(process)
    log = server_log(process)

    sent = sorted(json.loads(b)["messages"][0]["content"] for b in log["bodies"])
    assert sent == ["first prompt", "second prompt"]


def test_api_key_goes_in_the_header_only(scripted_server):
    url, _ = scripted_server(sse_script(STREAM))
    user, _, _ = make_user(url, "--api-key", "sk-test-123")

    request = user.build_request("hi")

    assert b"Authorization: Bearer sk-test-123\r\n" in request
    assert b"sk-test" not in request.split(b"\r\n\r\n", 1)[1]


def test_https_target(scripted_server, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    made = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                           str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"], capture_output=True)  # fmt: skip
    if made.returncode != 0:
        pytest.skip("no openssl to make a test certificate")
    script = sse_script(STREAM, keep_alive=True)
    script["tls"] = {"cert": str(cert), "key": str(key)}
    url, process = scripted_server(script)
    user, _, _ = make_user(url.replace("http://", "https://"))

    records = [user.send("hi") for _ in range(2)]
    stop(process)
    log = server_log(process)

    assert all(r.ok for r in records), [r.error_message for r in records]
    assert records[-1].ttft_ms == pytest.approx((log["sent"][2] - records[-1].t_start_s) * 1000, abs=5)
    assert log["connections"] == 1  # kept alive over TLS too


@pytest.mark.parametrize("unanswered", ["close", "reset"])
def test_kept_alive_connection_closed_unanswered_sends_the_request_again(scripted_server, unanswered):
    # one answer per connection, then the next request is read and the connection closed (FIN or
    # RST) without a byte of response, as llama-server does when it drops a kept-alive connection
    script = {**sse_script(STREAM, keep_alive=True), "answers_per_connection": 1, "unanswered": unanswered}
    url, process = scripted_server(script)
    user, _, fired = make_user(url)

    records = [user.send("hi") for _ in range(3)]
    stop(process)
    log = server_log(process)

    assert all(r.ok for r in records), [r.error_message for r in records]
    # first request: a new connection; the 2nd and 3rd each went out on the kept-alive one
    # (unanswered) and again on a new one: 1 + 2 * 2 requests over 3 connections
    assert [r.resent for r in records] == [0, 1, 1]
    assert (len(log["requests"]), log["connections"], user.pool.opened) == (5, 3, 3)
    assert [r.content_events for r in records] == [2, 2, 2]
    assert all(r.connect_ms == r.connect_ms for r in records)  # each answer came on a new connection
    assert len(fired) == 3 and all(f["exception"] is None for f in fired)


def test_new_connection_closed_unanswered_is_a_connection_error_not_resent(scripted_server):
    url, process = scripted_server({**sse_script(STREAM, keep_alive=True), "answers_per_connection": 0})
    user, _, _ = make_user(url)

    record = user.send("hi")
    stop(process)
    log = server_log(process)

    assert record.error_kind == "connection_error" and record.resent == 0
    assert record.error_message == "connection closed before the response headers (no byte of the response)"
    assert len(log["requests"]) == 1 and log["connections"] == 1


def test_kept_alive_connection_closed_after_part_of_the_answer_is_not_resent(scripted_server):
    # the second answer on the kept-alive connection stops after its headers: the server saw the
    # request, so sending it again would be a second request
    cut = sse_script([*STREAM[:1], (0.0, {"close": True})], keep_alive=True, end=False)["writes"]
    url, process = scripted_server({**sse_script(STREAM, keep_alive=True), "later_writes": cut})
    user, _, _ = make_user(url)

    first, second = user.send("hi"), user.send("hi")
    stop(process)
    log = server_log(process)

    assert first.ok and second.connect_ms != second.connect_ms  # the second reused the connection
    assert second.error_kind == "connection_error" and second.resent == 0
    assert second.status_code == 200 and "mid-stream" in second.error_message
    assert (len(log["requests"]), log["connections"]) == (2, 1)


@pytest.mark.parametrize(("end_delay_s", "connections"), [(0.1, 1), (1.0, 2)])
def test_end_of_message_after_done_is_awaited_briefly_for_keep_alive(scripted_server, shared_reader, end_delay_s,
                                                                      connections):  # fmt: skip
    # [DONE], then the chunked message's end 0.1 s later (awaited: the connection is reused) or
    # 1 s later (past the 0.5 s grace: the connection is closed); E2E stops at [DONE] either way
    script = sse_script(STREAM, keep_alive=True, end=False)
    script["writes"].append([end_delay_s, "0\r\n\r\n"])
    url, process = scripted_server(script)
    user, _, _ = make_user(url, shared_reader=shared_reader)

    records = [user.send("hi") for _ in range(2)]
    stop(process)
    log = server_log(process)

    assert all(r.ok for r in records), [r.error_message for r in records]
    done_index = len(STREAM)  # write 0 is the headers; the log keeps the last request's stamps
    last = records[-1]
    assert last.e2e_ms == pytest.approx((log["sent"][done_index] - last.t_start_s) * 1000, abs=STAMP_TOLERANCE_MS)
    assert log["connections"] == connections == user.pool.opened


def test_kept_alive_connection_held_then_closed_unanswered_is_a_connection_error(scripted_server):
    # the server holds the request 0.5 s (it took it), then closes without a byte: not a close
    # that crossed the request, so not re-sent (the server would run it twice)
    script = {**sse_script(STREAM, keep_alive=True), "answers_per_connection": 1, "unanswered_after_s": 0.5}
    url, process = scripted_server(script)
    user, _, _ = make_user(url)

    first, second = user.send("hi"), user.send("hi")
    stop(process)
    log = server_log(process)

    assert first.ok
    assert second.error_kind == "connection_error" and second.resent == 0
    assert second.error_message.startswith("connection closed before the response headers")
    assert "s after the request on a kept-alive connection" in second.error_message
    assert second.e2e_ms == pytest.approx(500, abs=50)
    assert (len(log["requests"]), log["connections"]) == (2, 1)
