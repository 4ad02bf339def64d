"""The open-loop send schedule of one worker: absolute send times, computed before any send.

A request-rate run (``--shape rate``) sends on a schedule fixed in advance, never on relative
sleeps: relative sleeps drift by each iteration's own time, and users that wait for a free slot
and then sleep again send in synchronised bursts (Locust's ``constant_throughput``). Here every
send has an absolute time on the master's clock (Unix s); a user sends at that time, or, when
none was free then, as soon as one is, and the record keeps both times (``scheduled_s`` and
``t_start_s``), so the lag is measured, never hidden.

Per step ``s`` of ``rates_rps`` (each held ``dwell_s``, starting at ``t0_s + s * dwell_s``) the
whole run sends exactly ``n = round(rate * dwell_s)`` requests, split over the ``workers``
workers as ``n // workers`` each plus one for the first ``n % workers``:

``constant``
    Send ``j`` of the step at ``j / rate`` s into it; worker ``i`` takes ``j = i, i + workers,
    i + 2 * workers, ...``: the union over the workers is exactly evenly spaced
    (inter-arrival coefficient of variation 0).
``poisson``
    Each worker draws its ``n_i`` times from its own random generator (seed ``seed + i``).
    With ``burstiness`` 1 the times are uniform order statistics over the step: a Poisson
    process given its count in the step, so the union over workers is one too and the step's
    achieved rate is exact (the count does not wander by the Poisson noise ``sqrt(rate *
    dwell_s)``); inter-arrival coefficient of variation 1. Another ``burstiness`` ``k`` gives
    gamma-distributed gaps of shape ``k`` (vLLM's ``benchmark_serving --burstiness``: ``k < 1``
    burstier, ``k > 1`` more regular; coefficient of variation ``1 / sqrt(k)`` per worker),
    scaled so that the step holds its ``n_i`` sends; with several workers the union of their
    gamma processes is closer to Poisson than one worker's.

A trace replay (``--trace``, :mod:`llm_locust.client.workload.trace`) is one step whose sends are
the trace's rows: row ``r`` at ``t0_s + TRACE_HEAD_S + offset_s / trace_speed``, worker ``i``
taking the rows ``r = i, i + workers, ...`` (:func:`trace_send_times`); the step lasts
:data:`TRACE_HEAD_S` + the trace's span over the speed + :data:`TRACE_TAIL_S`, and its rate is rows / step length, so the step's planned sends
(``round(rate * dwell_s)``) are exactly the trace's rows.

Written here (not taken from a library) because it is the measurement itself: the times, the
split and the seed are what the achieved-rate and lag figures are judged against.
"""

from __future__ import annotations

import enum
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llm_locust.client.workload.trace import TraceRow

TRACE_HEAD_S = 0.5
"""Seconds from a trace replay's step start to its first send: the step's warm-up, in which nothing
is sent, so no send falls on the step's edge whatever the workers' clock offsets."""
TRACE_TAIL_S = 1.0
"""Seconds a trace replay's step lasts past its last send (so that send falls inside the step)."""


class Arrival(str, enum.Enum):
    """How sends are spaced within a step (``--arrival``)."""

    CONSTANT = "constant"
    POISSON = "poisson"


@dataclass(frozen=True, kw_only=True)
class RatePlan:
    """What one worker needs to compute its schedule (sent by the master, :mod:`llm_locust.client.rateuser`).

    Attributes
    ----------
    t0_s : float
        Start of step 0, wall clock on the master's clock (Unix s).
    rates_rps : tuple of float
        Requests per second of the whole run (all workers together), one per step.
    dwell_s : float
        Seconds each step is held.
    arrival : str
        An :class:`Arrival` value.
    burstiness : float
        Gamma shape of the gaps with ``poisson`` arrival (1 = Poisson).
    seed : int
        The run's seed; worker ``i`` draws with ``seed + i``.
    worker_index : int
        This worker's index, ``0 <= worker_index < workers``.
    workers : int
        Workers the rate is split over.
    trace_rows : int, default 0
        A trace replay's requests (all workers), 0 for a rate ladder: the worker reads its own copy
        of ``--trace`` and refuses a plan whose count differs.
    trace_speed : float, default 1
        The replay's speed (``--trace-speed``): trace time / replay time.
    """

    t0_s: float
    rates_rps: tuple[float, ...]
    dwell_s: float
    arrival: str
    burstiness: float
    seed: int
    worker_index: int
    workers: int
    trace_rows: int = 0
    trace_speed: float = 1.0

    def __post_init__(self) -> None:
        if not (self.workers >= 1 and 0 <= self.worker_index < self.workers):
            raise ValueError(f"worker_index {self.worker_index} not in [0, {self.workers})")
        if not self.dwell_s > 0 or not self.rates_rps or not all(r > 0 for r in self.rates_rps):
            raise ValueError(f"rates must be > 0 and dwell_s > 0, got {self.rates_rps}, {self.dwell_s}")
        if not self.burstiness > 0:
            raise ValueError(f"burstiness must be > 0, got {self.burstiness}")
        if self.trace_rows < 0 or not self.trace_speed > 0:
            raise ValueError(f"trace_rows must be >= 0 and trace_speed > 0, got {self.trace_rows}, {self.trace_speed}")
        Arrival(self.arrival)

    def to_message(self) -> dict:
        """The plan as a message body (JSON- and msgpack-able)."""
        data = asdict(self)
        data["rates_rps"] = list(self.rates_rps)
        return data

    @classmethod
    def from_message(cls, data: dict) -> RatePlan:
        """Inverse of :meth:`to_message`.

        Raises
        ------
        ValueError
            A missing or malformed field.
        """
        try:
            return cls(
                t0_s=float(data["t0_s"]), rates_rps=tuple(float(r) for r in data["rates_rps"]),
                dwell_s=float(data["dwell_s"]), arrival=str(data["arrival"]),
                burstiness=float(data["burstiness"]), seed=int(data["seed"]),
                worker_index=int(data["worker_index"]), workers=int(data["workers"]),
                trace_rows=int(data.get("trace_rows", 0)), trace_speed=float(data.get("trace_speed", 1.0)),
            )  # fmt: skip
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed rate plan {data!r:.200}: {exc!r}") from None

    @property
    def end_s(self) -> float:
        """End of the last step (master clock, Unix s)."""
        return self.t0_s + len(self.rates_rps) * self.dwell_s


