"""What one token event costs a worker, stage by stage, in one process on the same bytes.

    .venv/bin/python benchmarks/client_event_cost.py            # a few seconds

``benchmarks/client_overhead.py`` measures whole processes (a worker, a bare socket reader) and
prints this table beside them: here each stage of the worker's hot path
(:class:`llm_locust.client.stream._EventStream` fed by the process's
:class:`~llm_locust.client.reader.StreamReader`) is timed alone, on the same synthetic vLLM-like
stream (a role chunk, ``tokens`` content chunks ``per_read`` to a read, finish, usage,
``[DONE]``), so the README can say what each microsecond per event buys. ``recv``, ``epoll`` and
the event loop are not in it (the process benchmark has them).

Stages, µs per token event (CPU time, ``time.process_time``; best of ``repeats``):

- ``http``: the HTTP/1.1 chunked-transfer parser (geventhttpclient's C parser) on each read.
- ``sse``: SSE framing (:class:`llm_locust.client.sse.SSEDecoder`).
- ``json``: ``orjson.loads`` per event (and, for comparison, the stdlib's ``json.loads``).
- ``adapter``: the chat adapter's ``interpret`` per event (a typed event from the JSON object).
- ``bookkeeping``: the rest of ``_EventStream.take`` (stamps, texts, first token, deadlines):
  the whole ``take``, every event decoded (an adapter declaring its text not opaque), minus the
  four stages above.
- ``template``: the whole ``take`` as the worker runs it, token chunks of a stream under way
  read by the stream's template (no ``orjson.loads``, no ``interpret``: ``_EventStream._learn``);
  ``total`` is this plus ``request``, ``total_decoded`` the sum of the stages.
- ``request``: once per request, ``fill_record`` and the ``requests.csv`` line, divided by
  the tokens of a request.
- ``sse_sseclient``: sseclient-py's framing instead (NaN without the test extra).
- ``bare``: what the benchmark's bare reader does per event after ``recv`` (split, find,
  ``orjson.loads``, two lookups, a count): the floor.

Why own code: the stages are the product's own functions; no profiler separates them without
adding its own cost to each call.
"""

from __future__ import annotations

