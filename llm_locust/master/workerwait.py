"""Start a headless master's test the moment its ``--expect-workers`` are connected.

Locust's headless master polls for its expected workers with a one-second sleep
(``locust/main.py`` ``start_automatic_run``: ``while len(runner.clients.ready) < expect_workers:
... time.sleep(1)``), so a test whose workers connect 50 ms after the master starts waits a whole
second - and more when the first check comes before the workers' connections (a second per
check). Every short run pays it, every end-to-end test among them.

:func:`wait_for_workers`, an ``init`` listener on the master, waits on Locust's own
``worker_connect`` event instead: it returns as soon as the expected number of workers is ready
(checked again after each connection), so Locust's loop finds them all at its first check and
never sleeps. With ``--expect-workers-max-wait`` it waits at most that long (and :data:`WAIT_S`);
workers slower than that are left to Locust's own loop, which then goes on as before (its
``--expect-workers-max-wait`` counted from there). Without it, it waits until they come, saying
every :data:`WAIT_S` how many are ready (remote workers may take minutes to be started).

A stop while it waits (Ctrl-C, or SIGTERM, which the master turns into KeyboardInterrupt: the
launcher's ``--timeout-s``) ends the master with one log line and exit status 1, after telling
the workers already connected to quit; in Locust's own loop it was a traceback.
"""

from __future__ import annotations

import logging
import time

import gevent.event
from locust.runners import MasterRunner

logger = logging.getLogger(__name__)

WAIT_S = 10.0
"""Seconds between the wait's progress lines; with ``--expect-workers-max-wait``, also the longest
wait here (Locust's own loop waits for later ones)."""


def _expected_workers(environment) -> int:
    """Workers a master started headless (or with ``--autostart``) waits for; 0 when it waits for none."""
    options = environment.parsed_options
    if not isinstance(environment.runner, MasterRunner) or options is None:
        return 0
    if not (getattr(options, "headless", False) or getattr(options, "autostart", False)):
        return 0  # the web UI's start button: nothing waits
    return int(getattr(options, "expect_workers", 0) or 0)


def wait_for_workers(environment, *, wait_s: float = WAIT_S) -> float:
    """On a master that starts by itself: wait until ``--expect-workers`` workers are ready.

    Parameters
    ----------
    environment : locust.env.Environment
        The master's; its runner's ``clients`` are counted after each ``worker_connect``.
    wait_s : float
        With ``--expect-workers-max-wait``: the upper bound of the wait, s (shortened to that
        option). Without it: the period of the progress lines (the wait itself has no bound).

    Returns
    -------
    float
        Seconds waited (0.0 when this process is no such master or the workers were there).

    Raises
    ------
    SystemExit
        Status 1, when the wait was interrupted (KeyboardInterrupt: Ctrl-C, or SIGTERM).
    """
    expected = _expected_workers(environment)
    if expected < 1:
        return 0.0
    runner = environment.runner
    max_wait_s = float(getattr(environment.parsed_options, "expect_workers_max_wait", 0) or 0)
    bounded = max_wait_s > 0
    if bounded:
        wait_s = min(wait_s, max_wait_s)
    connected = gevent.event.Event()

    def on_connect(**_kwargs) -> None:
        connected.set()

    started = time.monotonic()
    next_line = started + wait_s  # bounded: the wait's end too (it stops there, before any line)
    environment.events.worker_connect.add_listener(on_connect)
    try:
        while len(runner.clients.ready) < expected:
            now = time.monotonic()
            if bounded and now - started >= wait_s:
                logger.info("%d of %d workers ready after %.1f s; Locust goes on waiting",
                            len(runner.clients.ready), expected, wait_s)  # fmt: skip
                break
            if now >= next_line:
                logger.info("waiting for workers: %d of %d ready after %.0f s",
                            len(runner.clients.ready), expected, now - started)  # fmt: skip
                next_line = now + wait_s
            connected.wait(timeout=max(0.0, next_line - now))
            connected.clear()
            gevent.sleep(0)  # Locust adds the worker to its clients right after firing the event
    except KeyboardInterrupt:
        logger.error("stopped while waiting for workers: %d of %d ready after %.1f s; nothing was run",
                     len(runner.clients.ready), expected, time.monotonic() - started)  # fmt: skip
        runner.quit()  # the workers already connected are told to quit
        raise SystemExit(1) from None
    finally:
        environment.events.worker_connect.remove_listener(on_connect)
    return time.monotonic() - started
