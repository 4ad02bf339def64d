"""SSE framing: the decoder against the WHATWG rules, piece by piece, and why not sseclient-py.

Each case is fed in every split of its bytes into two reads (and byte by byte), so an event,
a line end (CR | LF) or a UTF-8 character cut between two reads is always covered.
"""

from __future__ import annotations

import pytest
from sseclient import SSEClient

from llm_locust.client.sse import SSEDecoder

CASES = [
    ("lf", b"data: a\n\ndata: b\n\n", [("message", b"a"), ("message", b"b")]),
    (
        "one-line events, whole in one read",
        b"data: a\n\ndata: \n\ndata: {}\n\ndata: b\n\n",
        [("message", b"a"), ("message", b""), ("message", b"{}"), ("message", b"b")],
    ),
    ("a second data line", b"data: a\n\ndata: b\ndata: c\n\n", [("message", b"a"), ("message", b"b\nc")]),
    ("data without space after one with", b"data: a\n\ndata:b\n\n", [("message", b"a"), ("message", b"b")]),
    ("crlf", b"data: a\r\n\r\ndata: b\r\n\r\n", [("message", b"a"), ("message", b"b")]),
    ("bare cr", b"data: a\r\rdata: b\r\r", [("message", b"a"), ("message", b"b")]),
    ("mixed line ends", b"data: a\n\r\ndata: b\r\n\n", [("message", b"a"), ("message", b"b")]),
    ("no space after the colon", b"data:a\n\ndata:[DONE]\n\n", [("message", b"a"), ("message", b"[DONE]")]),
    ("comments and keep-alives", b": ping\n\n:\n\ndata: a\n: inside\n\n", [("message", b"a")]),
    ("id, retry and unknown fields", b"id: 7\nretry: 100\nfoo: bar\ndata: a\n\n", [("message", b"a")]),
    (
        "event names",
        b"event: error\ndata: boom\n\nevent: message\ndata: a\n\n",
        [("error", b"boom"), ("message", b"a")],
    ),
    ("event name without data is not dispatched", b"event: error\n\ndata: a\n\n", [("message", b"a")]),
    ("multi-line data", b"data: a\ndata: b\n\n", [("message", b"a\nb")]),
    ("bare error field", b'error: {"message": "oom"}\n\n', [("error", b'{"message": "oom"}')]),
    ("utf-8 kept as bytes", "data: €uro\n\n".encode(), [("message", "€uro".encode())]),
    ("byte order mark", b"\xef\xbb\xbfdata: a\n\n", [("message", b"a")]),
    ("blank lines between events", b"\n\ndata: a\n\n\n\ndata: b\n\n", [("message", b"a"), ("message", b"b")]),
    ("incomplete last event is discarded", b'data: a\n\ndata: {"cut', [("message", b"a")]),
]


def feed(pieces: list[bytes]) -> list[tuple[str, bytes]]:
    decoder = SSEDecoder()
    events = []
    for piece in pieces:
        events += decoder.feed(piece)
    return events


@pytest.mark.parametrize(("case", "stream", "expected"), CASES, ids=[c[0] for c in CASES])
def test_decoder_any_split(case, stream, expected):
    assert feed([stream]) == expected
    assert feed([stream[i : i + 1] for i in range(len(stream))]) == expected
    for cut in range(1, len(stream)):
        assert feed([stream[:cut], stream[cut:]]) == expected, cut


def test_one_megabyte_line_in_small_reads():
    stream = b"data: " + b"x" * 1_048_576 + b"\n\ndata: b\n\n"
    assert feed([stream[i : i + 4096] for i in range(0, len(stream), 4096)]) == [
        ("message", b"x" * 1_048_576),
        ("message", b"b"),
    ]


def sseclient_events(pieces: list[bytes]) -> list[tuple[str, str]]:
    return [(e.event, e.data) for e in SSEClient(iter(pieces)).events()]


def test_why_not_sseclient_py():
    """What sseclient-py 1.9 gets wrong on streams LLM servers can send (see llm_locust/client/sse.py)."""
    # 1. an event cut off by the end of the stream is dispatched: a truncated stream looks complete
    assert sseclient_events([b"data: a\n\ndata: [DONE]"]) == [("message", "a"), ("message", "[DONE]")]
    assert feed([b"data: a\n\ndata: [DONE]"]) == [("message", b"a")]
    # 2. mixed line ends (LF, then CRLF as the blank line) merge two events into one
    assert sseclient_events([b"data: a\n\r\ndata: b\n\n"]) == [("message", "a\nb")]
    # 3. invalid UTF-8 raises out of the iterator (no event, no request record)
    with pytest.raises(UnicodeDecodeError):
        sseclient_events([b"data: \xff\n\n"])
    assert feed([b"data: \xff\n\n"]) == [("message", b"\xff")]  # json.loads then reports bad_response
    # 4. a bare "error:" field is dropped as unknown: an in-band error would pass as a success
    assert sseclient_events([b'error: {"message": "oom"}\n\n']) == []
