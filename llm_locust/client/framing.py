"""Cutting a response body into payloads for the framings that are not SSE (:data:`FRAMINGS
<llm_locust.client.protocols.base.FRAMINGS>`): JSON lines, and one JSON body.

Each decoder has the :class:`~llm_locust.client.sse.SSEDecoder` interface the stream reader
uses: ``feed(bytes)`` returns the ``("message", payload bytes)`` pairs completed so far,
``close()`` those the end of the body completes, ``pending_bytes`` the bytes held back.

- JSON lines (``application/jsonl``, NDJSON): one JSON value per line (LF or CRLF); blank lines
  are skipped; a last line without its line end is complete when the body ends.
- One body: everything is held until the body ends, then handed over as one payload.

Why own code: a line split is a ``bytes.split``; no library frames bytes as a socket delivers
them with arrival instants kept by the caller.
"""

from __future__ import annotations

from llm_locust.client.sse import SSEDecoder

_NONE: tuple = ()


class JSONLinesDecoder:
    """Frame JSON lines from byte pieces of any size.

    >>> d = JSONLinesDecoder()
    >>> d.feed(b'{"a": 1}\\n{"a"'), d.feed(b': 2}\\r\\n\\n'), d.close()
    ([('message', b'{"a": 1}')], [('message', b'{"a": 2}')], ())
    """

    __slots__ = ("_buf", "pending_bytes")

    def __init__(self) -> None:
        self._buf = b""
        self.pending_bytes = 0

    def feed(self, piece: bytes | bytearray) -> list[tuple[str, bytes]] | tuple:
        """Add bytes; return the lines they completed (blank ones skipped)."""
        data = self._buf + piece if self._buf else bytes(piece)
        end = data.rfind(b"\n")
        if end < 0:
            self._buf, self.pending_bytes = data, len(data)
            return _NONE
        self._buf = data[end + 1 :]
        self.pending_bytes = len(self._buf)
        return [("message", line.strip()) for line in data[:end].split(b"\n") if line.strip()]

    def close(self) -> list[tuple[str, bytes]] | tuple:
        """The body ended: a last line without its line end is complete."""
        line, self._buf, self.pending_bytes = self._buf.strip(), b"", 0
        return [("message", line)] if line else _NONE


class WholeBodyDecoder:
    """Hold the whole body; hand it over as one payload when it ends.

    >>> d = WholeBodyDecoder()
    >>> d.feed(b'{"text": '), d.feed(b'"Hi"}'), d.close()
    ((), (), [('message', b'{"text": "Hi"}')])
    """

    __slots__ = ("_buf", "pending_bytes")

    def __init__(self) -> None:
        self._buf = bytearray()
        self.pending_bytes = 0

    def feed(self, piece: bytes | bytearray) -> tuple:
        """Add bytes; nothing is complete before the end of the body."""
        self._buf += piece
        self.pending_bytes = len(self._buf)
        return _NONE

    def close(self) -> list[tuple[str, bytes]] | tuple:
        """The body ended: all of it, as one payload (none when empty)."""
        body, self._buf, self.pending_bytes = bytes(self._buf).strip(), bytearray(), 0
        return [("message", body)] if body else _NONE


def make_decoder(framing: str) -> SSEDecoder | JSONLinesDecoder | WholeBodyDecoder:
    """A new decoder for ``framing`` (``sse``, ``jsonl`` or ``json``).

    Raises
    ------
    ValueError
        An unknown framing.
    """
    if framing == "sse":
        return SSEDecoder()
    if framing == "jsonl":
        return JSONLinesDecoder()
    if framing == "json":
        return WholeBodyDecoder()
    raise ValueError(f"unknown framing {framing!r}; known: sse, jsonl, json")
