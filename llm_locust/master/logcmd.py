"""Follow the output of a command as the server's log (``--server-log-cmd "CMD"``), on the master.

For a log that lives where the server runs: ``kubectl logs -f deploy/vllm``, ``ssh gpu1 tail -F
/var/log/tgi.log``, ``docker logs -f sglang``. The master starts the command (split like a shell
would, :func:`shlex.split`, but run without one), reads its standard output and standard error
together (``docker logs`` replays the container's stderr, where vLLM and TGI log, on its own
stderr) and copies every complete line into ``server.log`` with its arrival stamp in
``server_log_stamps.csv``, exactly as :class:`~llm_locust.master.logfollow.LogFollower` does for a
file (this class is one, reading a pipe instead). The command's first burst of output, until it
pauses for :data:`BACKLOG_QUIET_S` (``kubectl logs -f`` prints the log so far, startup
configuration included, at once) or at most :data:`BACKLOG_MAX_S` long, is marked
``backlog``: its arrival does not date it, so those lines are placed by their own stamps. At the end the command's process group (its own session, started here) is sent
SIGTERM, then SIGKILL after :data:`STOP_GRACE_S`, by the PID started, and what it printed until
then is copied. The command also ends when the master ends without stopping it (``kill -9``,
the OOM killer, a pod's end): it runs through :func:`~llm_locust.parentdeath.command_ending_with_this_process`
(Linux's parent-death signal, SIGTERM; the same process id, so the group is still its PID). A command
that follows an idle log would otherwise wait on for ever: only its next line would meet the closed
pipe (tests/e2e/test_launcher_killed.py).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from pathlib import Path

import gevent

from llm_locust.master.logfollow import POLL_S, READ_CHUNK_BYTES, LogFollower
from llm_locust.options import parse_log_command
from llm_locust.parentdeath import command_ending_with_this_process
from llm_locust.wallclock import local_wall_s

logger = logging.getLogger(__name__)

BACKLOG_QUIET_S = 0.3
"""The first burst of output ends once the command has printed nothing for this long, s ..."""
BACKLOG_MAX_S = 5.0
"""... or this long after its first output at the latest (a busy log never pauses), s."""
STOP_GRACE_S = 5.0
"""Seconds the command gets to exit after SIGTERM before SIGKILL."""


class CommandLogFollower(LogFollower):
    """Copy a command's output into ``run_dir`` with arrival stamps.

    Parameters
    ----------
    command : str
        The command line, e.g. ``"kubectl logs -f deploy/vllm"``.
    run_dir : Path
        Run directory; ``server.log`` and ``server_log_stamps.csv`` are created there.
    poll_s : float, default POLL_S

    Attributes
    ----------
    process : subprocess.Popen or None
        The command, once started.
    exit_code : int or None
        The command's exit status once it ended (negative: the signal that ended it).

    Raises
    ------
    ValueError
        As :func:`parse_log_command`.
    """

    def __init__(self, command: str, run_dir: Path, *, poll_s: float = POLL_S) -> None:
        self.argv = parse_log_command(command)
        super().__init__(Path(run_dir) / "server-log-cmd", run_dir, poll_s=poll_s)
        self.source = command  # type: ignore[assignment]  # what the log messages name (no file is opened)
        self.process: subprocess.Popen | None = None
        self.exit_code: int | None = None
        self.ended_early: dict | None = None
        """Set when the command ended by itself before the run stopped it: ``{"at_s"`` (wall clock,
        Unix s), ``"exit_code"``, ``"lines"}`` (run.json's ``server_log_cmd_ended``)."""
        self._stopping = False
        self._fd: int | None = None
        self._eof = False
        self._last_data_mono = 0.0
        self._first_data_mono = 0.0

    def start(self) -> None:
        """Start the command, then follow its output in a greenlet (no-op when started)."""
        if self.process is None:
            try:
                self.process = subprocess.Popen(
                    command_ending_with_this_process(self.argv),  # SIGTERM when the master ends, however
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            except OSError as exc:
                logger.error("--server-log-cmd %r could not start: %s; no server log this run", self.source, exc)
                self._eof = True
                return
            assert self.process.stdout is not None  # stdout=PIPE
            self._fd = self.process.stdout.fileno()
            os.set_blocking(self._fd, False)
        super().start()

    def poll_once(self) -> int:
        """Read what the command printed since the last call; returns the bytes read."""
        if self._fd is None or self._eof:
            return 0
        try:
            data = os.read(self._fd, READ_CHUNK_BYTES)
        except BlockingIOError:
            now = time.monotonic()
            if (
                self._backlog
                and (self.lines or self._partial)
                and (now - self._last_data_mono >= BACKLOG_QUIET_S or now - self._first_data_mono >= BACKLOG_MAX_S)
            ):
                self._backlog = False  # the first burst is over: what comes next is new
            return 0
        t_s = local_wall_s()
        self._last_data_mono = time.monotonic()
        if not self._first_data_mono:
            self._first_data_mono = self._last_data_mono
        elif self._last_data_mono - self._first_data_mono >= BACKLOG_MAX_S:
            self._backlog = False
        if not data:
            self._eof = True
            self._note_exit()
            return 0
        data = self._partial + data
        cut = data.rfind(b"\n") + 1
        self._partial = data[cut:]
        if cut:
            self._write(data[:cut], t_s)
        return len(data)

    def _note_exit(self) -> None:
        if self.process is not None and (code := self.process.poll()) is not None and self.exit_code is None:
            self.exit_code = code
            logger.warning("--server-log-cmd %r ended with exit code %s after %d lines", self.source, code, self.lines)
        if not self._stopping and self.ended_early is None:  # the output ended before the run stopped it
            self.ended_early = {"at_s": local_wall_s(), "exit_code": self.exit_code, "lines": self.lines}

    def _terminate(self) -> None:
        """SIGTERM the command's process group (by the PID started here), SIGKILL after the grace."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)  # its own session: the group id is its PID
            process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=STOP_GRACE_S)
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        """Stop the command, copy the rest of its output and close the files (idempotent)."""
        if self._greenlet is not None:
            self._greenlet.kill(block=True, timeout=5)
            self._greenlet = None
        self._stopping = True
        self._terminate()
        deadline = time.monotonic() + STOP_GRACE_S  # a child that left the group may hold the pipe open
        while self._fd is not None and not self._eof and time.monotonic() < deadline:
            if self.poll_once() == 0 and not self._eof:
                gevent.sleep(0.02)
        if self.process is not None:
            if self.exit_code is None:
                self.exit_code = self.process.poll()
            if self.process.stdout is not None:
                self.process.stdout.close()
        super().stop()
