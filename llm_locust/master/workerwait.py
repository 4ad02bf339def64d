"""Start a headless master's test the moment its ``--expect-workers`` are connected.

Locust's headless master polls for its expected workers with a one-second sleep
(``locust/main.py`` ``start_automatic_run``: ``while len(runner.clients.ready) < expect_workers:
... time.sleep(1)``), so a test whose workers connect 50 ms after the master starts waits a whole
second - and more when the first check comes before the workers' connections (a second per
check). Every short run pays it, every end-to-end test among them.

:func:`wait_for_workers`, an ``init`` listener on the master, waits on Locust's own
``worker_connect`` event instead: it returns as soon as the expected number of workers is ready
(checked again after each connection), so Locust's loop finds them all at its first check and
never sleeps. It waits at most :data:`WAIT_S` (or ``--expect-workers-max-wait``, if shorter);
workers slower than that are left to Locust's own loop, which then goes on as before (its
``--expect-workers-max-wait`` counted from there).
"""

from __future__ import annotations

import logging
import time

import gevent.event
from locust.runners import MasterRunner

logger = logging.getLogger(__name__)

WAIT_S = 10.0
"""Longest wait in ``init`` for the expected workers, s; Locust's own loop waits for later ones."""


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
        Upper bound of the wait, s (shortened to ``--expect-workers-max-wait`` when that is set).

    Returns
    -------
    float
        Seconds waited (0.0 when this process is no such master or the workers were there).
    """
    expected = _expected_workers(environment)
    if expected < 1:
        return 0.0
    runner = environment.runner
    max_wait_s = float(getattr(environment.parsed_options, "expect_workers_max_wait", 0) or 0)
    if max_wait_s > 0:
        wait_s = min(wait_s, max_wait_s)
    connected = gevent.event.Event()

    def on_connect(**_kwargs) -> None:
        connected.set()

    started = time.monotonic()
    environment.events.worker_connect.add_listener(on_connect)
    try:
        while len(runner.clients.ready) < expected:
            remaining = wait_s - (time.monotonic() - started)
            if remaining <= 0:
                logger.info("%d of %d workers ready after %.1f s; Locust goes on waiting",
                            len(runner.clients.ready), expected, wait_s)  # fmt: skip
                break
            connected.wait(timeout=remaining)
            connected.clear()
            gevent.sleep(0)  # Locust adds the worker to its clients right after firing the event
    finally:
        environment.events.worker_connect.remove_listener(on_connect)
    return time.monotonic() - started
