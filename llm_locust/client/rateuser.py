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

A trace replay (``--trace``) runs the same way: the plan says how many rows the master read and
at what speed; the worker reads its own copy of the trace (the same ``--trace`` option) and its
schedule hands each user a send time *and its row*: the user sends that row's request
(:class:`~llm_locust.client.workload.traceprompts.TracePrompts`) and the record keeps the row's
index (``trace_row``) and session id.

The wait runs in Locust's ``wait_time`` (the user's *waiting* state), so a stop ends it at once
(Locust kills waiting users) and never sends a request after the shape's end.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import gevent
from locust import events as locust_events

from llm_locust.client.clock import master_wall_s
from llm_locust.client.schedule import RatePlan, send_times, total_sends, trace_send_times
from llm_locust.client.user import LLMUser
from llm_locust.client.workload.source import RequestSource, WorkItem
from llm_locust.client.workload.trace import TraceRow

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
    trace_rows : sequence of TraceRow, optional
        The whole trace of a trace replay (``plan.trace_rows`` of them); None for a rate ladder.

    Attributes
    ----------
    planned : int
        Sends in the whole schedule.
    taken : int
        Sends handed to users so far.
    """

    def __init__(self, plan: RatePlan, trace_rows: Sequence[TraceRow] | None = None) -> None:
        self.plan = plan
        self.taken = 0
        self._sends: Iterator[tuple[float, object]]
        if trace_rows is None:
            self.planned = total_sends(plan)
            self._sends = send_times(plan)
        else:
            self.planned = len(range(plan.worker_index, len(trace_rows), plan.workers))
            self._sends = trace_send_times(plan, trace_rows)

    def take_send(self) -> tuple[float, TraceRow | None] | None:
        """The next send: its time (master clock, Unix s) and its trace row (None in a rate
        ladder), or None when the schedule is spent."""
        entry = next(self._sends, None)
        if entry is None:
            return None
        self.taken += 1
        scheduled_s, what = entry
        return scheduled_s, what if isinstance(what, TraceRow) else None

    def take(self) -> float | None:
        """The next send's time (master clock, Unix s), or None when the schedule is spent."""
        entry = self.take_send()
        return None if entry is None else entry[0]


def _worker_trace(environment, plan: RatePlan) -> Sequence[TraceRow]:
    """This worker's copy of the plan's trace (``--trace``), checked against the master's count.

    Raises
    ------
    ValueError
        No ``--trace`` here, an unreadable one, or a count that differs from the master's.
    """
    from llm_locust.client.workload.trace import read_trace

    options = environment.parsed_options
    path = getattr(options, "trace", "") if options is not None else ""
    if not path:
        raise ValueError("the master replays a trace and this worker has no --trace")
    rows = read_trace(path, options.trace_format).rows
    if len(rows) != plan.trace_rows:
        raise ValueError(f"this worker's --trace {path} holds {len(rows)} requests, the master's {plan.trace_rows}")
    return rows


def _on_plan(environment, msg, **_kwargs) -> None:
    try:
        plan = RatePlan.from_message(msg.data)
    except ValueError as exc:
        logger.error("rate plan not used: %s", exc)
        return
    rows = None
    if plan.trace_rows:
        try:
            rows = _worker_trace(environment, plan)
        except (OSError, ValueError) as exc:
            logger.error("trace plan not used: %s", exc)
            return
    setattr(environment, SCHEDULE_ATTRIBUTE, WorkerSchedule(plan, rows))
    if rows is not None:
        logger.info(
            "trace plan: worker %d of %d, %d of %d rows from %.3f at speed %g",
            plan.worker_index, plan.workers, len(range(plan.worker_index, len(rows), plan.workers)),
            len(rows), plan.t0_s, plan.trace_speed,
        )  # fmt: skip
        return
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
    _next_row: TraceRow | None = None
    _row: TraceRow | None = None

    def wait_time(self) -> float:
        """Take the next send and return the seconds until it (0 when it is already due).

        Locust sleeps that long in the user's waiting state, then runs :meth:`stream_one`.
        """
        schedule: WorkerSchedule | None = getattr(self.environment, SCHEDULE_ATTRIBUTE, None)
        if schedule is None:
            return POLL_S
        entry = schedule.take_send()
        self._next_s, self._next_row = entry if entry is not None else (None, None)
        if self._next_s is None:
            return IDLE_S
        return max(0.0, self._next_s - master_wall_s(self.environment))

    def ready_to_send(self) -> bool:
        """Send the request taken in :meth:`wait_time` (none before the first wait, nor once the
        schedule is spent), recording its scheduled time (and its trace row)."""
        scheduled_s, self._next_s = self._next_s, None
        self._row, self._next_row = self._next_row, None
        if scheduled_s is None:
            return False
        early_s = scheduled_s - master_wall_s(self.environment)
        if early_s > 0:  # the event loop's timer may fire before its time (its clock is cached): never send early
            gevent.sleep(early_s)
        self.scheduled_s = scheduled_s
        row = self._row
        self.trace_row, self.trace_session_id = (-1, "") if row is None else (row.row_index, row.session_id)
        return True

    def next_item(self, source: RequestSource) -> WorkItem:
        """The trace row's request in a trace replay, else the source's next."""
        row = self._row
        if row is None:
            return source.next_request()
        item_for = getattr(source, "item_for", None)
        if item_for is None:
            raise RuntimeError("a trace row came with a request source that cannot build it (no --trace here?)")
        return item_for(row)
