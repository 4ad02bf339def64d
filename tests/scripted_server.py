"""A scripted loopback HTTP server for tests: replays a list of (delay, bytes) writes.

Run as a process: ``python tests/scripted_server.py SCRIPT_JSON_PATH``; it binds 127.0.0.1 on a
free port, prints ``PORT <n>`` on stdout, and serves every connection with the script. The
script is a JSON object::

    {"writes": [[delay_s, item], ...], "keep_alive": false, "tls": {"cert": PEM, "key": PEM}}

Before each write it sleeps ``delay_s`` seconds (from the previous write; the first from the end
of the request), then sends the item and flushes (``TCP_NODELAY``). An item is a string (sent as
UTF-8), ``{"hex": "…"}`` (raw bytes, e.g. half of a UTF-8 character), ``{"close": true}`` (close
the connection now) or ``{"reset": true}`` (abort it with a TCP RST). With ``keep_alive`` the
server then reads the next request on the same connection and replays the script again;
otherwise it closes the connection after the last write. With ``tls`` it serves https. With
``"answers_per_connection": n`` it answers n requests on a connection, then reads the next one and
closes the connection without a byte of response (``"unanswered": "reset"`` aborts it with a RST
instead; ``"unanswered_after_s"`` holds the request that long first), as a server does when it
closes a kept-alive connection just as a client reuses it.
``"later_writes"`` replaces ``writes`` for the second and later requests on a connection.
``"later_connections"`` replaces ``writes`` for every connection after the first (e.g. a
``/metrics`` that answers once, then hangs). An item ``{"repeat": "text", "times": n}`` sends
``text`` n times in a row (a body of any size without holding it in memory).

On stderr it records ``CONN <n>`` for each accepted connection, ``REQ <request line>`` and
``BODY <hex>`` for each request, and ``SENT <i> <time.time()> <connection n>`` just before each write, so tests can compare the client's stamps
with the server's send times and count connections.

:func:`sse_script` builds the writes of a ``text/event-stream`` response.
"""

from __future__ import annotations

import json
import socket
import ssl
import struct
import sys
import threading
import time


def chunked(payload: str | bytes) -> str | dict:
    """One HTTP/1.1 chunk carrying ``payload`` (a string, or raw bytes as a hex item)."""
    data = payload if isinstance(payload, bytes) else payload.encode("utf-8")
    if isinstance(payload, bytes):
        return {"hex": (f"{len(data):x}\r\n".encode() + data + b"\r\n").hex()}
    return f"{len(data):x}\r\n" + payload + "\r\n"


def sse_script(
    events: list[tuple[float, str | bytes | dict]],
    *,
    status: str = "200 OK",
    end: bool = True,
    framing: str = "chunked",
    keep_alive: bool = False,
    content_type: str = "text/event-stream",
) -> dict:
    """Writes for an SSE response: headers at once, then each ``(delay_s, payload)``.

    Parameters
    ----------
    events : list of (float, str or bytes or dict)
        Body pieces; each is one write (one HTTP chunk with ``framing="chunked"``). A dict is
        passed through as a control item (``{"close": true}``, ``{"reset": true}``).
    end : bool
        Add the terminating zero-length chunk (a cleanly ended chunked message).
    framing : {"chunked", "close", "length"}
        Transfer coding: chunked, a body delimited by the connection's close (no length), or a
        ``Content-Length`` body.
    keep_alive : bool
        Serve further requests on the connection (``Connection: keep-alive``).
    """
    connection = "keep-alive" if keep_alive else "close"
    head = f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nConnection: {connection}\r\n"
    if framing == "chunked":
        head += "Transfer-Encoding: chunked\r\n"
    elif framing == "length":
        size = sum(len(p if isinstance(p, bytes) else p.encode()) for _, p in events if not isinstance(p, dict))
        head += f"Content-Length: {size}\r\n"
    writes: list = [[0.0, head + "\r\n"]]
    for delay, payload in events:
        if isinstance(payload, dict):
            writes.append([delay, payload])
        elif framing == "chunked":
            writes.append([delay, chunked(payload)])
        else:
            writes.append([delay, {"hex": payload.hex()} if isinstance(payload, bytes) else payload])
    if end and framing == "chunked":
        writes.append([0.0, "0\r\n\r\n"])
    if framing == "close" and not keep_alive:
        writes.append([0.0, {"close": True}])
    return {"writes": writes, "keep_alive": keep_alive}


