"""The connections a Locust process streams over: keep-alive, a per-worker limit, timed waits.

Each :class:`~llm_locust.client.user.LLMUser` takes a connection from a :class:`ConnectionPool` for one
request and gives it back afterwards. By default every user has a pool of its own (one
kept-alive connection per user). With ``--connections N`` all users of the process share one pool
of at most N connections: fewer connections than users reproduces a client-side bottleneck, and
the time a request waits for a free connection is measured apart (``conn_wait_ms``) from its
TTFT. With ``--keep-alive false`` every request opens a new connection and asks the server to
close it (``Connection: close``).

Sockets are gevent sockets (Locust monkey-patches the process); the HTTP exchange itself is in
:mod:`llm_locust.client.stream`.
"""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import gevent.lock
import gevent.monkey
import gevent.ssl

__all__ = ["ConnectionPool", "Target"]


class Target:
    """Where requests go: scheme, host, port and base path of ``--host``.

    >>> t = Target("http://127.0.0.1:8000/api/")
    >>> (t.host, t.port, t.base_path, t.host_header)
    ('127.0.0.1', 8000, '/api', '127.0.0.1:8000')
    """

    __slots__ = ("url", "tls", "host", "port", "base_path", "host_header")

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"--host must be an http:// or https:// URL, got {url!r}")
        self.url = url
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        self.base_path = parts.path.rstrip("/")
        default_port = (self.tls and self.port == 443) or (not self.tls and self.port == 80)
        name = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = name if default_port else f"{name}:{self.port}"


_select = gevent.monkey.get_original("select", "select")
"""The OS's select: a zero-timeout poll that never yields to other greenlets (gevent's would, and
the request, already timed, would wait for them before it is sent)."""


def _alive(sock: socket.socket) -> bool:
    """An idle kept-alive socket is alive when it is not readable (no FIN, no stray bytes)."""
    try:
        if sock.fileno() < 0:
            return False
        readable, _, _ = _select([sock.fileno()], [], [], 0.0)
        return not readable
    except (OSError, ValueError):
        return False


class ConnectionPool:
    """Connections to one target, optionally at most ``limit`` at a time.

    Parameters
    ----------
    target : Target
        Where to connect.
    limit : int or None, default None
        Most connections in use at once (waiters queue, FIFO); None for no limit.
    keep_alive : bool, default True
        Keep connections open between requests.
    """

    def __init__(self, target: Target, *, limit: int | None = None, keep_alive: bool = True) -> None:
        self.target = target
        self.keep_alive = keep_alive
        self.limit = limit
        self._slots = gevent.lock.BoundedSemaphore(limit) if limit else None
        self._idle: list[socket.socket] = []
        self._tls = gevent.ssl._create_unverified_context() if target.tls else None
        self.opened = 0
        """Connections opened so far (for tests and the benchmark)."""

    def wait_for_slot(self, timeout_s: float | None) -> float:
        """Block until a connection may be used; return the seconds waited (0 without a limit).

        Raises
        ------
        TimeoutError
            No slot within ``timeout_s``.
        """
        if self._slots is None:
            return 0.0
        started = time.perf_counter()
        if not self._slots.acquire(timeout=timeout_s):
            raise TimeoutError(f"no free connection of {self.limit} within {timeout_s} s")
        return time.perf_counter() - started

    def release_slot(self) -> None:
        """Give back the slot taken by :meth:`wait_for_slot`."""
        if self._slots is not None:
            self._slots.release()

    def idle_socket(self) -> socket.socket | None:
        """A kept-alive connection that is still open, or None (closed ones are dropped)."""
        while self._idle:
            sock = self._idle.pop()
            if _alive(sock):
                return sock
            sock.close()
        return None

    def connect(self, timeout_s: float | None) -> socket.socket:
        """Open a new connection (TCP, then TLS for https) within ``timeout_s`` seconds.

        Raises
        ------
        TimeoutError
            Not connected within ``timeout_s``.
        OSError
            Refused, unreachable, reset, TLS failure.
        """
        sock = socket.create_connection((self.target.host, self.target.port), timeout=timeout_s)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_hostname=self.target.host)
        except BaseException:
            sock.close()
            raise
        self.opened += 1
        return sock

    def give_back(self, sock: socket.socket, *, reusable: bool) -> None:
        """Keep ``sock`` for the next request when ``reusable`` and keep-alive is on, else close it."""
        if reusable and self.keep_alive:
            self._idle.append(sock)
        else:
            try:
                sock.close()
            except OSError:
                pass

    def close(self) -> None:
        """Close every idle connection."""
        while self._idle:
            self._idle.pop().close()
