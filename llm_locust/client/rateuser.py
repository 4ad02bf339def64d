"""``RateUser``: a pool user of a request-rate (open-loop) run; sends on the worker's schedule.

The master's :class:`~llm_locust.master.rateshape.RateShape` sends each worker its
:class:`~llm_locust.client.schedule.RatePlan` (a Locust runner message, :data:`PLAN_MESSAGE`)
before it spawns the pool (``--max-users`` users over all workers). On the worker, one
:class:`WorkerSchedule` (the environment's ``llm_rate_schedule``) hands out the send times in
order, one to each user that is free:

- A free user takes the earliest send not yet taken (in Locust's ``wait_time``) and sleeps until
  its absolute time, then sends; so while users are free every send leaves at its time, and
  users never wake together (each holds a different time).
- When no user is free at a send's time, the send waits for the first user that frees up and
  leaves then, late; the record keeps the scheduled time (``scheduled_s``) beside the real one
  (``t_start_s``), so the lag is in ``requests.csv`` and the latency counted from the schedule
  (``analysis``: ``ttft_from_schedule_ms``) includes it. Nothing is dropped: one user takes one
  send at a time, so late sends leave one per freed user, earliest first, never all at once.
- A send whose user was stopped (the end of the last step, a stop) before it left is not sent;
  the analysis counts the step's planned sends against those recorded.

The wait runs in Locust's ``wait_time`` (the user's *waiting* state), so a stop ends it at once
(Locust kills waiting users) and never sends a request after the shape's end.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import gevent
from locust import events as locust_events

from llm_locust.client.clock import master_wall_s
from llm_locust.client.schedule import RatePlan, send_times, total_sends
from llm_locust.client.user import LLMUser

logger = logging.getLogger(__name__)

PLAN_MESSAGE = "llm_rate_plan"
"""Runner message type of a :class:`RatePlan` (master -> one worker, or to itself when local)."""
SCHEDULE_ATTRIBUTE = "llm_rate_schedule"
"""Attribute of the worker's ``Environment`` holding its :class:`WorkerSchedule`."""
POLL_S = 0.05
"""How often a user looks again while the plan has not arrived yet, s."""
IDLE_S = 1.0
"""How long a user sleeps between looks once the schedule is spent, s."""


class WorkerSchedule:
    """This worker's sends, handed out earliest first.

    Parameters
    ----------
    plan : RatePlan
        This worker's plan.

    Attributes
    ----------
    planned : int
        Sends in the whole schedule.
    taken : int
        Sends handed to users so far.
    """

    def __init__(self, plan: RatePlan) -> None:
        self.plan = plan
        self.planned = total_sends(plan)
        self.taken = 0
        self._times: Iterator[tuple[float, int]] = send_times(plan)

    def take(self) -> float | None:
        """The next send's time (master clock, Unix s), or None when the schedule is spent."""
        entry = next(self._times, None)
        if entry is None:
            return None
        self.taken += 1
        return entry[0]


def _on_plan(environment, msg, **_kwargs) -> None:
    try:
        plan = RatePlan.from_message(msg.data)
    except ValueError as exc:
        logger.error("rate plan not used: %s", exc)
        return
    setattr(environment, SCHEDULE_ATTRIBUTE, WorkerSchedule(plan))
    logger.info(
        "rate plan: worker %d of %d, %d sends from %.3f (rates %s req/s over all workers)",
        plan.worker_index, plan.workers, total_sends(plan), plan.t0_s, list(plan.rates_rps),
    )  # fmt: skip


def install(events=locust_events) -> None:
    """Register the plan's message listener on every runner but a master (on Locust's ``init``).

    Called by the rate locustfile (``llm_locust/locustfiles/rate.py``) at import.
    """

    @events.init.add_listener
    def _register(environment, **_kwargs) -> None:
        from locust.runners import MasterRunner

        if environment.runner is not None and not isinstance(environment.runner, MasterRunner):
            environment.runner.register_message(PLAN_MESSAGE, _on_plan)


class RateUser(LLMUser):
    """One user of the open-loop pool: sends at the times of the worker's schedule (module
    docstring); each record carries ``scheduled_s``."""

    abstract = True
    _next_s: float | None = None

    def wait_time(self) -> float:
        """Take the next send and return the seconds until it (0 when it is already due).

        Locust sleeps that long in the user's waiting state, then runs :meth:`stream_one`.
        """
        schedule: WorkerSchedule | None = getattr(self.environment, SCHEDULE_ATTRIBUTE, None)
        if schedule is None:
            return POLL_S
        scheduled_s = schedule.take()
        self._next_s = scheduled_s
        if scheduled_s is None:
            return IDLE_S
        return max(0.0, scheduled_s - master_wall_s(self.environment))

    def ready_to_send(self) -> bool:
        """Send the request taken in :meth:`wait_time` (none before the first wait, nor once the
        schedule is spent), recording its scheduled time."""
        scheduled_s, self._next_s = self._next_s, None
        if scheduled_s is None:
            return False
        early_s = scheduled_s - master_wall_s(self.environment)
        if early_s > 0:  # the event loop's timer may fire before its time (its clock is cached): never send early
            gevent.sleep(early_s)
        self.scheduled_s = scheduled_s
        return True
