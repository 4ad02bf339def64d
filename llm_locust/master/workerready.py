"""Ready before load: a master sends its first users only to workers whose llm-locust init has run.

A Locust worker says ``client_ready`` as its runner is made (``WorkerRunner.__init__``,
``locust/runners.py``), before Locust fires ``init`` (``locust/main.py``), where the plugin sets
up the worker's record shipping, clock and load sampling (:func:`llm_locust.master.recorder.install`).
A master that starts its test as soon as its workers are connected could so send a worker its
first users while that init still ran: an init that waits on anything (I/O, a message) lets
the users run, and their records were never shipped (Locust counted the requests; ``requests.csv``
lacked them, and nothing said so).

So the worker sends the master one more message at the end of its init, once its clock exchange
with the master has settled too (:func:`announce_ready`, ``llm_ready``), and the master holds its test's start (a ``test_start`` listener, registered
before the recorder's: Locust sends the first spawn messages right after those listeners) until
every connected worker has sent it, at most :data:`READY_TIMEOUT_S`. A worker that never does
is named in an ERROR line and the run stops before any load (Locust's Ctrl-C path, exit code 1).
Workers that connect after the start (more remote workers, one back after a restart) are not
waited for: Locust gives them users as they connect.

Test hooks (environment, read only here): ``LLM_LOCUST_TEST_SLOW_INIT_S`` makes a worker's init
wait that long (a gevent sleep, so the worker's messages are handled meanwhile) before the rest of
it; ``LLM_LOCUST_TEST_READY_TIMEOUT_S`` replaces :data:`READY_TIMEOUT_S` on a master.
"""

from __future__ import annotations

import logging
import os
import time

import gevent
import gevent.event
from locust.runners import STATE_MISSING

logger = logging.getLogger(__name__)

READY = "llm_ready"
READY_TIMEOUT_S = 60.0
"""Longest a master waits at its start for a connected worker's init, s."""
SLOW_INIT_ENV = "LLM_LOCUST_TEST_SLOW_INIT_S"
READY_TIMEOUT_ENV = "LLM_LOCUST_TEST_READY_TIMEOUT_S"


def slow_init_for_tests() -> None:
    """On a worker, at the start of its init: wait ``LLM_LOCUST_TEST_SLOW_INIT_S`` seconds (test hook)."""
    delay_s = float(os.environ.get(SLOW_INIT_ENV) or 0)
    if delay_s > 0:
        gevent.sleep(delay_s)


CLOCK_SETTLE_WAIT_S = 15.0
"""Longest a worker waits for its clock exchange with the master to settle before it says it is
ready all the same (with a warning), s."""


def announce_ready(environment, *, settle_wait_s: float = CLOCK_SETTLE_WAIT_S) -> None:
    """On a worker, at the end of the plugin's init: tell the master this worker can take users,
    once its clock is placed on the master's (:class:`llm_locust.client.clock.WorkerClock` settled).

    A user's first read of the master's clock waits for the exchange only 2 s from the clock's
    start (``SETTLE_TIMEOUT_S``); a master that answered no ping by then (busy at its own start,
    its first pings answered late) let a worker stamp its first requests with its own clock: a
    worker 2 s ahead put its first request 2 s late, on top of the next one
    (``tests/e2e/test_clock_skew.py``: 1.11 requests in flight at the one-user step, one run in
    four). Waiting here, in a greenlet, keeps the master's first spawn until the clock has settled.
    """
    clock = getattr(environment, "llm_clock", None)

    def announce() -> None:
        if clock is not None and not clock.settled.wait(settle_wait_s):
            logger.warning("the clock exchange with the master has not settled after %.0f s: ready all the same",
                           settle_wait_s)  # fmt: skip
        environment.runner.send_message(READY, {"pid": os.getpid()})

    gevent.spawn(announce)


class ReadyGate:
    """On a master: hold the test's start until every connected worker has announced it is ready.

    Parameters
    ----------
    environment : locust.env.Environment
        The master's; its runner's ``clients`` are read, its ``test_start`` listened to.
    timeout_s : float, optional
        Longest wait, s (default :data:`READY_TIMEOUT_S`, or ``LLM_LOCUST_TEST_READY_TIMEOUT_S``).

    Attributes
    ----------
    ready : set of str
        Ids of the workers that announced themselves.
    """

    def __init__(self, environment, *, timeout_s: float | None = None) -> None:
        self.environment = environment
        self.timeout_s = float(os.environ.get(READY_TIMEOUT_ENV) or READY_TIMEOUT_S) if timeout_s is None else timeout_s
        self.ready: set[str] = set()
        self._announced = gevent.event.Event()
        environment.runner.register_message(READY, self._on_ready)
        environment.events.test_start.add_listener(self._on_test_start)

    def _on_ready(self, environment, msg, **_kwargs) -> None:
        self.ready.add(msg.node_id)
        self._announced.set()

    def waiting_for(self) -> list[str]:
        """Connected workers (not missing) that have not announced themselves, by id."""
        clients = self.environment.runner.clients
        return sorted(c.id for c in clients.all if c.state != STATE_MISSING and c.id not in self.ready)

    def wait(self) -> list[str]:
        """Wait until :meth:`waiting_for` is empty or the timeout ran out; the workers still not ready."""
        deadline = time.monotonic() + self.timeout_s
        while (left := self.waiting_for()) and (remaining_s := deadline - time.monotonic()) > 0:
            self._announced.clear()
            self._announced.wait(timeout=min(remaining_s, 0.5))
        return left

    def _on_test_start(self, **_kwargs) -> None:
        started = time.monotonic()
        left = self.wait()
        if not left:
            if (waited_s := time.monotonic() - started) > 0.05:
                logger.info(
                    "waited %.2f s for the workers' clock exchange and llm-locust init before the first users", waited_s
                )
            return
        logger.error("worker(s) %s never became ready: their llm-locust init did not finish within %.0f s "
                     "(see their logs); the run is stopped before any load", ", ".join(left), self.timeout_s)  # fmt: skip
        self.environment.process_exit_code = 1
        raise KeyboardInterrupt  # out of Locust's start, before its first spawn message: its Ctrl-C path
