"""Incremental Server-Sent Events framing on bytes, as the socket delivers them.

Follows the WHATWG HTML "Interpreting an event stream" rules (section 9.2.6): lines end with
CRLF, LF or a bare CR (a CR at the end of one read and its LF at the start of the next are one
line end); a line starting with ``:`` is a comment (``: ping`` keep-alives); ``data``, ``event``,
``id`` and ``retry`` fields, with or without the space after the colon; several ``data`` lines are
joined with LF; an empty line dispatches the event, and an event without data is not
dispatched; a leading UTF-8 BOM is dropped; an event still incomplete when the stream ends is
discarded (it was cut off). One addition for LLM servers: a bare ``error:`` field (not in the
spec, sent by some servers) turns the event into an ``error`` event carrying the field's value.

Bytes stay bytes until a whole event is framed, so a multi-byte UTF-8 character split across
reads is never decoded in halves (the payload is decoded once, by ``json.loads``).

Why not sseclient-py (the design card's first choice): measured in ``tests/unit/client/test_sse.py`` and
``benchmarks/client_overhead.py``. It dispatches an event cut off by the end of the stream
(so a truncated stream looks like a complete last event), merges two events separated by mixed
line ends (``LF`` then ``CRLF``), raises ``UnicodeDecodeError`` on invalid UTF-8, and costs
several times more per event than this decoder (it re-splits lines and logs twice per event).
"""

from __future__ import annotations

__all__ = ["DONE", "SSEDecoder", "is_done"]

DONE = b"[DONE]"
"""OpenAI's end-of-stream sentinel payload."""

_BOM = b"\xef\xbb\xbf"
_NO_EVENTS: tuple = ()


def is_done(data: bytes | bytearray) -> bool:
    """True for the ``[DONE]`` sentinel, with or without surrounding spaces.

    >>> is_done(b"[DONE]"), is_done(b" [DONE] "), is_done(b'{"x": 1}')
    (True, True, False)
    """
    return data == DONE or (len(data) < 16 and data.strip() == DONE)


class SSEDecoder:
    """Frame SSE events from byte pieces of any size.

    >>> decoder = SSEDecoder()
    >>> decoder.feed(b"data: {\\"a\\": 1}\\r\\n\\r\\n: ping\\n\\nevent: error\\ndata:x")
    [('message', b'{"a": 1}')]
    >>> decoder.feed(b"\\n\\n")
    [('error', b'x')]
    """

    __slots__ = ("_buf", "_scan", "_cr_pending", "_started", "pending_bytes")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._scan = 0  # buffer position from which an event end (LF LF) is searched
        self._cr_pending = False  # the previous piece ended with CR: a leading LF now is its pair
        self._started = False
        self.pending_bytes = 0
        """Bytes of an event not yet complete (set after each feed)."""

    def feed(self, piece: bytes | bytearray) -> list[tuple[str, bytes | bytearray]] | tuple:
        """Add the next bytes of the body; return the events they completed, in order.

        Returns
        -------
        list of (event_type, data)
            ``event_type`` is ``"message"`` unless an ``event:`` field (or a bare ``error:``
            field) said otherwise; ``data`` is the data buffer (lines joined with LF): bytes, or a
            slice of ``piece`` when that is a ``bytearray`` (the HTTP parser's body buffer, as
            :mod:`llm_locust.client.stream` feeds it) made of whole one-line events.
        """
        if not self._buf and self._started and not self._cr_pending and piece.endswith(b"\n\n") and b"\r" not in piece:
            return self._whole_events(piece)  # the common case: whole LF-framed events, nothing pending
        if self._cr_pending:
            self._cr_pending = False
            if piece[:1] == b"\n":
                piece = piece[1:]
        if b"\r" in piece:
            self._cr_pending = piece[-1:] == b"\r"
            piece = piece.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if not piece:
            return _NO_EVENTS
        buf = self._buf
        if not self._started:  # a BOM may itself arrive in pieces
            head = bytes(buf) + piece
            if len(head) < 3 and _BOM.startswith(head):
                buf[:] = head
                return _NO_EVENTS
            self._started = True
            buf.clear()
            piece = head[3:] if head.startswith(_BOM) else head
        buf += piece
        events = None
        start = 0
        scan = self._scan
        size = len(buf)
        while True:
            while start < size and buf[start] == 10:  # empty lines between events dispatch nothing
                start += 1
            if scan < start:
                scan = start
            end = buf.find(b"\n\n", scan)
            if end < 0:
                break
            event = self._parse(bytes(buf[start:end]))
            if event is not None:
                if events is None:
                    events = [event]
                else:
                    events.append(event)
            start = scan = end + 2
        if start:
            del buf[:start]
            scan -= start
        self._scan = max(0, len(buf) - 1, scan) if buf else 0
        self.pending_bytes = len(buf)
        return events if events is not None else _NO_EVENTS

    def at_event_start(self) -> bool:
        """Whether the next byte starts a new line of a new event: the stream has started (a BOM,
        if any, dropped), nothing is held and no CR waits for its LF."""
        return self._started and not self._buf and not self._cr_pending

    def close(self) -> tuple:
        """The body ended: an event still incomplete was cut off and is discarded (no events)."""
        return _NO_EVENTS

    def _whole_events(self, piece: bytes | bytearray) -> list[tuple[str, bytes | bytearray]] | tuple:
        self.pending_bytes = 0
        if piece[:6] == b"data: ":
            payloads = piece[6:-2].split(b"\n\ndata: ")
            if piece.count(b"\n") == 2 * len(payloads):
                # the only line ends are the event ends, and every event starts "data: ": one-line events
                return [("message", payload) for payload in payloads]
        blocks = piece.split(b"\n\n")
        events: list[tuple[str, bytes | bytearray]] | None = None
        event: tuple[str, bytes | bytearray] | None  # an annotation only: nothing runs per block
        parse = self._parse
        for block in blocks:
            if block[:5] == b"data:" and b"\n" not in block:
                event = ("message", block[6:] if block[5:6] == b" " else block[5:])
            else:
                block = block.lstrip(b"\n")
                if not block:
                    continue
                event = parse(block)
                if event is None:
                    continue
            if events is None:
                events = [event]
            else:
                events.append(event)
        return events if events is not None else _NO_EVENTS

    @staticmethod
    def _parse(block: bytes | bytearray) -> tuple[str, bytes | bytearray] | None:
        """One event block (lines without the final empty line) -> (type, data) or None."""
        if block[:5] == b"data:" and b"\n" not in block:  # the common case: one data line
            return ("message", block[6:] if block[5:6] == b" " else block[5:])
        event_type = "message"
        data = None
        for line in block.split(b"\n"):
            if not line or line[:1] == b":":
                continue
            field, colon, value = line.partition(b":")
            if colon and value[:1] == b" ":
                value = value[1:]
            if field == b"data":
                data = value if data is None else data + b"\n" + value
            elif field == b"event":
                event_type = value.decode("utf-8", "replace") or "message"
            elif field == b"error":
                event_type = "error"
                data = value if data is None else data + b"\n" + value
            # id, retry and unknown fields change nothing we measure
        if data is None:
            return None
        return (event_type, data)
