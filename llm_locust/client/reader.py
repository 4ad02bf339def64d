"""Reading response bodies as their bytes arrive, stamped with the instant they arrived.

Two ways, one stamp:

- :func:`arrival_recv`: the calling greenlet waits for its own socket (headers, TLS streams, and
  every stream where :class:`StreamReader` is not available).
- :class:`StreamReader`: one greenlet per process reads the bodies of all open streams. A gevent
  greenlet waiting on its own socket costs a watcher start, a watcher stop and two greenlet
  switches per ``recv``; with hundreds of streams of small events that was a third of a worker's
  CPU (measured with ``benchmarks/client_overhead.py``). The reader instead waits on one
  ``epoll`` set holding every stream's socket and, when it is readable, reads each ready socket
  in turn, without switching. The request's own greenlet sleeps until its stream is over.

The stamp is the instant the kernel received the bytes: each read asks for the socket's receive
timestamp (Linux ``SO_TIMESTAMPNS``; for TCP, ``recvmsg`` reports the arrival of the newest
segment it returned), so neither a greenlet that got its turn late nor an event loop that was
busy between its poll and the read moves it. Without it (no cmsg: another platform, the end of
the stream) the stamp is the event loop's time, taken when its poll returned: never later than
the instant a greenlet got its turn, but *early* for bytes that arrived between that poll and the
read — on a busy process by milliseconds (one CI run saw a real llama.cpp server's own timings,
which lie inside the request's real time, exceed the client's E2E by 5 ms with 4 streams in one
worker: only an early stamp explains that). All instants are
``time.perf_counter`` seconds: the kernel's stamp is on the wall clock, and :class:`StreamReader`
converts every stamp of one poll round with the offset between the two clocks read once at the
round's start (:func:`_poll_clocks`), reading ``time.perf_counter`` again only to cap a stamp
later than that start at the instant of its read.

Why own code: gevent has no "many sockets, one greenlet" primitive (its ``select``/``selectors``
wrappers spawn or wait per call), and the stamp has to be the loop's, which no library gives.
"""

from __future__ import annotations

import select
import socket
import struct
import sys
import time
from typing import Protocol

import gevent
import gevent.monkey
import gevent.socket
from gevent.hub import Waiter

__all__ = ["RECV_BYTES", "StreamReader", "arrival_recv", "raw_socket"]

RECV_BYTES = 65536
"""Most bytes asked of one ``recv``."""

_PLAIN_SOCKET = gevent.socket.socket  # what ConnectionPool opens for http:// (gevent's)
_LOOP = gevent.get_hub().loop
_REALTIME = time.CLOCK_REALTIME
"""The clock of the kernel's receive stamps and of libev's loop time, read as such (not through
``time.time``: this is the OS clock of the moment, steps included, which the conversion needs)."""
_LOOP_TIME_IS_WALL = abs(_LOOP.now() - time.clock_gettime(_REALTIME)) < 60.0  # libev: wall clock; libuv: not
_epoll = gevent.monkey.get_original("select", "epoll") if hasattr(select, "EPOLLIN") else None
_EPOLLIN = getattr(select, "EPOLLIN", 1)
# Linux's SO_TIMESTAMPNS (= SCM_TIMESTAMPNS; 35 on every Linux architecture but a few old ones
# whose value Python then exports itself): a struct timespec of two native longs, the wall clock
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform.startswith("linux") else None)
_TIMESPEC = struct.Struct("@ll")
_TIMESPEC_BYTES = _TIMESPEC.size
_unpack_timespec = _TIMESPEC.unpack_from
_SOL_SOCKET = socket.SOL_SOCKET
_ANCILLARY_BYTES = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0


def _loop_arrival() -> float:
    """When the event loop's last poll returned, as ``time.perf_counter`` seconds."""
    now_wall, now = time.clock_gettime(_REALTIME), time.perf_counter()
    return now - max(0.0, now_wall - _LOOP.now())


