"""Output token counting through the real HTTP stack: usage, several tokens per chunk,
continuous usage stats, TGI's one token per event, the estimate on the joined text (tokenizer or
heuristic, never above max_tokens, never by chunk count), and the ignore_eos check."""

from __future__ import annotations

import json

import pytest

from llm_locust.analysis.perrequest.itl import request_itl
from llm_locust.client.connection import ConnectionPool, Target
from llm_locust.client.protocols import get_adapter
from llm_locust.client.stream import Limits, run_exchange
from llm_locust.client.watchdog import Watchdog
from tests.conftest import stop
from tests.locust_env import make_user
from tests.scripted_server import sse_script
from tests.sse_payloads import DONE, chat, sse, tgi, usage, usage_chunk

ROLE = sse(chat(role=True))


def _continuous(content, completion, finish=None):
    return sse(chat(content, finish=finish, usage=usage(5, completion)))


# (case, events, options, output_tokens, tokens_source, content_events, event_tokens, ignore_eos_violated)
CASES = [
    ("usage", [ROLE, sse(chat("a")), sse(chat("b", finish="length")), sse(usage_chunk(5, 2)), DONE],
     ["--max-tokens", "2"], 2, "usage", 2, "", 0),
    ("several tokens per chunk (speculative decoding): from usage, not chunk count",
     [ROLE, sse(chat("abc")), sse(chat("def gh")), sse(chat("i", finish="length")), sse(usage_chunk(5, 7)), DONE],
     ["--max-tokens", "7"], 7, "usage", 3, "", 0),
    ("continuous usage stats: tokens per chunk",
     [sse(chat(role=True, usage=usage(5, 0))), _continuous("abc", 2), _continuous("def gh", 5),
      _continuous("i", 7, finish="length"), sse(usage_chunk(5, 7)), DONE],
     ["--max-tokens", "7", "--continuous-usage", "true"], 7, "usage", 3, "2 3 2", 0),
    ("no usage: heuristic on the joined text, not chunk count",  # 12 characters -> ceil(12 / 4) = 3
     [ROLE, sse(chat("He")), sse(chat("llo")), sse(chat(" ")), sse(chat("world")), sse(chat("!", finish="length")), DONE],
     ["--include-usage", "false"], 3, "heuristic", 5, "", 0),
    ("heuristic never above max_tokens",  # 100 characters -> 25, clipped to 10
     [ROLE, sse(chat("x" * 50)), sse(chat("y" * 50, finish="length")), DONE],
     ["--include-usage", "false", "--max-tokens", "10"], 10, "heuristic", 2, "", 0),
    ("ignore_eos asked, stopped early: flagged, still a success",
     [ROLE, sse(chat("a")), sse(chat("b", finish="stop")), sse(usage_chunk(5, 2)), DONE],
     ["--max-tokens", "64"], 2, "usage", 2, "", 1),
    ("ignore_eos not asked: an early stop is fine",
     [ROLE, sse(chat("a")), sse(chat("b", finish="stop")), sse(usage_chunk(5, 2)), DONE],
     ["--max-tokens", "64", "--ignore-eos", "false"], 2, "usage", 2, "", 0),
    ("tgi: one token per event, total from details",
     [sse(tgi("Hel", index=1)), sse(tgi("lo", index=2)), sse(tgi("</s>", index=3, special=True,
      details={"finish_reason": "eos_token", "generated_tokens": 3}))],
     ["--protocol", "tgi", "--max-tokens", "3"], 3, "usage", 3, "1 1 1", 0),
    ("tgi without details: counted per event",
     [sse(tgi("Hel", index=1)), sse(tgi("lo", index=2)), sse({"index": 3, "token": {"id": 3, "text": "!",
      "special": False}, "generated_text": "Hello!", "details": {"finish_reason": "length"}})],
     ["--protocol", "tgi", "--max-tokens", "3"], 3, "events", 3, "1 1 1", 0),
    ("completions",
     [sse({"id": "cmpl-1", "object": "text_completion", "choices": [{"text": "a", "finish_reason": None}]}),
      sse({"id": "cmpl-1", "object": "text_completion", "choices": [{"text": "b", "finish_reason": "length"}]}),
      sse(usage_chunk(5, 2)), DONE],
     ["--protocol", "openai-completions", "--max-tokens", "2"], 2, "usage", 2, "", 0),
]  # fmt: skip