import gc
import json
import math
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def content_event(rid: str, text: str = "tok") -> bytes:
    """One vLLM-like ``chat.completion.chunk`` SSE event carrying ``text``."""
    chunk = {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "bench",
        "choices": [{"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}],
    }
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


def chunked(data: bytes) -> bytes:
    """``data`` as one HTTP/1.1 chunk."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def stream_reads(rid: str, tokens: int, per_read: int) -> list[bytes]:
    """The reads of one streamed answer: headers and role chunk, ``tokens`` content events
    ``per_read`` to a chunk, then finish, usage, ``[DONE]`` and the last chunk."""
    role = {"id": rid, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    finish = {"id": rid, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
    usage = {"id": rid, "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": tokens}}
    one = content_event(rid)
    reads = [HEAD + chunked(b"data: " + json.dumps(role).encode() + b"\n\n")]
    reads += [chunked(one * per_read)] * (tokens // per_read)
    tail = (
        b"data: " + json.dumps(finish).encode() + b"\n\ndata: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n"
    )
    reads.append(chunked(tail) + b"0\r\n\r\n")
    return reads


def _best(fn, repeats: int) -> float:
    """Least CPU time of ``repeats`` calls, the cyclic collector off (its pauses are the process's,
    not a stage's)."""
    best = float("inf")
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeats):
            t = time.process_time()
            fn()
            best = min(best, time.process_time() - t)
    finally:
        gc.enable()
    return best


def stage_costs(*, tokens: int = 256, per_read: int = 4, requests: int = 40, repeats: int = 9) -> dict[str, float]:
    """µs per token event of each stage (see the module), on ``requests`` streams of ``tokens``.

    Returns
    -------
    dict
        ``http``, ``sse``, ``json``, ``json_stdlib``, ``adapter``, ``bookkeeping``, ``request``,
        ``total_decoded`` (the worker's stages summed, stdlib column excluded), ``template`` (the
        whole ``take`` with token chunks read by the template), ``total`` (``template`` plus
        ``request``: the worker as it runs) and ``bare``, µs per token event.
    """
    sys.path.insert(0, str(REPO))
    from geventhttpclient.response import HTTPResponse
    from orjson import loads

    from llm_locust.client.accounting import fill_record
    from llm_locust.client.protocols.openai_chat import OpenAIChatAdapter
    from llm_locust.client.record import RequestRecord
    from llm_locust.client.sse import SSEDecoder
    from llm_locust.client.stream import Exchange, Limits, _Clock, _EventStream
    from llm_locust.client.watchdog import Watchdog
    from llm_locust.master.runwriter import RequestLines

    class DecodingAdapter(OpenAIChatAdapter):
        text_opaque = False  # every event decoded and interpreted: no template

    reads = stream_reads("bench-1", tokens, per_read)
    events = tokens * requests
    adapter, decoding, watchdog = OpenAIChatAdapter(), DecodingAdapter(), Watchdog()
    body_reads = reads[1:]
    payloads = [content_event("bench-1")[6:-2]] * tokens
    objects = [loads(p) for p in payloads]

    def http() -> None:
        for _ in range(requests):
            parser = HTTPResponse(method="POST")
            parser.feed(reads[0])
            body = parser._body_buffer
            for r in body_reads:
                parser.feed(r)
                del body[:]

    def sse() -> None:
        pieces = [content_event("bench-1") * per_read] * (tokens // per_read)
        for _ in range(requests):
            decoder = SSEDecoder()
            for piece in pieces:
                decoder.feed(piece)

    def sseclient() -> None:  # the test extra's sseclient-py (the design card's first choice)
        from sseclient import SSEClient

        pieces = [content_event("bench-1") * per_read] * (tokens // per_read)
        for _ in range(requests):
            for _event in SSEClient(iter(pieces)).events():
                pass

    def orjson_() -> None:
        for _ in range(requests):
            for p in payloads:
                loads(p)

    def stdlib() -> None:
        for _ in range(requests):
            for p in payloads:
                json.loads(p)

    def interpret() -> None:
        fn = adapter.interpret
        for _ in range(requests):
            for o in objects:
                fn(o)

    streams: list = []

    def take(reading=adapter) -> None:
        streams.clear()
        for _ in range(requests):
            out = Exchange(t0=time.perf_counter())
            parser = HTTPResponse(method="POST")
            parser.feed(reads[0])
            out.status = parser.status_code
            stream = _EventStream(parser, reading, _Clock(Limits(), out.t0, watchdog), out)
            t = out.t0
            stream.take(None, t)
            for r in body_reads:
                t += 0.001
                if stream.take(r, t):
                    break
            stream.release()
            streams.append(out)

    lines: list[str] = []
    line = RequestLines().line

    def request() -> None:  # as the worker's RecordShipper: the row, and its requests.csv line
        lines.clear()
        for out in streams:
            record = RequestRecord(request_id="r", worker_id="w", name="chat", t_start_s=1.0)
            fill_record(record, out, max_tokens=tokens, ignore_eos=True)
            lines.append(line(record.to_row()))

    def bare() -> None:
        for _ in range(requests):
            buf = b""
            count = 0
            for r in body_reads:
                parts = (buf + r).split(b"\n\n")
                buf = parts.pop()
                for part in parts:
                    i = part.find(b"data: ")
                    if i < 0:
                        continue
                    payload = part[i + 6 :]
                    if payload == b"[DONE]":
                        continue
                    chunk = loads(payload)
                    delta = chunk["choices"][0]["delta"] if chunk["choices"] else {}
                    if delta.get("content"):
                        count += 1

    for reading in (decoding, adapter):
        take(reading)
        assert all(out.failure is None and out.done and out.sse_events == tokens + 4 and out.token_events == tokens
                   for out in streams), "a stream failed"  # fmt: skip
    us = {name: _best(fn, repeats) / events * 1e6 for name, fn in
          (("http", http), ("sse", sse), ("json", orjson_), ("json_stdlib", stdlib), ("adapter", interpret),
           ("take", lambda: take(decoding)), ("template", take), ("request", request), ("bare", bare))}  # fmt: skip
    try:
        us["sse_sseclient"] = _best(sseclient, repeats) / events * 1e6
    except ImportError:  # pip install -e '.[test]'
        us["sse_sseclient"] = math.nan
    us["bookkeeping"] = max(0.0, us.pop("take") - us["http"] - us["sse"] - us["json"] - us["adapter"])
    us["total_decoded"] = us["http"] + us["sse"] + us["json"] + us["adapter"] + us["bookkeeping"] + us["request"]
    us["total"] = us["template"] + us["request"]
    return us


def print_table(us: dict[str, float]) -> None:
    """The stage table as ``client_overhead.py`` and README show it."""
    rows = (("HTTP chunked parser (geventhttpclient, per read)", "http"), ("SSE framing (llm_locust.client.sse)", "sse"),
            ("orjson.loads", "json"), ("chat adapter interpret", "adapter"),
            ("bookkeeping (stamps, texts, first token, deadline)", "bookkeeping"),
            ("per request: fill_record + requests.csv line, / tokens", "request"))  # fmt: skip
    print(
        "worker hot path, µs per token event, in one process on the same bytes (recv and the event loop not included):"
    )
    for label, key in rows:
        print(f"  {label:<58}{us[key]:>7.2f}")
    print(f"  {'total, every event decoded':<58}{us['total_decoded']:>7.2f}")
    print(f"  {'take, token chunks read by the template (no JSON, adapter)':<58}{us['template']:>7.2f}")
    print(f"  {'total, as the worker runs (template + per request)':<58}{us['total']:>7.2f}")
    print(f"  {'bare reader after recv (split, find, orjson.loads, lookups)':<58}{us['bare']:>7.2f}")
    print(f"  {'(stdlib json.loads instead of orjson)':<58}{us['json_stdlib']:>7.2f}")
    extra = "" if us["sse_sseclient"] == us["sse_sseclient"] else " (not installed: pip install -e '.[test]')"
    print(f"  {'(sseclient-py framing instead of llm_locust.client.sse)':<58}{us['sse_sseclient']:>7.2f}{extra}")


if __name__ == "__main__":
    print_table(stage_costs())
