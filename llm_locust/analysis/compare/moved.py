"""What moved between two rounds besides the single request: the batch ceiling, the critical
concurrency, the batching gain, and whether a single-request TTFT difference is a wait.

Each function reads two :class:`~llm_locust.analysis.compare.rounds.RoundSummary` and returns a small frozen
record with the numbers and one sentence for the attribution's evidence
(:mod:`llm_locust.analysis.compare.attribution` decides from them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from llm_locust.analysis.compare.rounds import RoundSummary
from llm_locust.analysis.compare.stats import Estimate, median_ratio_ci, nan_estimate, ratio_of
from llm_locust.analysis.verdict.types import Rules

CEILING_MIN_CHANGE = 0.10
"""Smallest relative difference of two batch ceilings counted as a change (and at least one sequence)."""

KNEE_TOLERANCE_STEPS = 1
"""Critical concurrencies this many ladder steps apart or fewer count as the same knee (the rule
decides at a doubling: one step either way is within one measurement's reach)."""

QUEUED_MIN = Rules().waiting_threshold
"""Waiting requests, time-averaged over a ladder step (the knee rule's queue threshold), from which a
round's observed running maximum is its ceiling: a persistent queue. An instantaneous maximum is not
enough - one scrape can catch a request between two scheduler iterations (waiting 1 at 4 users under
a ceiling of 8 read the ceiling as 4)."""


@dataclass(frozen=True, kw_only=True)
class CeilingChange:
    """The batch ceiling of each round and whether it moved.

    Attributes
    ----------
    base, other : float or None
        Sequences batched at once at most: the observed running maximum of a round whose
        requests waited (the ceiling the scheduler applied), else the startup config's
        ``batch_ceiling``; None when neither is known.
    source_base, source_other : str
        ``"observed running max with requests waiting"``, ``"startup config (<name>)"`` or
        ``"not known"``.
    moved : bool
        Both known and different by at least one sequence and :data:`CEILING_MIN_CHANGE`.
    binding : bool
        The lower ceiling was reached in its round (running max at it, or requests waited):
        only then can the change of ceiling have set the numbers.
    text : str
        One evidence sentence.
    """

    base: float | None
    other: float | None
    source_base: str
    source_other: str
    moved: bool
    binding: bool
    text: str

    def to_json(self) -> dict:
        return {
            "baseline": self.base,
            "round": self.other,
            "baseline_source": self.source_base,
            "round_source": self.source_other,
            "moved": self.moved,
            "binding": self.binding,
        }


def _queued(summary: RoundSummary) -> bool:
    return math.isfinite(summary.waiting_mean) and summary.waiting_mean >= QUEUED_MIN


def _ceiling(summary: RoundSummary) -> tuple[float | None, str]:
    queued = _queued(summary)
    if queued and math.isfinite(summary.running_max) and summary.running_max > 0:
        return float(summary.running_max), "observed running max with requests waiting"
    config = summary.server_config
    ceiling = getattr(config, "batch_ceiling", None)
    if ceiling is not None:
        name = getattr(config, "batch_ceiling_name", None) or "batch_ceiling"
        return float(ceiling), f"startup config ({name})"
    return None, "not known"


def _reached(summary: RoundSummary, ceiling: float) -> bool:
    queued = _queued(summary)
    return bool(queued or (math.isfinite(summary.running_max) and summary.running_max >= ceiling))


def ceiling_change(base: RoundSummary, other: RoundSummary) -> CeilingChange:
    """Compare the rounds' batch ceilings (:class:`CeilingChange`)."""
    (b, sb), (o, so) = _ceiling(base), _ceiling(other)
    if b is None or o is None:
        return CeilingChange(
            base=b, other=o, source_base=sb, source_other=so, moved=False, binding=False,
            text=f"batch ceiling {_n(b)} ({sb}) vs {_n(o)} ({so}): not compared",
        )  # fmt: skip
    moved = abs(o - b) >= max(1.0, CEILING_MIN_CHANGE * min(b, o))
    low_round = base if b <= o else other
    binding = _reached(low_round, min(b, o))
    text = f"batch ceiling {_n(b)} ({sb}) vs {_n(o)} ({so}): " + (
        "unchanged"
        if not moved
        else "moved"
        + (
            ""
            if binding
            else f", but the round with {_n(min(b, o))} never reached it (no request waited, running "
            f"peaked at {_n(low_round.running_max)}): the change of ceiling cannot have set these numbers"
        )
    )
    return CeilingChange(
        base=b, other=o, source_base=sb, source_other=so, moved=moved, binding=binding, text=text
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class KneeChange:
    """The critical concurrency of each round and how many ladder steps apart they are.

    Attributes
    ----------
    base, other : float or None
        Each round's critical load (its verdict's ``critical_concurrency``; None: no knee found,
        throughput still rising at the top step).
    steps_apart : int or None
        Positions apart on the rounds' common ladder (no knee = one step beyond the top); None
        when a round has no ladder.
    moved : bool
        ``steps_apart > KNEE_TOLERANCE_STEPS``.
    text : str
    """

    base: float | None
    other: float | None
    steps_apart: int | None
    moved: bool
    text: str

    def to_json(self) -> dict:
        return {"baseline": self.base, "round": self.other, "ladder_steps_apart": self.steps_apart, "moved": self.moved}


def knee_change(base: RoundSummary, other: RoundSummary, unit: str) -> KneeChange:
    """Compare the rounds' critical concurrencies on their ladder (:class:`KneeChange`)."""
    b, o = base.critical_users, other.critical_users
    if not (base.step_tps and other.step_tps):
        return KneeChange(base=b, other=o, steps_apart=None, moved=False, text="critical concurrency: not measured")
    levels = sorted(set(base.step_tps) | set(other.step_tps))

    def position(level: float | None) -> int:
        if level is None:
            return len(levels)  # no knee: beyond the top step
        return int(np.searchsorted(levels, float(level)))

    apart = abs(position(b) - position(o))
    moved = apart > KNEE_TOLERANCE_STEPS
    text = f"critical concurrency {_knee(b, unit)} vs {_knee(o, unit)}: " + (
        f"{apart} ladder steps apart, moved" if moved else "the same within one ladder step"
    )
    return KneeChange(base=b, other=o, steps_apart=apart, moved=moved, text=text)


def batching_gain(summary: RoundSummary, knee: float | None) -> tuple[float | None, Estimate]:
    """How much the round gains from batching: prorated tokens/s at ``knee`` over its lowest step.

    Returns
    -------
    (lowest, gain) : tuple
        The lowest load level of the ladder (None without one) and the ratio with its interval
        (:func:`llm_locust.analysis.compare.stats.ratio_of`; NaN when either step is missing or ``knee`` is
        the lowest step).
    """
    if not summary.step_tps_prorated or knee is None:
        return None, nan_estimate()
    lowest = min(summary.step_tps_prorated)
    at_knee, at_low = summary.prorated_at(knee), summary.step_tps_prorated[lowest]
    if at_knee is None or float(knee) == lowest:
        return lowest, nan_estimate()
    return lowest, ratio_of(at_knee, at_low)


@dataclass(frozen=True, kw_only=True)
class TtftWait:
    """Whether a single-request TTFT difference is a wait before the prefill (scheduling).

    Attributes
    ----------
    explained : bool or None
        True: the difference is a wait (a queue, a batch timer), not the prefill's cost;
        False: the server's own prefill time moved with it (compute); None: nothing tells.
    prefill_ratio : Estimate
        Median ``server_prompt_ms`` ratio (round / baseline) of the single requests; NaN unless
        both rounds' servers reported their prefill time.
    text : str or None
    """

    explained: bool | None
    prefill_ratio: Estimate
    text: str | None


def ttft_wait(base: RoundSummary, other: RoundSummary, step_ms: float, clear) -> TtftWait:
    """Tell a single-request TTFT difference made of waiting from one made of prefill work.

    First that applies:

    1. Both servers reported their prefill time (``server_prompt_ms``): the prefill ratio decides -
       not ``clear`` (``clear(Estimate) -> bool``, the attribution's rule), the difference lies
       before the prefill (explained); clear, it is the prefill's cost (not explained).
    2. The round with the longer TTFT declares a batch timer (``ServerConfig.batch_wait_max_ms``)
       at least the difference less one inter-token time ``step_ms``: explained.
    3. The round with the longer TTFT has a ladder whose TTFT p50 *falls* as load rises, from its
       lowest step to a higher one, by at least half the difference: a wait that a fuller batch
       removes (a batch that starts when full or when its timer ends); a prefill cost never
       shrinks under load. Explained.

    Otherwise None (nothing tells).
    """
    gap_ms = abs(other.single_ttft_ms.value - base.single_ttft_ms.value)
    longer = other if other.single_ttft_ms.value > base.single_ttft_ms.value else base
    prefill = nan_estimate()
    if _finite_count(base.single_prefill_values) >= 2 and _finite_count(other.single_prefill_values) >= 2:
        prefill = median_ratio_ci(other.single_prefill_values, base.single_prefill_values)
        if clear(prefill):
            return TtftWait(
                explained=False,
                prefill_ratio=prefill,
                text=f"the servers' own prefill time of the single request moved with the TTFT (ratio "
                f"{prefill.text('{:.2f}')}): the TTFT difference is prefill work",
            )
        return TtftWait(
            explained=True,
            prefill_ratio=prefill,
            text=f"the servers' own prefill time of the single request did not move (ratio "
            f"{prefill.text('{:.2f}')}): the {gap_ms:.0f} ms TTFT difference is spent before the "
            "prefill (a queue or a batch timer), scheduling, not compute",
        )
    wait_ms = getattr(longer.server_config, "batch_wait_max_ms", None)
    if wait_ms is not None and gap_ms <= wait_ms + (step_ms if math.isfinite(step_ms) else 0.0):
        return TtftWait(
            explained=True,
            prefill_ratio=prefill,
            text=f"the {gap_ms:.0f} ms single-request TTFT difference is within the batch timer of "
            f"{wait_ms:.0f} ms that round {longer.name} declares: a lone request waits for its batch "
            "to fill, scheduling, not compute",
        )
    fall = _ttft_fall(longer)
    if fall is not None and fall[2] >= gap_ms / 2:
        low_level, high_level, fall_ms, low_ms, high_ms = fall
        return TtftWait(
            explained=True,
            prefill_ratio=prefill,
            text=f"round {longer.name}'s TTFT p50 falls as load rises, {low_ms:.0f} ms at "
            f"{_level(low_level)} to {high_ms:.0f} ms at {_level(high_level)}: {fall_ms:.0f} of the "
            f"{gap_ms:.0f} ms single-request TTFT difference is a wait that a fuller batch removes "
            "(a batch timer), scheduling, not compute",
        )
    return TtftWait(explained=None, prefill_ratio=prefill, text=None)


def _ttft_fall(summary: RoundSummary) -> tuple[float, float, float, float, float] | None:
    """(lowest level, level of the lowest TTFT above it, fall ms, TTFT there, TTFT at the lowest)."""
    steps = summary.steps
    column = summary.axis.column
    if steps.empty or column not in steps or "ttft_p50_ms" not in steps:
        return None
    rows = steps[[column, "ttft_p50_ms"]].dropna().sort_values(column)
    if len(rows) < 2:
        return None
    low_level, low_ms = float(rows[column].iloc[0]), float(rows["ttft_p50_ms"].iloc[0])
    higher = rows.iloc[1:]
    at = int(np.argmin(higher["ttft_p50_ms"].to_numpy()))
    high_level, high_ms = float(higher[column].iloc[at]), float(higher["ttft_p50_ms"].iloc[at])
    if high_ms >= low_ms:
        return None
    return low_level, high_level, low_ms - high_ms, low_ms, high_ms


def _finite_count(values: np.ndarray) -> int:
    return int(np.isfinite(np.asarray(values, dtype="float64")).sum())


def _n(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"


def _level(value: float) -> str:
    return _n(value)


def _knee(value: float | None, unit: str) -> str:
    return "none found" if value is None else f"{_n(value)} {unit}"