@pytest.mark.parametrize(("case", "events", "args", "tokens", "source", "content_events", "event_tokens", "violated"),
                         CASES, ids=[c[0] for c in CASES])  # fmt: skip
def test_token_counting(scripted_server, case, events, args, tokens, source, content_events, event_tokens, violated):
    url, _ = scripted_server(sse_script([(0.01, e) for e in events]))
    user, _, _ = make_user(url, *args)

    record = user.send("hi")

    assert record.ok, record.error_message
    assert (record.output_tokens, record.tokens_source, record.content_events) == (tokens, source, content_events)
    assert (record.event_tokens, record.ignore_eos_violated) == (event_tokens, violated)
    # per-token ITL never includes the TTFT, and its token-weighted mean is the TPOT
    values, weights = request_itl(record.ttft_ms, record.e2e_ms, record.output_tokens, record.token_times_us,
                                  record.event_tokens)  # fmt: skip
    assert weights.sum() == pytest.approx(tokens - 1)
    tpot = (record.e2e_ms - record.ttft_ms) / (tokens - 1)
    assert float((values * weights).sum() / weights.sum()) == pytest.approx(tpot, abs=1e-3)


def test_request_bodies_per_protocol(scripted_server):
    url, process = scripted_server(sse_script([(0.0, sse(chat("a", finish="length"))), (0.0, DONE)], keep_alive=True))
    bodies = {}
    for args in (["--include-usage", "false"], ["--continuous-usage", "true"], ["--protocol", "tgi"],
                 ["--protocol", "openai-completions", "--temperature", "0.5"]):  # fmt: skip
        user, _, _ = make_user(url, *args)
        user.send("hi")
        bodies[" ".join(args)] = user.build_request("hi")
    stop(process)

    def body(key):
        return json.loads(bodies[key].split(b"\r\n\r\n", 1)[1])

    assert "stream_options" not in body("--include-usage false")  # left out, never sent as null
    assert body("--continuous-usage true")["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body("--protocol tgi") == {"inputs": "hi", "parameters": {"max_new_tokens": 64, "details": True,
                                                                      "do_sample": False}}  # fmt: skip
    completions = body("--protocol openai-completions --temperature 0.5")
    assert (completions["prompt"], completions["temperature"], completions["ignore_eos"]) == ("hi", 0.5, True)
    assert bodies["--protocol tgi"].startswith(b"POST /generate_stream HTTP/1.1\r\n")


def test_tokenizer_counts_the_joined_text_once(scripted_server, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {"[UNK]": 0, "hello": 1, "big": 2, "world": 3}
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    # "hel" + "lo big wor" + "ld": 3 words joined; chunk by chunk would count 5 pieces
    events = [ROLE, sse(chat("hel")), sse(chat("lo big wor")), sse(chat("ld", finish="length")), DONE]
    url, _ = scripted_server(sse_script([(0.01, e) for e in events]))
    user, _, _ = make_user(url, "--include-usage", "false", "--tokenizer", str(tmp_path))

    record = user.send("hi")

    assert (record.output_tokens, record.tokens_source) == (3, "tokenizer")


def test_utf8_character_split_across_reads_decodes_whole(scripted_server):
    # "€" is E2 82 AC: the first read ends after E2 82
    payload = sse(chat("€uro", finish="length")).encode()
    cut = payload.index("€".encode()) + 2
    events = [(0.02, payload[:cut]), (0.03, payload[cut:]), (0.0, DONE)]
    url, process = scripted_server(sse_script(events))
    adapter = get_adapter("openai-chat")

    exchange, _ = run_exchange(ConnectionPool(Target(url)), b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
                               adapter, Limits(), Watchdog())  # fmt: skip

    assert exchange.failure is None and exchange.done
    assert "".join(exchange.texts) == "€uro"
