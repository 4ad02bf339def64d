"""Request-rate (open-loop) shape: a ladder of offered rates, each held ``--dwell-s`` seconds.

The shape runs on the master (or a standalone process). It first starts the pool and waits until
every user runs (Locust's user count reaches ``--max-users``; at most :data:`SPAWN_WAIT_S`: a
worker busy with the spawn message, seconds on a loaded machine, must not make the first sends
late); then it fixes the start of step 0, ``t0_s`` (now + :data:`LEAD_S` on the master's clock:
time for the plans to reach the workers), and sends each worker its
:class:`~llm_locust.client.schedule.RatePlan` as a Locust runner message
(:data:`~llm_locust.client.rateuser.PLAN_MESSAGE`, one per worker by ``client_id``; a standalone
runner hands it to itself). The workers are numbered in the order of Locust's own worker index
(``MasterRunner.get_worker_index``), so the split is stable and exact: worker ``i`` of ``N``
sends its share of every step (:mod:`llm_locust.client.schedule`) with seed ``seed + i``.

The user count is ``--max-users`` throughout (the pool; Locust spreads it over the workers) and
the steps are recorded with their exact planned times (``start_s = t0_s + k * dwell_s``) and
offered rate (``rate_rps``) in ``run.json``. After the last step no new send leaves and the
requests in flight get ``--drain-s`` to finish, as with the concurrency ladder.

A trace replay (``--trace FILE``) is one such step: the master reads the trace (checked, before
any load), the step lasts 0.5 s + the trace's span over ``--trace-speed`` + 1 s and offers rows /
that length (:func:`~llm_locust.client.schedule.trace_plan_step`); its warm-up is the first 0.5 s,
in which nothing is sent (every send is in the step's window); each plan carries the row count and the speed, and each worker sends its share
of the rows at their times (:func:`~llm_locust.client.schedule.trace_send_times`).

A worker that joins after the plans went out gets no plan (its users stay idle): start the run with
``--expect-workers``. A worker lost mid-run takes its share of the rate with it (the analysis
then shows the achieved rate below the requested one).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_locust.client.rateuser import PLAN_MESSAGE
from llm_locust.client.schedule import TRACE_HEAD_S, Arrival, RatePlan, trace_plan_step
from llm_locust.client.workload.trace import read_trace
from llm_locust.master.shapes import SPAWN_RATE_USERS_PER_S, _RecordingShape
from llm_locust.options import rate_ladder, validate_options
from llm_locust.wallclock import local_wall_s

LEAD_S = 1.0
"""Seconds between the plans being sent and the first scheduled send."""
SPAWN_WAIT_S = 15.0
"""Longest wait for the pool to start before the plans are sent anyway (users that failed to
start never count)."""


@dataclass(frozen=True, kw_only=True)
class RateSettings:
    """A rate run's settings, read once from Locust's parsed options.

    Attributes
    ----------
    rates_rps : tuple of float
        Offered rate of each step over all workers, requests/s.
    dwell_s, warmup_s, drain_s : float
        Seconds per step, left out at each step's start, given to in-flight requests at the end.
    arrival : str
        ``constant`` or ``poisson``.
    burstiness : float
        Gamma shape with ``poisson`` (1 = Poisson).
    max_users : int
        Users over all workers (the pool).
    seed : int
        Schedule seed (``--rate-seed``, or drawn when -1).
    trace_rows : int, default 0
        A trace replay's requests (``--trace``), 0 for a rate ladder.
    trace_speed : float, default 1
        ``--trace-speed``.
    trace_file : str, default ""
        The trace's file name (recorded in ``run.json``).
    """

    rates_rps: tuple[float, ...]
    dwell_s: float
    warmup_s: float
    drain_s: float
    arrival: str
    burstiness: float
    max_users: int
    seed: int
    trace_rows: int = 0
    trace_speed: float = 1.0
    trace_file: str = ""

    @classmethod
    def from_options(cls, options) -> RateSettings:
        """Read and check the rate options.

        Raises
        ------
        ValueError
            From :func:`~llm_locust.options.validate_options` and
            :func:`~llm_locust.options.rate_ladder` (neither or both of ``--rate``/``--rates``,
            a malformed ladder, a warm-up not shorter than the dwell).
        """
        validate_options(options)
        seed = int(options.rate_seed)
        if getattr(options, "trace", ""):
            return cls._trace(options, seed)
        return cls(
            rates_rps=tuple(rate_ladder(options)), dwell_s=float(options.dwell_s),
            warmup_s=float(options.warmup_s), drain_s=float(options.drain_s), arrival=str(options.arrival),
            burstiness=float(options.burstiness), max_users=int(options.max_users),
            seed=seed if seed >= 0 else random.SystemRandom().randrange(2**31),
        )  # fmt: skip

    @classmethod
    def _trace(cls, options, seed: int) -> RateSettings:
        """The one step of a trace replay (module docstring)."""
        trace = read_trace(options.trace, options.trace_format)
        speed = float(options.trace_speed)
        dwell_s, rate_rps = trace_plan_step(trace.span_s, len(trace.rows), speed)
        return cls(
            rates_rps=(rate_rps,), dwell_s=dwell_s, warmup_s=TRACE_HEAD_S, drain_s=float(options.drain_s),
            arrival="trace", burstiness=1.0, max_users=int(options.max_users), seed=max(seed, 0),
            trace_rows=len(trace.rows), trace_speed=speed, trace_file=Path(options.trace).name,
        )  # fmt: skip


class RateShape(_RecordingShape):
    """Offered-rate ladder (``--rate R`` or ``--rates 1,2,4,8``), each rate held ``--dwell-s``.

    Raises
    ------
    ValueError
        From :meth:`RateSettings.from_options` at the first tick.
    """

    kind = "rate"
    _settings: RateSettings | None = None
    _t0_s: float | None = None
    _first_tick_s: float | None = None
    _workers: int = 0

    def settings(self) -> RateSettings:
        """The run's settings, read from the parsed options on first use."""
        if self._settings is None:
            runner: Any = self.runner  # a MasterRunner or LocalRunner once Locust ticks the shape
            self._settings = RateSettings.from_options(runner.environment.parsed_options)
        return self._settings

    def _send_plans(self, t0_s: float) -> None:
        """Send each worker (or this process, standalone) its plan."""
        settings = self.settings()
        runner: Any = self.runner
        clients = getattr(runner, "clients", None)
        if clients is None:
            ids: list[str | None] = [None]
        else:
            connected = clients.ready + clients.spawning + clients.running
            ids = [c.id for c in sorted(connected, key=lambda c: runner.get_worker_index(c.id))]
        self._workers = len(ids)
        for index, client_id in enumerate(ids):
            plan = RatePlan(
                t0_s=t0_s, rates_rps=settings.rates_rps, dwell_s=settings.dwell_s,
                arrival=Arrival.CONSTANT.value if settings.trace_rows else settings.arrival,
                burstiness=settings.burstiness, seed=settings.seed, worker_index=index, workers=len(ids),
                trace_rows=settings.trace_rows, trace_speed=settings.trace_speed,
            )  # fmt: skip
            runner.send_message(PLAN_MESSAGE, plan.to_message(), client_id)

    def tick(self):
        settings = self.settings()
        self._regain_lost_users()
        if self._t0_s is None:
            now = local_wall_s()
            if self._first_tick_s is None:
                self._first_tick_s = now
            if self.get_current_user_count() < settings.max_users and now - self._first_tick_s < SPAWN_WAIT_S:
                return settings.max_users, SPAWN_RATE_USERS_PER_S  # the pool is still starting
            self._t0_s = now + LEAD_S
            self._send_plans(self._t0_s)
        now = local_wall_s()
        index = int((now - self._t0_s) // settings.dwell_s)
        rates = settings.rates_rps
        if index < len(rates):
            if index >= 0:
                for k in range(len(self.steps), index + 1):  # a late tick records every step it passed
                    self._enter_step(
                        k, settings.max_users, start_s=self._t0_s + k * settings.dwell_s, rate_rps=rates[k]
                    )
            return settings.max_users, SPAWN_RATE_USERS_PER_S
        end_s = self._t0_s + len(rates) * settings.dwell_s
        for k in range(len(self.steps), len(rates)):
            self._enter_step(k, settings.max_users, start_s=self._t0_s + k * settings.dwell_s, rate_rps=rates[k])
        self._finish(end_s)
        return self._drain(now - end_s, settings.drain_s)

    def describe(self) -> dict:
        description = super().describe()
        settings = self.settings()
        description.update(
            rates=list(settings.rates_rps), dwell_s=settings.dwell_s, warmup_s=settings.warmup_s,
            arrival=settings.arrival, burstiness=settings.burstiness, seed=settings.seed,
            max_users=settings.max_users, workers=self._workers, t0_s=self._t0_s,
        )  # fmt: skip
        if settings.trace_rows:
            description.update(
                trace=settings.trace_file, trace_rows=settings.trace_rows, trace_speed=settings.trace_speed
            )
        return description
