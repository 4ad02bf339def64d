"""SLO capacity search: the largest concurrency whose requests meet the SLOs (``diagnose --slo ...
--search``).

A *probe* is one load level held for one step. It **meets** the SLOs when the share of its
window's completed requests that met every objective (``slo_met_share``,
:mod:`llm_locust.analysis.perstep.goodput`) is at least ``met_share`` (default :data:`MET_SHARE`); it **decides**
only when its step is long enough for the verdict (:func:`llm_locust.analysis.verdict.undetermined.short_reason`:
a window of several requests' time in service, enough completions). The *limiting metric* of a
probe is the objective met by the fewest of its requests.

The search (:class:`CapacitySearch`, pure: it is told each probe's outcome): bracket by doubling
from ``start`` while probes meet the SLOs (up to ``max_users``), then bisect between the last
level that met them and the first that did not, down to ``resolution`` users, with at most
``max_probes`` probes in all. The capacity is the highest level that met the SLOs; the interval
is ``[capacity, first failing level)``: the true capacity lies in it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from llm_locust.analysis.perrequest.metrics import end_time_s, with_request_metrics
from llm_locust.analysis.perstep.goodput import Slo, meets_slos

MET_SHARE = 0.9
"""Share of a probe's requests that must meet every SLO for the probe to meet them."""

MAX_PROBES = 8
"""Probes a search makes at most."""


@dataclass(frozen=True, kw_only=True)
class Probe:
    """The outcome of one probe.

    Attributes
    ----------
    users : int
        Its concurrency.
    met_share : float
        Requests completed in its window that met every SLO / requests completed there (0-1;
        NaN when none completed).
    met : bool
        ``met_share >= met_share`` of the search, and the probe decided.
    short : str
        Why the step was too short to decide ("" when it decided).
    shares : dict
        Per objective (its text), the share of the window's requests that met it alone.
    """

    users: int
    met_share: float
    met: bool
    short: str = ""
    shares: dict = field(default_factory=dict)

    @property
    def limiting(self) -> str:
        """The objective met by the fewest requests ("" without any)."""
        return min(self.shares, key=lambda k: self.shares[k]) if self.shares else ""


def judge_probe(
    row: pd.Series, requests: pd.DataFrame, slos: tuple[Slo, ...], *, users: int, met_share: float = MET_SHARE
) -> Probe:
    """A :class:`Probe` from a one-step run's step-table row and its requests.

    Parameters
    ----------
    row : pandas.Series
        The step's row of the analysed step table (``window_start_s``, ``window_end_s``,
        ``slo_met_share`` and the columns :func:`~llm_locust.analysis.verdict.undetermined.short_reason` reads).
    requests : pandas.DataFrame
        The run's ``requests.csv`` rows.
    slos : tuple of Slo
        Non-empty.
    users : int
    met_share : float, default :data:`MET_SHARE`
    """
    from llm_locust.analysis.verdict import RULES
    from llm_locust.analysis.verdict.undetermined import short_reason

    reqs = with_request_metrics(requests)
    t_end = end_time_s(reqs)
    done = reqs[(t_end >= float(row["window_start_s"])) & (t_end < float(row["window_end_s"]))]
    shares = {str(s): float(meets_slos(done, (s,)).mean()) if len(done) else math.nan for s in slos}
    share = float(meets_slos(done, slos).mean()) if len(done) else math.nan
    short = short_reason(row, RULES)
    return Probe(users=users, met_share=share, met=not short and share >= met_share, short=short, shares=shares)


@dataclass(kw_only=True)
class CapacitySearch:
    """Which level to probe next, from the outcomes so far (module docstring).

    >>> search = CapacitySearch(start=1, max_users=64)
    >>> for users in iter(search.next_users, None):  # a server meeting the SLOs up to 12 users
    ...     search.record(Probe(users=users, met_share=1.0 if users <= 12 else 0.5, met=users <= 12))
    >>> [p.users for p in search.probes], search.capacity, search.failing
    ([1, 2, 4, 8, 16, 12, 14, 13], 12, 13)
    """

    start: int = 1
    max_users: int = 64
    resolution: int = 1
    max_probes: int = MAX_PROBES
    probes: list[Probe] = field(default_factory=list)
    capacity: int | None = None
    """Highest level that met the SLOs (None: none did)."""
    failing: int | None = None
    """Lowest level above it that did not (None: none failed up to ``max_users``)."""

    def next_users(self) -> int | None:
        """The next level to probe, or None when the search is over."""
        if len(self.probes) >= self.max_probes:
            return None
        if not self.probes:
            return self.start
        if self.failing is None:  # still bracketing
            if self.capacity is None:
                return None  # the first level failed
            if self.capacity >= self.max_users:
                return None
            return min(self.capacity * 2, self.max_users)
        low = self.capacity if self.capacity is not None else 0
        if self.failing - low <= self.resolution or low == 0:
            return None
        return (low + self.failing) // 2

    def record(self, probe: Probe) -> None:
        """Take a probe's outcome (a probe that did not decide counts as not meeting the SLOs)."""
        self.probes.append(probe)
        if probe.met:
            if self.capacity is None or probe.users > self.capacity:
                self.capacity = probe.users
        elif self.failing is None or probe.users < self.failing:
            self.failing = probe.users

    @property
    def first_failing(self) -> Probe | None:
        """The probe at :attr:`failing`."""
        return next((p for p in self.probes if p.users == self.failing), None)

    def line(self, slo_text: str, met_share: float = MET_SHARE) -> str:
        """``Capacity at SLO ...: N users (interval [N, M) users); limited by ...`` in one line."""
        head = f"Capacity at SLO {slo_text} ({met_share:.0%} of requests): "
        failing = self.first_failing
        limit = ""
        if failing is not None:
            why = failing.short or (
                f"{failing.met_share:.0%} met at {failing.users} users; limiting metric {failing.limiting} "
                f"({failing.shares.get(failing.limiting, math.nan):.0%} met it)"
            )
            limit = f"; {why}"
        if self.capacity is None:
            first = self.probes[0].users if self.probes else self.start
            return head + f"below {first} users (no probe met the SLOs){limit}"
        if self.failing is None:
            return head + f"at least {self.capacity} users (met up to the highest probe)"
        return head + f"{self.capacity} users (interval [{self.capacity}, {self.failing}) users){limit}"