def step_sends(rate_rps: float, dwell_s: float) -> int:
    """Sends of one step over all workers: ``round(rate_rps * dwell_s)``.

    >>> step_sends(2.5, 3.0)
    8
    """
    return int(round(rate_rps * dwell_s))


def worker_share(n: int, worker_index: int, workers: int) -> int:
    """Worker ``worker_index``'s part of ``n`` sends: ``n // workers``, plus one for the first
    ``n % workers`` workers (the parts add up to ``n``).

    >>> [worker_share(7, i, 3) for i in range(3)]
    [3, 2, 2]
    """
    return n // workers + (1 if worker_index < n % workers else 0)


def step_offsets_s(plan: RatePlan, step: int, rng: random.Random) -> list[float]:
    """This worker's send times in step ``step``, seconds from the step's start, increasing.

    Parameters
    ----------
    plan : RatePlan
    step : int
        Index into ``plan.rates_rps``.
    rng : random.Random
        This worker's generator (used only for ``poisson`` arrival).

    Returns
    -------
    list of float
        In ``[0, plan.dwell_s)``; ``worker_share`` of :func:`step_sends` of them.
    """
    rate, dwell_s = plan.rates_rps[step], plan.dwell_s
    total = step_sends(rate, dwell_s)
    mine = worker_share(total, plan.worker_index, plan.workers)
    if plan.arrival == Arrival.CONSTANT.value:
        return [(plan.worker_index + k * plan.workers) / rate for k in range(mine)]
    if mine == 0:
        return []
    if plan.burstiness == 1.0:
        return sorted(rng.uniform(0.0, dwell_s) for _ in range(mine))
    gaps = [rng.gammavariate(plan.burstiness, 1.0) for _ in range(mine + 1)]
    scale = dwell_s / math.fsum(gaps)
    offsets, t = [], 0.0
    for gap in gaps[:-1]:
        t += gap * scale
        offsets.append(t)
    return offsets


def send_times(plan: RatePlan) -> Iterator[tuple[float, int]]:
    """This worker's whole schedule, step by step (computed one step at a time, so a long ladder
    holds one step in memory).

    Yields
    ------
    (float, int)
        ``(scheduled_s, step)``: the absolute send time on the master's clock (Unix s) and the
        step index, in increasing time.
    """
    rng = random.Random(plan.seed + plan.worker_index)
    for step in range(len(plan.rates_rps)):
        start_s = plan.t0_s + step * plan.dwell_s
        for offset in step_offsets_s(plan, step, rng):
            yield start_s + offset, step


def total_sends(plan: RatePlan) -> int:
    """How many sends :func:`send_times` yields for this worker."""
    return sum(worker_share(step_sends(rate, plan.dwell_s), plan.worker_index, plan.workers) for rate in plan.rates_rps)


def trace_plan_step(span_s: float, rows: int, speed: float) -> tuple[float, float]:
    """A trace replay's one step: ``(dwell_s, rate_rps)``.

    ``dwell_s = TRACE_HEAD_S + span_s / speed + TRACE_TAIL_S`` and ``rate_rps = rows / dwell_s``,
    so :func:`step_sends` of the step is ``rows``.

    >>> trace_plan_step(9.0, 30, 2.0)
    (6.0, 5.0)
    """
    dwell_s = TRACE_HEAD_S + span_s / speed + TRACE_TAIL_S
    return dwell_s, rows / dwell_s


def trace_send_times(plan: RatePlan, rows: Sequence[TraceRow]) -> Iterator[tuple[float, TraceRow]]:
    """This worker's share of a trace replay, in trace order.

    Parameters
    ----------
    plan : RatePlan
        With ``trace_rows == len(rows)``.
    rows : sequence of TraceRow
        The whole trace (:func:`~llm_locust.client.workload.trace.read_trace`).

    Yields
    ------
    (float, TraceRow)
        ``(scheduled_s, row)``: ``plan.t0_s + TRACE_HEAD_S + row.offset_s / plan.trace_speed``
        (master clock, Unix s) for rows ``plan.worker_index, plan.worker_index + plan.workers, ...``.
    """
    first_s = plan.t0_s + TRACE_HEAD_S
    for row in rows[plan.worker_index :: plan.workers]:
        yield first_s + row.offset_s / plan.trace_speed, row
