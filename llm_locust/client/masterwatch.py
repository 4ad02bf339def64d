"""A worker ends soon after its master has gone silent (killed, its host or the network to it gone).

Locust's master answers each worker heartbeat (one a second, ``HEARTBEAT_INTERVAL``) with one of
its own; a worker quits only after :data:`locust.runners.MASTER_HEARTBEAT_TIMEOUT` (60 s) without
one (``WorkerRunner.heartbeat_timeout_checker``, ``locust/runners.py``). A worker started by hand
(``locust -f … --worker --master-host …``, a Kubernetes worker pod) whose master was killed with
its launcher therefore sent load for another minute, with no one recording it.

:class:`MasterSilenceWatch` reads the same heartbeats (Locust's ``heartbeat_received`` event) and
quits the worker after :data:`MASTER_SILENCE_S` without one (Locust's own path: its users stopped,
``quitting``, exit): long enough that a master busy for a moment (a step change, the end of a
run) is not taken for a dead one, and past the 3-4 s after which the master marks a silent worker
``missing`` and gives its users to the others (:mod:`llm_locust.master.workerloss`), so a worker
cut off by the network stops its load soon after its replacements start. It watches from the
first heartbeat on (before that Locust's own connection retries apply), on the monotonic clock,
and only while the worker runs users: one without (told to stop, waiting ``--stop-timeout`` before
it says it is ready again, when the master answers none of its heartbeats) sends no load and is
left to Locust's own timeout.
"""

from __future__ import annotations

import logging
import time

import gevent

logger = logging.getLogger(__name__)

MASTER_SILENCE_S = 5.0
"""Seconds without a heartbeat from the master after which a worker quits."""
POLL_S = 0.25
"""How often the watch looks, s."""


class MasterSilenceWatch:
    """On a worker running users: quit when the master has sent no heartbeat for ``silence_s`` seconds.

    Parameters
    ----------
    environment : locust.env.Environment
        A worker's (``environment.runner`` is a ``WorkerRunner``); its ``heartbeat_received``
        event is listened to, its runner quit.
    silence_s : float, default :data:`MASTER_SILENCE_S`
        Longest silence tolerated, s.
    """

    def __init__(self, environment, *, silence_s: float = MASTER_SILENCE_S) -> None:
        self.environment = environment
        self.silence_s = silence_s
        self.last_heard_mono: float | None = None
        environment.events.heartbeat_received.add_listener(self._on_heartbeat)
        self._greenlet = gevent.spawn(self._run)

    def _on_heartbeat(self, **_kwargs) -> None:
        self.last_heard_mono = time.monotonic()

    def silent_s(self) -> float:
        """Seconds since the master's last heartbeat (0 before the first)."""
        return 0.0 if self.last_heard_mono is None else time.monotonic() - self.last_heard_mono

    def _run(self) -> None:
        while self.silent_s() < self.silence_s or self.environment.runner.user_count <= 0:
            gevent.sleep(POLL_S)
        logger.error("no heartbeat from the master for %.1f s (it ended, or the network to it is cut): "
                     "stopping this worker's %d users and quitting", self.silent_s(),
                     self.environment.runner.user_count)  # fmt: skip
        self.environment.runner.quit()