def _poll_clocks() -> tuple[float, float, float]:
    """The clocks once per poll round: ``(now, perf_minus_wall_s, loop_t)``.

    ``now`` is ``time.perf_counter()``; ``perf_minus_wall_s`` converts an OS wall-clock instant
    (``CLOCK_REALTIME`` seconds, as the kernel stamps) to ``time.perf_counter`` seconds by adding it;
    ``loop_t`` is :func:`_loop_arrival` from the same two clock reads.
    """
    now_wall, now = time.clock_gettime(_REALTIME), time.perf_counter()
    return now, now - now_wall, now - max(0.0, now_wall - _LOOP.now())


def enable_kernel_stamps(raw) -> bool:
    """Ask the kernel to stamp what ``raw`` (an OS socket) receives (``SO_TIMESTAMPNS``); False
    when the platform has no such option or the socket refuses it (the loop's time is used)."""
    if _SO_TIMESTAMPNS is None or not _ANCILLARY_BYTES:
        return False
    try:
        raw.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def stamped_recv(raw, loop_t: float, now: float | None = None, perf_minus_wall_s: float = 0.0) -> tuple[bytes, float]:
    """``recv`` on the OS socket ``raw`` with the kernel's arrival stamp of the newest bytes read,
    as ``time.perf_counter`` seconds; ``loop_t`` when the kernel sent none (stamps not enabled,
    the peer closed). A stamp later than now (a wall-clock step) is now.

    Parameters
    ----------
    raw : socket.socket
        A non-blocking OS socket.
    loop_t : float
        The stamp when the kernel gives none, ``time.perf_counter`` seconds.
    now, perf_minus_wall_s : float, optional
        A ``time.perf_counter`` instant read before this ``recv`` and the offset from the wall
        clock to ``time.perf_counter`` read with it (:func:`_poll_clocks`, once per poll round
        of :class:`StreamReader`): the stamp is the kernel's wall-clock stamp plus the offset,
        and the clock is read again only when that is later than ``now`` (to cap it at the
        instant of the read). The two clocks tick at the same rate (NTP slews both), so this is
        the stamp that reading both clocks at the ``recv`` gives. Without ``now`` both clocks
        are read after the ``recv``.

    Raises
    ------
    BlockingIOError
        Nothing to read (spurious readiness).
    OSError
        From ``recvmsg`` (a reset, for one).
    """
    data, ancillary, _flags, _address = raw.recvmsg(RECV_BYTES, _ANCILLARY_BYTES)
    for level, kind, payload in ancillary:
        if level == _SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(payload) >= _TIMESPEC_BYTES:
            seconds, nanoseconds = _unpack_timespec(payload)
            if now is None:
                now_wall, now = time.clock_gettime(_REALTIME), time.perf_counter()
                perf_minus_wall_s = now - now_wall
            stamp = seconds + nanoseconds * 1e-9 + perf_minus_wall_s
            if stamp <= now:
                return data, stamp
            # bytes that arrived after ``now`` (or a wall-clock step): no later than the read
            return data, min(stamp, time.perf_counter())
    return data, loop_t


def arrival_recv(sock, raw) -> tuple[bytes, float]:
    """``recv`` on ``sock`` and the instant its bytes arrived (``time.perf_counter`` seconds).

    When the bytes were not there yet, the greenlet waits for the socket to become readable; the
    arrival is the kernel's stamp, else the loop's time (see the module). ``raw`` is the OS socket
    under a plain gevent socket (:func:`raw_socket`); None (TLS, or an event loop whose time is
    not the wall clock) stamps after gevent's own ``recv``.

    Raises
    ------
    OSError
        From ``recv`` (a reset, for one).
    """
    if raw is None:
        data = sock.recv(RECV_BYTES)
        return data, time.perf_counter()
    while True:
        # wait first: the previous recv nearly always emptied the socket, and a failed recv costs
        # an exception; when bytes are already there the loop reports it at once
        sock._wait(sock._read_event)
        try:
            return stamped_recv(raw, _loop_arrival())
        except BlockingIOError:  # spurious readiness: wait again
            continue