def body_script(
    body: str | dict,
    *,
    status: str = "200 OK",
    delay_s: float = 0.0,
    content_type: str = "text/plain; version=0.0.4",
    length: bool = True,
) -> list:
    """Writes of one plain (non-streamed) response, e.g. a ``/metrics`` page: headers and body
    together after ``delay_s``. ``body`` is text or a ``{"repeat": …, "times": n}`` item; with
    ``length`` it is announced by ``Content-Length``, otherwise delimited by the close."""
    size = len(body["repeat"].encode()) * int(body["times"]) if isinstance(body, dict) else len(body.encode())
    head = f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nConnection: close\r\n"
    head += f"Content-Length: {size}\r\n" if length else ""
    if isinstance(body, dict):
        return [[delay_s, head + "\r\n"], [0.0, body], [0.0, {"close": True}]]
    return [[delay_s, head + "\r\n" + body], [0.0, {"close": True}]]


def _read_request(conn: socket.socket, pending: bytes) -> tuple[bytes | None, bytes, str]:
    """Read one request; return (body, bytes after it, request line), body None when the peer closed."""
    data = pending
    while b"\r\n\r\n" not in data:
        part = conn.recv(65536)
        if not part:
            return None, b"", ""
        data += part
    head, _, rest = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        part = conn.recv(65536)
        if not part:
            return None, b"", ""
        rest += part
    return rest[:length], rest[length:], head.split(b"\r\n")[0].decode("latin-1")


def _serve(conn: socket.socket, script: dict, lock: threading.Lock, number: int = 1) -> None:
    writes = script["later_connections"] if number > 1 and "later_connections" in script else script["writes"]
    answers = script.get("answers_per_connection")
    served = 0
    pending = b""
    try:
        while True:
            body, pending, request_line = _read_request(conn, pending)
            if body is None:
                return
            with lock:
                print(f"REQ {request_line}", file=sys.stderr, flush=True)
                print(f"BODY {body.hex()}", file=sys.stderr, flush=True)
            if answers is not None:
                if answers == 0:
                    time.sleep(script.get("unanswered_after_s", 0.0))
                    if script.get("unanswered") == "reset":
                        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                answers -= 1
            if served and "later_writes" in script:
                writes = script["later_writes"]
            served += 1
            for index, (delay, item) in enumerate(writes):
                if delay:
                    time.sleep(delay)
                if isinstance(item, dict):
                    if item.get("reset"):
                        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        return
                    if item.get("close"):
                        return
                    if "repeat" in item:
                        with lock:
                            print(f"SENT {index} {time.time()!r} {number}", file=sys.stderr, flush=True)
                        piece = item["repeat"].encode("utf-8")
                        for _ in range(int(item["times"])):
                            conn.sendall(piece)
                        continue
                data = bytes.fromhex(item["hex"]) if isinstance(item, dict) else item.encode("utf-8")
                # stamp, and log the stamp, before the bytes leave: a test that kills the server as
                # soon as its client has read them must still find the stamp (loopback send: µs)
                with lock:
                    print(f"SENT {index} {time.time()!r} {number}", file=sys.stderr, flush=True)
                conn.sendall(data)
            if not script.get("keep_alive"):
                return
    except OSError:
        return
    finally:
        conn.close()


def main() -> None:
    with open(sys.argv[1]) as f:
        script = json.load(f)
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    print(f"PORT {server.getsockname()[1]}", flush=True)
    lock = threading.Lock()
    tls = None
    if script.get("tls"):  # {"cert": path, "key": path}: serve https
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(script["tls"]["cert"], script["tls"]["key"])
    deadline = time.monotonic() + 300  # bounded: a test server never outlives its test by long
    server.settimeout(1.0)
    connections = 0
    while time.monotonic() < deadline:
        try:
            conn, _ = server.accept()
        except TimeoutError:
            continue
        connections += 1
        with lock:
            print(f"CONN {connections}", file=sys.stderr, flush=True)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            try:
                conn = tls.wrap_socket(conn, server_side=True)
            except OSError:
                conn.close()
                continue
        threading.Thread(target=_serve, args=(conn, script, lock, connections), daemon=True).start()


if __name__ == "__main__":
    main()
