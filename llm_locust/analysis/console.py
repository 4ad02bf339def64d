"""Console lines of long work, in Locust's style, and a heartbeat that prints them while a stage runs.

``[2026-12-07 12:00:00,123] host/INFO/name: message`` is the format of Locust's console
(``locust.log.setup_logging``): the progress of ``llm-locust run`` and the stages of ``analyze``
and ``compare`` read as the lines Locust itself prints beside them.

Why own code: the format is Locust's, and the analysis never imports Locust (DESIGN.md).
"""

from __future__ import annotations

import re
import socket
import sys
import threading
import time

HOSTNAME = re.sub(r"\..*", "", socket.gethostname())
"""The host's short name, as Locust's console lines carry it (``locust/log.py``)."""


def console_line(message: str, *, name: str = "llm_locust.progress", now: float | None = None) -> str:
    """``message`` as a line of Locust's console, local time.

    >>> console_line("step 1 of 4", now=0.5).endswith("/INFO/llm_locust.progress: step 1 of 4")
    True
    """
    now = time.time() if now is None else now
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f",{int(now % 1 * 1000):03d}"
    return f"[{stamp}] {HOSTNAME}/INFO/{name}: {message}"


def clock(seconds: float) -> str:
    """``m:ss`` (or ``h:mm:ss``) of a duration in seconds.

    >>> clock(75.4), clock(3725)
    ('1:15', '1:02:05')
    """
    total = max(0, int(round(seconds)))
    hours, rest = divmod(total, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class Heartbeat:
    """While entered, print ``<command>: <stage>, <elapsed> elapsed`` every ``every_s`` seconds,
    the first after ``after_s`` (work done sooner prints nothing); :attr:`stage` names the current
    stage. Off (nothing printed) with ``quiet``.

    Parameters
    ----------
    command : str
        The command's word (``analyze``).
    every_s, after_s : float
        Seconds between lines, and before the first.
    quiet : bool
        Print nothing.
    stream : file, optional
        Where the lines go (default stderr, beside Locust's own console lines).
    """

    def __init__(self, command: str, *, every_s: float = 10.0, after_s: float = 3.0, quiet: bool = False,
                 stream=None) -> None:  # fmt: skip
        self.command = command
        self.every_s = every_s
        self.after_s = after_s
        self.quiet = quiet
        self.stream = stream
        self.stage = "starting"
        self._done = threading.Event()
        self._started = 0.0
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Heartbeat:
        self._started = time.monotonic()
        if not self.quiet:
            self._thread = threading.Thread(target=self._run, name=f"llm-locust-{self.command}-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def _run(self) -> None:
        wait_s = self.after_s
        while not self._done.wait(wait_s):
            elapsed = clock(time.monotonic() - self._started)
            print(console_line(f"{self.command}: {self.stage}, {elapsed} elapsed"), file=self.stream or sys.stderr,
                  flush=True)  # fmt: skip
            wait_s = self.every_s
