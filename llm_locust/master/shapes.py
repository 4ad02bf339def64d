"""Load shapes for the diagnosis: a concurrency ladder and a single-request baseline.

Both run on the master (or a standalone process) and record the wall-clock start of each step,
which :mod:`llm_locust.master.runwriter` writes to ``run.json`` (``shape.steps``) for ``llm_locust/analysis/``.
Options come from Locust's parsed options (``--ladder``, ``--dwell-s``, ``--warmup-s``,
``--drain-s``, ``--baseline-requests``), read and checked once, at the shape's first tick (the
test has started: the web UI can no longer change them), into a frozen :class:`LadderSettings`.

A worker lost mid-run (no heartbeat for 3 s: Locust marks it ``missing``) takes its users with
it, and Locust's master dispatches them again only with ``--enable-rebalancing``; the shape runner
calls ``start`` only when the tick's value changes. So at each tick both shapes look for workers
newly marked missing and, when there are, make the runner dispatch the current step again
(``runner.shape_last_tick = None``): the users come back on the workers left, about 4–5 s after
the worker died (:mod:`llm_locust.master.workerloss` records the loss).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gevent
from locust import LoadTestShape
from locust.runners import STATE_MISSING, Runner

from llm_locust.options import parse_ladder, validate_options
from llm_locust.wallclock import local_wall_s

SPAWN_RATE_USERS_PER_S = 1000.0
"""Users started per second at a step change: fast enough that the ramp ends within the warm-up."""
LOCUST_TICK_S = 1.0
"""Seconds between two calls of a shape's ``tick`` (Locust's ``Runner.shape_worker`` sleeps 1 s)."""
DRAIN_POLL_S = 0.05
"""Seconds between two looks at the user count while the drain waits for the last users to stop."""


class _RecordingShape(LoadTestShape):
    """A shape that records when each step started (wall clock) and describes itself."""

    abstract = True
    kind = "none"

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[dict] = []
        self._missing: set[str] = set()
        self._draining = False
        self._follows_test_start = False

    @property
    def active_runner(self) -> Runner:
        """The runner driving this shape (Locust sets :attr:`runner` before the first tick).

        Raises
        ------
        RuntimeError
            If no runner has been set.
        """
        if self.runner is None:
            raise RuntimeError(f"{type(self).__name__} is not attached to a runner")
        return self.runner

    def reset_time(self) -> None:
        """Restart the shape's clock (:meth:`get_run_time`) and begin a step 0 already recorded now.

        Locust restarts it as the shape starts and, on a master, again once the ``test_start``
        listeners have run (``MasterRunner.start``, called with the first tick's users): the
        first tick, which records step 0, runs before that, 9-49 ms before run.json's
        ``started_at_s``, and step 0 then lasted that much more than ``--dwell-s``. A standalone
        runner (``LocalRunner.start``) does not restart it after the listeners: the shape does
        (:meth:`_restart_with_the_test`).
        """
        super().reset_time()
        if len(self.steps) == 1 and self.steps[0]["end_s"] is None:
            self.steps[0]["start_s"] = local_wall_s()

    def _restart_with_the_test(self) -> None:
        """At the first tick: restart the shape's clock once the ``test_start`` listeners have run
        (a listener of its own, added after the run directory's), as a master does itself; a
        standalone run's step 0 began 29-38 ms before ``started_at_s`` otherwise."""
        if not self._follows_test_start:
            self._follows_test_start = True
            self.active_runner.environment.events.test_start.add_listener(lambda **_kwargs: self.reset_time())

    def _regain_lost_users(self) -> None:
        """When a worker is newly missing, have the runner dispatch the current tick again (over
        the workers left: Locust's dispatcher already dropped the missing one)."""
        clients = getattr(self.runner, "clients", None)
        if clients is None:
            return
        missing = {client.id for client in clients.all if client.state == STATE_MISSING}
        if missing - self._missing and (clients.ready or clients.spawning or clients.running):
            self.active_runner.shape_last_tick = None
        self._missing = missing

    def _enter_step(self, index: int, users: int, *, start_s: float | None = None, **extra) -> None:
        """Record step ``index`` as started now (or at ``start_s``, wall clock), with ``extra``
        keys; the previous step ends then."""
        if len(self.steps) <= index:
            now = local_wall_s() if start_s is None else start_s
            if self.steps:
                self._end_step(now)
            self.steps.append({"index": index, "users": users, "start_s": now, "end_s": None, **extra})

    def _end_step(self, end_s: float) -> None:
        """End the last step at ``end_s`` (wall clock); its ``duration_s`` is the length it held, s."""
        step = self.steps[-1]
        step["end_s"] = end_s
        step["duration_s"] = round(end_s - step["start_s"], 6)

    def _finish(self, end_s: float | None = None) -> None:
        if self.steps and self.steps[-1]["end_s"] is None:
            self._end_step(local_wall_s() if end_s is None else end_s)

    def _drain(self, drain_time_s: float, drain_s: float):
        """After the last step: let in-flight requests finish (and be recorded), then stop.

        Users stop gracefully (Locust's ``stop_timeout``, raised to ``--drain-s`` for this) so the
        requests of the last step that are still streaming complete and count in its in-flight
        average; at most ``--drain-s`` seconds, plus the workers' report delay.
        """
        self._finish()
        if drain_s <= 0 or drain_time_s > drain_s + 10:
            return None
        if self._draining and self._users_gone_within(LOCUST_TICK_S):
            return None
        self._draining = True  # from the next tick on the users have been told to stop
        environment = self.active_runner.environment
        environment.stop_timeout = max(environment.stop_timeout or 0.0, drain_s)
        return 0, SPAWN_RATE_USERS_PER_S

    def _users_gone_within(self, limit_s: float) -> bool:
        """Whether the users are all gone now or become so within ``limit_s`` (polled every
        :data:`DRAIN_POLL_S` in this greenlet): the drain then ends at once, not at Locust's next
        tick, up to a second later."""
        return self._holds_within(lambda: self.get_current_user_count() <= 0, limit_s)

    def _holds_within(self, condition: Callable[[], bool], limit_s: float) -> bool:
        """Whether ``condition()`` holds now or comes to within ``limit_s`` (looked at every
        :data:`DRAIN_POLL_S` in this greenlet)."""
        waited_s = 0.0
        while not condition():
            if waited_s >= limit_s - 1e-9:
                return False
            self._wait_s(DRAIN_POLL_S)
            waited_s += DRAIN_POLL_S
        return True

    @staticmethod
    def _wait_s(seconds: float) -> None:
        """Wait ``seconds`` in the shape's greenlet (the tests advance a fake clock instead)."""
        gevent.sleep(seconds)

    def describe(self) -> dict:
        """The ``shape`` object of run.json: kind, settings and the steps run so far."""
        return {"kind": self.kind, "steps": [dict(step) for step in self.steps]}


@dataclass(frozen=True, kw_only=True)
class LadderSettings:
    """A ladder's settings: users per step, seconds per step, warm-up and drain, s."""

    ladder: tuple[int, ...]
    dwell_s: float
    warmup_s: float
    drain_s: float

    @classmethod
    def from_options(cls, options) -> LadderSettings:
        """Read and check ``--ladder``, ``--dwell-s``, ``--warmup-s``, ``--drain-s``.

        Raises
        ------
        ValueError
            From :func:`~llm_locust.options.validate_options` (a malformed ladder, a warm-up
            not shorter than the dwell).
        """
        validate_options(options)
        return cls(
            ladder=tuple(parse_ladder(options.ladder)),
            dwell_s=float(options.dwell_s),
            warmup_s=float(options.warmup_s),
            drain_s=float(options.drain_s),
        )


class LadderShape(_RecordingShape):
    """Concurrency ladder: hold each of ``--ladder`` (e.g. 1,2,4,8) users for ``--dwell-s`` seconds.

    Step ``k`` begins ``k * dwell_s`` after the test's start, on time: Locust calls :meth:`tick`
    once a second, so a step change falling between two calls is waited for inside the earlier
    one (before, the steps were cut on Locust's ticks: a 5 s step held 4-6 s).

    The first ``--warmup-s`` seconds of each step are recorded as warm-up; ``llm_locust/analysis/`` leaves
    them out. After the last step, requests still in flight get up to ``--drain-s`` seconds to
    finish (no new ones start), then the test stops by itself.

    Raises
    ------
    ValueError
        From :func:`~llm_locust.options.parse_ladder` on a malformed ladder, or when
        ``--warmup-s`` is not shorter than ``--dwell-s``.
    """

    kind = "ladder"
    _settings: LadderSettings | None = None

    def settings(self) -> LadderSettings:
        """The ladder's settings, read from the parsed options on first use."""
        if self._settings is None:
            self._settings = LadderSettings.from_options(self.active_runner.environment.parsed_options)
        return self._settings

    def tick(self):
        """The current step's users; a step that begins before Locust's next tick is waited for here
        and begun on time (each step then lasts ``--dwell-s``, not up to a tick more or less)."""
        settings = self.settings()
        ladder, dwell_s = settings.ladder, settings.dwell_s
        self._restart_with_the_test()
        self._regain_lost_users()
        run_time = self.get_run_time()
        index = int(run_time // dwell_s)
        if index < len(ladder) and (to_next_s := (index + 1) * dwell_s - run_time) < LOCUST_TICK_S:
            self._wait_s(to_next_s)
            index, run_time = index + 1, max(self.get_run_time(), (index + 1) * dwell_s)
        if index < len(ladder):
            # step k begins k * dwell_s after the clock's start: step 0 at the start itself
            self._enter_step(index, ladder[index], start_s=local_wall_s() - run_time if index == 0 else None)
            return ladder[index], SPAWN_RATE_USERS_PER_S
        return self._drain(run_time - len(ladder) * dwell_s, settings.drain_s)

    def describe(self) -> dict:
        description = super().describe()
        settings = self.settings()
        description.update(ladder=list(settings.ladder), dwell_s=settings.dwell_s, warmup_s=settings.warmup_s)
        return description


class BaselineShape(_RecordingShape):
    """Single-request baseline: one user, one stream at a time, until ``--baseline-requests``
    requests have completed (as counted in Locust's stats on this process), then stop.

    The exact count is kept by the user (:class:`~llm_locust.client.baseline.BaselineUser`, which
    stops itself after N requests): workers report every few seconds, so this shape alone would
    let a few extra requests through. ``llm_locust/analysis/`` takes the first N by start time either way.

    The worker reports its last request at once, and from the second tick on each tick looks for
    the count every :data:`DRAIN_POLL_S` for up to a tick: the test ends within ~50 ms of the
    report, not at Locust's next tick (before, 1.3-2.3 s after the last request, waiting for the
    worker's 3-s report timer and then the tick).
    """

    kind = "baseline"
    _requests: int | None = None

    def requests(self) -> int:
        """``--baseline-requests``, read and checked on first use."""
        if self._requests is None:
            options = self.active_runner.environment.parsed_options
            if options is None:
                raise RuntimeError("the baseline shape needs Locust's parsed options (--baseline-requests)")
            validate_options(options)
            self._requests = int(options.baseline_requests)
        return self._requests

    def tick(self):
        self._restart_with_the_test()
        self._regain_lost_users()
        requests = self.requests()
        wait_s = LOCUST_TICK_S if self.steps else 0.0  # the first tick starts the user at once
        if self._holds_within(lambda: self.active_runner.stats.total.num_requests >= requests, wait_s):
            self._finish()
            return None
        self._enter_step(0, 1)
        return 1, 1.0

    def describe(self) -> dict:
        description = super().describe()
        description.update(requests=self.requests(), warmup_s=0.0)
        return description
