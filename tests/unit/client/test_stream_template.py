"""A stream's token chunks read by their template (``_EventStream._learn``) give what decoding gives.

Every expected value is computed from the chunks themselves (the texts sent, joined; the JSON
the server wrote), and the same stream is also read by an adapter that declares its text not
opaque, so it decodes every chunk: both must agree, on texts, counts, stamps and failures.
"""

from __future__ import annotations

import json

import pytest

from llm_locust.client.connection import ConnectionPool, Target
from llm_locust.client.protocols import get_adapter
from llm_locust.client.record import ErrorKind
from llm_locust.client.stream import Limits, run_exchange
from llm_locust.client.watchdog import Watchdog
from tests.scripted_server import sse_script
from tests.sse_payloads import DONE, chat, sse, usage_chunk

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)

REQUEST = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"

TOKENS = [
    "Hello", " wor", "ld", "é€😀", 'a"b', "back\\slash", "new\nline", "tab\t", "\x01ctl", "x" * 50,
    "chatcmpl-1", " [DONE]", "}", '{"x": 1}', "\x7f", " ",
]  # fmt: skip
"""Plain strings, escapes (quote, backslash, control bytes: the decoding way), text equal to the
response id, and text that looks like JSON or the end sentinel."""


class _Counting:
    """The chat adapter, its ``interpret`` calls counted; ``text_opaque`` as given."""

    def __init__(self, *, opaque: bool) -> None:
        self._adapter = get_adapter("openai-chat")
        self.text_opaque = opaque
        self.calls = 0
        self.name, self.path, self.framing = self._adapter.name, self._adapter.path, self._adapter.framing

    def interpret(self, payload):
        self.calls += 1
        return self._adapter.interpret(payload)


def _exchange(scripted_server, pieces: list[bytes | str], *, opaque: bool):
    url, _ = scripted_server(sse_script([(0.0, piece) for piece in pieces]))
    adapter = _Counting(opaque=opaque)
    exchange, _ = run_exchange(ConnectionPool(Target(url)), REQUEST, adapter, Limits(), Watchdog())
    return exchange, adapter


def _stamps(exchange) -> list[str]:
    return " ".join(exchange.token_us).split()


def test_token_chunks_read_by_template_as_decoded(scripted_server):
    chunks = [sse(chat(role=True)), *(sse(chat(token)) for token in TOKENS), sse(chat("end", finish="length")),
              sse(usage_chunk(7, len(TOKENS) + 1)), DONE]  # fmt: skip
    body = "".join(chunks)  # one write: every event of the stream in one read, one stamp
    fast, fast_adapter = _exchange(scripted_server, [body], opaque=True)
    slow, slow_adapter = _exchange(scripted_server, [body], opaque=False)

    expected_text = "".join(json.loads(c[len("data: ") :])["choices"][0]["delta"]["content"] for c in chunks[1:-2])
    for exchange in (fast, slow):
        assert exchange.failure is None and exchange.done
        assert "".join(exchange.texts) == expected_text == "".join(TOKENS) + "end"
        assert exchange.token_events == len(TOKENS) + 1
        assert exchange.finish_reason == "length"
        assert exchange.usage == usage_chunk(7, len(TOKENS) + 1)["usage"]
        assert len(_stamps(exchange)) == len(TOKENS) + 1
    assert fast.sse_events == slow.sse_events == len(chunks)
    # decoded: every event; by template: all but the plain token chunks after the second (the
    # first token is the stream's first, the second a token under way that teaches the template)
    plain = [t for t in TOKENS[2:] if not any(c in t for c in '"\\') and all(ord(c) >= 0x20 for c in t)]
    assert slow_adapter.calls == len(chunks) - 1  # [DONE] is no JSON
    assert fast_adapter.calls == slow_adapter.calls - len(plain) + 2  # + the template's 2 reads


TEMPLATE = json.dumps(chat("XYZ"), ensure_ascii=False).encode()


@pytest.mark.parametrize(
    "body",
    [b"a\x01b", b"a\xff\xfeb"],  # a raw control byte (not JSON), bytes that are not UTF-8
    ids=["control-byte", "not-utf8"],
)
def test_chunk_fitting_the_template_but_no_json_is_a_bad_response(scripted_server, body):
    # the template of "one" and "two" with another string body in the text's place
    bad = b"data: " + TEMPLATE.replace(b"XYZ", body) + b"\n\n"
    pieces = ["".join([sse(chat(role=True)), sse(chat("one")), sse(chat("two"))]).encode(), bad, DONE.encode()]
    for opaque in (True, False):
        exchange, _ = _exchange(scripted_server, pieces, opaque=opaque)
        assert exchange.failure is not None and exchange.failure.kind is ErrorKind.BAD_RESPONSE
        assert "unparseable event" in exchange.failure.message
        assert "".join(exchange.texts) == "onetwo" and exchange.token_events == 2


