"""Follow the server's log during a run (``--server-log PATH``), on the master.

One greenlet polls the file every :data:`POLL_S` seconds, copies every new complete line into
the run directory's ``server.log`` (bytes verbatim) and stamps it with the wall clock at which it
was read, in ``server_log_stamps.csv`` (one row per read: ``first_line, n_lines, t_s, backlog``,
the format :mod:`llm_locust.analysis.server.files` reads). Lines already in the file when following starts
are copied too (the startup configuration is in them) but marked ``backlog``: their stamp does
not date them. A file that is truncated or replaced (log rotation) is followed from its start;
one that does not exist yet is waited for.
"""

from __future__ import annotations

import csv
import logging
import os
import time
from pathlib import Path
from typing import BinaryIO

import gevent

from llm_locust.analysis.schema import SERVER_LOG, SERVER_LOG_STAMPS, STAMP_COLUMNS
from llm_locust.wallclock import local_wall_s

logger = logging.getLogger(__name__)

POLL_S = 0.1
"""Seconds between two reads of the followed file."""
READ_CHUNK_BYTES = 4 * 1024 * 1024
"""Most bytes read per poll (a huge backlog is copied over several polls)."""


class LogFollower:
    """Copy a growing log into ``run_dir`` with arrival stamps.

    Parameters
    ----------
    source : Path
        The server's log file (it may not exist yet).
    run_dir : Path
        Run directory; ``server.log`` and ``server_log_stamps.csv`` are created there.
    poll_s : float, default POLL_S

    Raises
    ------
    ValueError
        If ``source`` is the run directory's own ``server.log`` (it would copy itself).
    """

    def __init__(self, source: Path, run_dir: Path, *, poll_s: float = POLL_S) -> None:
        self.source = Path(source)
        self.dest = Path(run_dir) / SERVER_LOG
        if self.source.resolve() == self.dest.resolve():
            raise ValueError(
                f"--server-log {source} is the run directory's own server.log: point it at the server's log file"
            )
        self.poll_s = poll_s
        self.lines = 0
        self._out = open(self.dest, "wb")
        self._stamps_file = open(Path(run_dir) / SERVER_LOG_STAMPS, "w", newline="", encoding="utf-8")
        self._stamps = csv.writer(self._stamps_file)
        self._stamps.writerow(STAMP_COLUMNS)
        self._in: BinaryIO | None = None
        self._inode: int | None = None
        self._offset = 0
        self._partial = b""
        self._backlog = True
        self._warned = False
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        """Start following in a greenlet (no-op when already started)."""
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._loop)

    def stop(self) -> None:
        """Stop following, copy what is left (an unfinished last line too) and close the files."""
        if self._greenlet is not None:
            self._greenlet.kill(block=True, timeout=5)
            self._greenlet = None
        if self._out.closed:
            return
        try:
            while self.poll_once() > 0:
                pass
        except OSError as exc:
            logger.warning("server log %s: last read failed: %s", self.source, exc)
        if self._partial:
            self._write(self._partial + b"\n", local_wall_s())
            self._partial = b""
        for handle in (self._in, self._out, self._stamps_file):
            if handle is not None:
                handle.close()

    def _open(self) -> bool:
        try:
            handle = open(self.source, "rb")
        except OSError:
            self._backlog = False  # a file created after following began holds only new lines
            if not self._warned:
                self._warned = True
                logger.warning("server log %s does not exist (yet); waiting for it", self.source)
            return False
        if self._in is not None:
            self._in.close()
        self._in, self._inode, self._offset = handle, os.fstat(handle.fileno()).st_ino, 0
        return True

    def poll_once(self) -> int:
        """Read what is new; returns the bytes read (0 when nothing was new)."""
        if self._in is None and not self._open():
            return 0
        try:
            stat = os.stat(self.source)
            if stat.st_ino != self._inode or stat.st_size < self._offset:  # rotated or truncated
                self._flush_partial()
                if not self._open():
                    return 0
        except FileNotFoundError:
            pass  # removed: keep reading the open handle until it is replaced
        handle = self._in
        if handle is None:  # not reached: opened above
            return 0
        data = handle.read(READ_CHUNK_BYTES)
        t_s = local_wall_s()
        if not data:
            self._backlog = False
            return 0
        self._offset += len(data)
        data = self._partial + data
        cut = data.rfind(b"\n") + 1
        self._partial = data[cut:]
        if cut:
            self._write(data[:cut], t_s)
        if len(data) - cut < READ_CHUNK_BYTES and handle.tell() >= os.fstat(handle.fileno()).st_size:
            self._backlog = False
        return len(data)

    def _flush_partial(self) -> None:
        if self._partial:
            self._write(self._partial + b"\n", local_wall_s())
            self._partial = b""

    def _write(self, chunk: bytes, t_s: float) -> None:
        count = chunk.count(b"\n")
        self._out.write(chunk)
        self._out.flush()
        self._stamps.writerow((self.lines, count, f"{t_s:.6f}", int(self._backlog)))
        self._stamps_file.flush()
        self.lines += count

    def _loop(self) -> None:
        next_t = time.monotonic()
        while True:
            try:
                self.poll_once()
            except OSError as exc:
                logger.warning("reading server log %s failed: %s; will retry", self.source, exc)
            next_t += self.poll_s
            gevent.sleep(max(0.0, next_t - time.monotonic()))