def raw_socket(sock, *, ask_stamps: bool = True):
    """The OS socket to ``recv`` from directly, or None (see :func:`arrival_recv`).

    ``ask_stamps`` asks for kernel arrival stamps (:func:`enable_kernel_stamps`): once per
    connection is enough (the option stays set), so a kept-alive connection's next request
    passes False and saves the system call.
    """
    if sock.__class__ is _PLAIN_SOCKET and _LOOP_TIME_IS_WALL:
        raw = getattr(sock, "_sock", None)
        if raw is not None and ask_stamps:
            enable_kernel_stamps(raw)
        return raw
    return None


class Consumer(Protocol):
    """What :class:`StreamReader` feeds: a stream's parser (``llm_locust.client.stream._EventStream``)."""

    def take(self, data: bytes, t: float) -> bool:
        """One read's bytes (``b""`` when the peer closed) and their arrival; True when over."""

    def fail(self, exc: OSError) -> None:
        """``recv`` raised ``exc``: the stream is over."""

    def release(self) -> None:
        """The stream is over: its deadlines no longer apply."""


class StreamReader:
    """Reads every followed stream of the process in one greenlet (Linux ``epoll``).

    :meth:`follow` blocks the calling greenlet until its consumer says the stream is over. The
    reader greenlet runs while streams are followed and ends with the last one. An exception
    thrown into a following greenlet meanwhile (a timeout from the
    :class:`~llm_locust.client.watchdog.Watchdog`, Locust stopping the user) stops following the socket
    and surfaces from :meth:`follow`. An unexpected exception from a consumer is re-raised in
    the greenlet that follows it, never in the reader.
    """

    def __init__(self) -> None:
        """Raises ``RuntimeError`` without epoll (see :meth:`available`)."""
        if _epoll is None:
            raise RuntimeError("StreamReader needs Linux epoll")
        self._poller = _epoll()
        self._streams: dict[int, tuple] = {}
        self._greenlet = None

    @staticmethod
    def available() -> bool:
        """Whether this platform and event loop can use a reader (else read per greenlet)."""
        return _epoll is not None and _LOOP_TIME_IS_WALL

    def follow(self, raw, consumer: Consumer) -> None:
        """Feed ``consumer`` every read of ``raw`` (a non-blocking OS socket) until it is over.

        Raises
        ------
        BaseException
            What was thrown into the calling greenlet meanwhile (an expired deadline, Locust's
            ``GreenletExit``), or an unexpected error of ``consumer.take``.
        """
        fd = raw.fileno()
        waiter = Waiter()
        self._streams[fd] = (raw, consumer, waiter)
        self._poller.register(fd, _EPOLLIN)
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)
        try:
            waiter.get()
        finally:
            if self._streams.pop(fd, None) is not None:
                self._poller.unregister(fd)

    def _run(self) -> None:
        hub = gevent.get_hub()
        run_callback = hub.loop.run_callback
        watcher = hub.loop.io(self._poller.fileno(), 1)
        poll = self._poller.poll
        streams = self._streams
        try:
            while streams:
                hub.wait(watcher)
                now, perf_minus_wall_s, t = _poll_clocks()  # one pair of clock reads per round
                for fd, _ in poll(0):
                    entry = streams.get(fd)
                    if entry is None:
                        continue
                    raw, consumer, waiter = entry
                    try:
                        try:
                            data, arrived = stamped_recv(raw, t, now, perf_minus_wall_s)
                        except BlockingIOError:  # spurious readiness
                            continue
                        except OSError as exc:
                            consumer.fail(exc)
                            over = True
                        else:
                            over = consumer.take(data, arrived)
                    except BaseException:
                        over = True
                        run_callback(waiter.throw, *sys.exc_info())
                    else:
                        if over:
                            run_callback(waiter.switch, None)
                    if over:
                        del streams[fd]
                        self._poller.unregister(fd)
                        consumer.release()
        finally:
            self._greenlet = None
            watcher.close()