def test_text_found_twice_gets_no_template(scripted_server):
    # the first token chunk's text is also the chunk's "object" string: no template is learned
    tokens = ["chat.completion.chunk", "a", "b", "c"]
    body = "".join([sse(chat(role=True)), *(sse(chat(t)) for t in tokens), DONE])
    exchange, adapter = _exchange(scripted_server, [body], opaque=True)
    assert "".join(exchange.texts) == "".join(tokens) and exchange.token_events == 4
    assert adapter.calls == 1 + len(tokens)  # every chunk decoded


def test_changing_fields_leave_the_template(scripted_server):
    # a running usage on every chunk (vLLM's continuous_usage_stats): each chunk differs beyond
    # its text, so each is decoded and its usage kept
    chunks = [chat(role=True)] + [chat(t, usage={"prompt_tokens": 3, "completion_tokens": k + 1,
                                                 "total_tokens": k + 4}) for k, t in enumerate("abcd")]  # fmt: skip
    body = "".join([*(sse(c) for c in chunks), DONE])
    exchange, adapter = _exchange(scripted_server, [body], opaque=True)
    assert "".join(exchange.texts) == "abcd" and exchange.token_events == 4
    assert exchange.running == [1, 2, 3, 4]  # the completion tokens each chunk stated
    assert adapter.calls == len(chunks)


def test_reads_of_template_chunks_only_give_what_decoding_gives(scripted_server):
    # writes of several token chunks each, 20 ms apart (one read each): reads that are nothing but
    # template chunks (_EventStream._run_of), one with an escape among them, one cut mid-event
    runs = [["a", "b", "c", "d"], ["é€", "😀", " x"], ["p", 'q"r', "s"], ["t", "u"], ["v", "w"]]
    first = "".join([sse(chat(role=True)), sse(chat("one")), sse(chat("two"))])
    writes = [first] + ["".join(sse(chat(t)) for t in run) for run in runs]
    cut = writes[-1].encode()
    pieces = [w.encode() for w in writes[:-1]] + [cut[:20], cut[20:], sse(chat("end", finish="stop")).encode(),
                                                  DONE.encode()]  # fmt: skip
    url_pieces = [(0.02, piece) for piece in pieces]
    results = []
    for opaque in (True, False):
        url, _ = scripted_server(sse_script(url_pieces))
        exchange, _ = run_exchange(ConnectionPool(Target(url)), REQUEST, _Counting(opaque=opaque), Limits(), Watchdog())
        results.append(exchange)
    fast, slow = results
    expected = "onetwo" + "".join("".join(run) for run in runs) + "end"
    for exchange in (fast, slow):
        assert exchange.failure is None and exchange.done and exchange.finish_reason == "stop"
        assert "".join(exchange.texts) == expected
        assert exchange.token_events == len(_stamps(exchange)) == 2 + sum(map(len, runs)) + 1
        assert exchange.sse_events == 1 + exchange.token_events + 1
    # each read's token events share one stamp: the same grouping both ways, one group per write
    # of token chunks (the cut write's two chunks complete in its second read)
    expected_groups = [2] + [len(run) for run in runs] + [1]
    for exchange in (fast, slow):
        stamps = _stamps(exchange)
        groups = [1]
        for before, after in zip(stamps, stamps[1:]):
            if after == before:
                groups[-1] += 1
            else:
                groups.append(1)
        assert groups == expected_groups


@pytest.mark.parametrize(
    "between",
    [": keep-alive\n\n", "event: ping\ndata: {}\n\n", "\n", "retry: 10\n\n", "data: {}\n\n"],
    ids=["comment", "named-event", "blank-line", "retry", "other-data"],
)
def test_a_read_with_other_lines_between_template_chunks_is_read_as_decoding_reads_it(scripted_server, between):
    # a read made of template token chunks with something else between two of them must not
    # pass for a run of template chunks: what it holds is what the decoding way says
    first = "".join([sse(chat(role=True)), sse(chat("one")), sse(chat("two"))])
    mixed = sse(chat("a")) + sse(chat("b")) + between + sse(chat("c"))
    pieces = [first, mixed, sse(chat("end", finish="stop")), DONE]
    results = []
    for opaque in (True, False):
        url, _ = scripted_server(sse_script([(0.02, piece) for piece in pieces]))
        exchange, _ = run_exchange(ConnectionPool(Target(url)), REQUEST, _Counting(opaque=opaque), Limits(), Watchdog())
        results.append(exchange)
    fast, slow = results
    for exchange in results:
        assert exchange.failure is None and exchange.done
    assert "".join(fast.texts) == "".join(slow.texts)
    assert "".join(slow.texts).startswith("onetwoab")  # what each way reads is the same, and not nothing
    assert (fast.token_events, fast.sse_events) == (slow.token_events, slow.sse_events)
    assert len(_stamps(fast)) == fast.token_events and len(_stamps(slow)) == slow.token_events
