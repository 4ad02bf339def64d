"""The verdict's vocabulary: bottleneck kinds, thresholds, evidence, recommendations, the verdict.

Everything a rule concludes is an :class:`Evidence` object (the rule's name, whether it holds,
the numbers with their units, the sentence a person reads); the report only lays these out, it
never composes its own explanation. All thresholds live in one frozen :class:`Rules` object
(:data:`RULES` holds the defaults), so a rule's docstring and its numbers cannot drift apart.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

from llm_locust.analysis.verdict.knee import CriticalConcurrency


class BottleneckKind(str, enum.Enum):
    """What held the run back (closed set; ``value`` is the name written in ``verdict.json``)."""

    CLIENT = "client"
    """The load client did not deliver its target concurrency (connections, CPU, lost workers)."""
    BATCHING_OFF = "batching_off"
    """The server ran one request at a time while others waited."""
    SCHEDULER_CEILING = "scheduler_ceiling"
    """Requests queued behind a full batch at the configured (or observed) batch ceiling."""
    KV_CACHE = "kv_cache"
    """The batch stopped growing below its ceiling while the KV cache was full or preempting."""
    COMPUTE = "compute"
    """More requests ran at once without a queue, yet output throughput stopped rising."""
    TIMEOUTS = "timeouts"
    """Requests timed out (client ``*_timeout`` kinds, server ``timeout`` lines)."""
    REJECTIONS = "rejections"
    """The server refused or dropped requests (429, 5xx, queue full, connection closed...)."""
    NONE = "none"
    """No saturation within the tested ladder."""
    UNDETERMINED = "undetermined"
    """The run cannot tell two or three kinds apart (steps too short, server counts missing, a
    saturation no kind's rule explains): the verdict names the candidates
    (:attr:`Verdict.candidates`) and the one measurement or rerun that separates them
    (:attr:`Verdict.tells_apart`); never a kind whose own evidence denies it."""


SERVER_KINDS: frozenset[BottleneckKind] = frozenset(BottleneckKind) - {
    BottleneckKind.CLIENT,
    BottleneckKind.NONE,
    BottleneckKind.UNDETERMINED,
}
"""Kinds that blame the server (never reported when the client limited the run)."""


@dataclass(frozen=True, kw_only=True)
class Rules:
    """Every threshold of the verdict, in one place (defaults: :data:`RULES`).

    Attributes
    ----------
    min_gain_per_doubling : float, default 1.15
        Output throughput ratio per doubling of concurrency below which throughput "stops
        rising" (the critical-concurrency rule, :func:`llm_locust.analysis.verdict.knee.find_critical_concurrency`).
    compute_gain_per_doubling : float, default 1.05
        Throughput ratio per doubling below which throughput "stops rising" for the ``compute``
        rule: stricter than the knee's, since no queue or TTFT growth corroborates it there
        (measured: a real vLLM with ``max_num_seqs`` 4 on a shared 2-core CPU gained x1.127 from
        2 to 4 users while it still batched every request).
    waiting_threshold : float, default 0.5
        Time-averaged server waiting requests above which requests wait (a queue).
    compute_wait_share : float, default 0.2
        For the ``compute`` rule: waiting up to this share of running is still no queue (requests
        waiting only for the current decode step to end,
        :func:`llm_locust.analysis.verdict.batching.step_wait_bound`).
    ttft_growth : float, default 1.5
        TTFT p50 ratio to the previous step above which TTFT climbs.
    running_ceiling : float, default 0.9
        Fraction of a batch ceiling at or above which running "sits at the ceiling".
    running_rise_tol : float, default 0.05
        Relative rise of running still counted as "not rising".
    min_inflight_ratio : float, default 0.9
        Achieved client in-flight / target users below which the client is short of its target.
    max_send_lag_ms : float, default 50.0
        Request-rate ladders: median send lag (send time - scheduled time) at or above which the
        client could not keep the schedule (no user free at most send times).
    max_unsent_share : float, default 0.05
        Request-rate ladders: share of a step's scheduled sends never sent at or above which the
        client could not keep the schedule.
    min_server_follow_ratio : float, default 0.75
        Server running + waiting / client in-flight below which the server does not follow the
        client...
    min_server_follow_gap : float, default 1.0
        ...when it is also at least this many requests short.
    max_conn_wait_share : float, default 0.1
        Mean connection wait / (mean connection wait + mean E2E) at or above which the users
        spend their time waiting for a free connection.
    max_worker_cpu_cores : float, default 0.9
        Mean CPU of one worker process (cores) over a step at or above which it is saturated
        (a Locust worker is one process on one core).
    max_loop_lag_ms : float, default 50.0
        Mean event-loop lag of one worker over a step at or above which its timestamps are late.
    worker_loss_margin_s : float, default 10.0
        After a worker is lost (last heard at ``lost_at_s``) the master notices it (Locust's
        heartbeat timeout, a few seconds) and moves its users to the workers left; a step is
        invalid when its window overlaps ``[min(last_record_s, lost_at_s), lost_at_s +
        worker_loss_margin_s)`` (the requests the worker never shipped, and the users it took).
    batch_of_one : float, default 1.1
        Time-averaged running at or below which the batch size is ~1.
    kv_full_ratio : float, default 0.9
        KV cache usage (0-1) at or above which the cache is near full.
    min_preemptions_per_s : float, default 0.05
        Preemptions per second above which preemptions count as climbing (when also higher
        than at the previous step).
    significant_failure_share : float, default 0.05
        Share of a step's users' time taken by failures (``failed_time_share``,
        :func:`llm_locust.analysis.verdict.failures.failed_time_share`: failed requests, the pauses after
        refusals, the client's turnaround between tries) at or above which failures are
        significant; at the first saturated step they then come first.
    dominant_failure_share : float, default 0.5
        ... at or above which they dominate the step (most of the users' time spent refused or
        timed out): it is never counted as healthy throughput.
    batch_wait_at_max_share : float, default 0.5
        Share of a step's logged batches that waited their configured maximum at or above which
        batches wait to fill (rule ``batch_wait``).
    significant_backoff_share : float, default 0.1
        Share of the users' time spent pausing after refusals (``backoff_users`` / target users)
        at or above which the ``rejections`` evidence names the step: its in-flight and
        throughput are what the server let through, not what the users asked for.
    min_window_e2e : float, default 3.0
        A step whose steady window is shorter than this many of its E2E p50 is too short to
        decide (rule ``steps_too_short``): it holds at most a few whole requests, and its
        throughput has no interval (:func:`llm_locust.analysis.perstep.table.throughput_interval`).
    min_completions : int, default 20
        ... and so is one with fewer successful completions than this whose throughput interval
        is also wider than ``max_tps_rel_halfwidth`` (few completions alone do not condemn a
        step: its tokens are counted as they arrive, and a steady one-user step of 6 requests
        can measure its rate to 1 %).
    max_tps_rel_halfwidth : float, default 0.1
        Half-width of a step's 95 % throughput interval relative to its throughput above which
        a step with few completions is too short.
    compute_tpot_growth : float, default 1.3
        TPOT growth per doubling of running, up to a ceiling, at or above which compute limits
        beside it (rule ``compute_beside_ceiling``: a batch doubled then gains at most x1.54).
    max_prefix_hit_ratio : float, default 0.05
        Prefix-cache hit ratio (prompt tokens found cached / looked up) below which, at every
        usable step, the server's prefix cache "hits next to none" of a workload that shares
        prefixes (rule ``prefix_cache_unused``; vLLM CPU with its 128-token blocks hit 0.3 % of
        prompts of random words, 50 % of 256-token prompts sharing 192).
    """

    min_gain_per_doubling: float = 1.15
    compute_gain_per_doubling: float = 1.05
    waiting_threshold: float = 0.5
    compute_wait_share: float = 0.2
    ttft_growth: float = 1.5
    running_ceiling: float = 0.9
    running_rise_tol: float = 0.05
    min_inflight_ratio: float = 0.9
    max_send_lag_ms: float = 50.0
    max_unsent_share: float = 0.05
    min_server_follow_ratio: float = 0.75
    min_server_follow_gap: float = 1.0
    max_conn_wait_share: float = 0.1
    max_worker_cpu_cores: float = 0.9
    max_loop_lag_ms: float = 50.0
    worker_loss_margin_s: float = 10.0
    batch_of_one: float = 1.1
    kv_full_ratio: float = 0.9
    min_preemptions_per_s: float = 0.05
    significant_failure_share: float = 0.05
    dominant_failure_share: float = 0.5
    batch_wait_at_max_share: float = 0.5
    significant_backoff_share: float = 0.1
    min_window_e2e: float = 3.0
    min_completions: int = 20
    max_tps_rel_halfwidth: float = 0.1
    compute_tpot_growth: float = 1.3
    max_prefix_hit_ratio: float = 0.05

    def knee_kwargs(self) -> dict[str, float]:
        """Keyword arguments of :func:`llm_locust.analysis.verdict.knee.find_critical_concurrency`."""
        return {
            "min_gain_per_doubling": self.min_gain_per_doubling,
            "waiting_threshold": self.waiting_threshold,
            "ttft_growth": self.ttft_growth,
            "running_ceiling": self.running_ceiling,
            "running_rise_tol": self.running_rise_tol,
        }


RULES = Rules()
"""The default thresholds."""


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """What one rule found.

    Attributes
    ----------
    rule : str
        The rule's name (its function name), e.g. ``"scheduler_ceiling"``.
    kind : BottleneckKind
        The bottleneck kind the rule speaks for.
    holds : bool
        Whether the rule's condition holds.
    values : Mapping[str, float]
        The numbers behind it (NaN = not measured; ``null`` in JSON).
    units : Mapping[str, str]
        Unit of each value (``requests``, ``tokens/s``, ``ms``, ``ratio``, ``users``...).
    text : str
        The sentence a person reads.
    """

    rule: str
    kind: BottleneckKind
    holds: bool
    values: Mapping[str, float] = field(default_factory=dict)
    units: Mapping[str, str] = field(default_factory=dict)
    text: str = ""

    def to_json(self) -> dict:
        """``{"rule", "kind", "holds", "values", "units", "text"}`` (NaN -> null)."""
        return {
            "rule": self.rule,
            "kind": self.kind.value,
            "holds": bool(self.holds),
            "values": {k: _number(v) for k, v in self.values.items()},
            "units": dict(self.units),
            "text": self.text,
        }


@dataclass(frozen=True, kw_only=True)
class Recommendation:
    """One change to try, tied to the evidence that calls for it.

    Attributes
    ----------
    change : str
        What to change, in words.
    flag : str
        The flag or setting that makes the change (the server family's own name where known;
        ``""`` when none applies).
    because : str
        The :attr:`Evidence.rule` it follows from.
    verify : str
        How to check it worked: the same script, this one change, rerun, and what to look at.
    """

    change: str
    flag: str
    because: str
    verify: str

    def to_json(self) -> dict:
        return {"change": self.change, "flag": self.flag, "because": self.because, "verify": self.verify}


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """Result of :func:`llm_locust.analysis.verdict.rules`.

    Attributes
    ----------
    bottleneck : BottleneckKind
        The primary bottleneck.
    secondary : tuple of BottleneckKind
        Other kinds whose evidence holds (never a server kind when the client limited the run).
    headline : str
        The sentence after ``Bottleneck: <kind> — ``.
    critical : CriticalConcurrency
        The critical concurrency on the usable steps (valid, not dominated by failures), cut at
        the first step where failures dominate or compute stops scaling.
    evidence : tuple of Evidence
        Every rule's finding, the primary kind's first.
    recommendations : tuple of Recommendation
    table : pandas.DataFrame
        The step table with the verdict's columns added: ``valid`` (bool), ``invalid_reason``
        (str), ``failed_share`` (0-1), ``failures_dominate`` (bool), ``server_errors`` (int64),
        ``server_error_kinds`` (str), and the client figures of
        :func:`llm_locust.analysis.verdict.client.client_validity`.
    candidates : tuple of BottleneckKind, default ()
        With ``bottleneck`` ``undetermined``: the two or three kinds the run is compatible with
        (empty otherwise).
    tells_apart : str, default ""
        With ``undetermined``: the one measurement or rerun that separates the candidates.
    """

    bottleneck: BottleneckKind
    secondary: tuple[BottleneckKind, ...]
    headline: str
    critical: CriticalConcurrency
    evidence: tuple[Evidence, ...]
    recommendations: tuple[Recommendation, ...]
    table: pd.DataFrame
    candidates: tuple[BottleneckKind, ...] = ()
    tells_apart: str = ""

    @property
    def critical_concurrency(self) -> int | None:
        """The critical concurrency as an integer number of users, or None."""
        users = self.critical.users
        return None if users is None or not math.isfinite(users) else int(round(users))

    @property
    def line(self) -> str:
        """``Bottleneck: <kind> — <headline>``."""
        return f"Bottleneck: {self.bottleneck.value} — {self.headline}"


def _number(value) -> float | int | None:
    if value is None:
        return None
    value = float(value)
    if not math.isfinite(value):
        return None
    return int(value) if value.is_integer() and abs(value) < 2**53 else value
