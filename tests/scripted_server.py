"""A scripted loopback HTTP server for tests: replays a list of (delay, bytes) writes.

Run as a process: ``python tests/scripted_server.py SCRIPT_JSON_PATH``; it binds 127.0.0.1 on a
free port, prints ``PORT <n>`` on stdout, and serves every connection with the script, one
request per connection (``Connection: close`` is up to the script's bytes). The script is a JSON
object ``{"writes": [[delay_s, "text"], ...]}``: before each write it sleeps ``delay_s`` seconds
(from the previous write; the first from the end of the request), then sends the text's UTF-8
bytes and flushes. It records, on stderr, ``SENT <i> <time.time()>`` after each write, so tests
can compare the client's stamps with the server's send times.

``sse_script`` builds the writes of a chunked ``text/event-stream`` response.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time


def chunked(payload: str) -> str:
    """One HTTP/1.1 chunk carrying ``payload``."""
    data = payload.encode("utf-8")
    return f"{len(data):x}\r\n" + payload + "\r\n"


def sse_script(events: list[tuple[float, str]], *, status: str = "200 OK", end: bool = True) -> dict:
    """Writes for an SSE response: headers at once, then each ``(delay_s, sse_text)`` as a chunk.

    ``end`` adds the terminating zero-length chunk (a cleanly ended HTTP message).
    """
    writes = [[0.0, f"HTTP/1.1 {status}\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                     "Connection: close\r\n\r\n"]]
    writes += [[delay, chunked(text)] for delay, text in events]
    if end:
        writes.append([0.0, "0\r\n\r\n"])
    return {"writes": writes}


def _read_request(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        part = conn.recv(65536)
        if not part:
            return
        data += part
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        part = conn.recv(65536)
        if not part:
            return
        body += part


def _serve(conn: socket.socket, writes: list) -> None:
    with conn:
        _read_request(conn)
        for index, (delay, text) in enumerate(writes):
            if delay:
                time.sleep(delay)
            conn.sendall(text.encode("utf-8"))
            print(f"SENT {index} {time.time()!r}", file=sys.stderr, flush=True)


def main() -> None:
    with open(sys.argv[1]) as f:
        writes = json.load(f)["writes"]
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    print(f"PORT {server.getsockname()[1]}", flush=True)
    deadline = time.monotonic() + 300  # bounded: a test server never outlives its test by long
    server.settimeout(1.0)
    while time.monotonic() < deadline:
        try:
            conn, _ = server.accept()
        except socket.timeout:
            continue
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=_serve, args=(conn, writes), daemon=True).start()


if __name__ == "__main__":
    main()
