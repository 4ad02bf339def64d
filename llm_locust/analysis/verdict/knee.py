"""The critical concurrency: the last load level before output throughput stops rising while
requests queue and time to first token climbs (DESIGN.md, seed step 4).

The load level is the step table's key (:mod:`llm_locust.analysis.loadaxis`): target users in a
concurrency ladder, offered requests/s in a rate ladder (the critical *rate*); the rule is the
same, per doubling of the load."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from llm_locust.analysis.loadaxis import USERS, LoadAxis, fmt_number, load_axis


@dataclass(frozen=True, kw_only=True)
class CriticalConcurrency:
    """Result of :func:`find_critical_concurrency`.

    Attributes
    ----------
    users : float or None
        Critical load (the load level of the step before the first saturated one: target users,
        or offered requests/s in a rate ladder, as :attr:`axis` says); None when no step is
        saturated.
    saturated_step : int or None
        ``step`` index of the first saturated step.
    saturated_users : float or None
        Its target users.
    highest_tested_users : float or None
        Largest target concurrency with a measured throughput.
    server_data : bool
        False when no step had server samples, so condition (b) was skipped everywhere and the
        verdict rests on client data only.
    evidence : tuple of str
        One line per step judged (the numbers behind each condition), plus notes.
    kneed_users : float or None
        Geometric cross-check: ``2 ** knee`` of ``kneed.KneeLocator(log2(c), output_tps,
        curve="concave", direction="increasing")``; not used for the verdict.
    stop_reason : str, default "throughput stops rising"
        What happens at ``saturated_users``, as printed in :attr:`text` (the verdict sets
        e.g. "failures dominate" when failed requests cut the ladder short); a reason starting
        "not judged" is the whole text (the verdict's when the load client was the limit).
    axis : LoadAxis, default USERS
        What the load levels are (:mod:`llm_locust.analysis.loadaxis`).
    """

    users: float | None
    saturated_step: int | None
    saturated_users: float | None
    highest_tested_users: float | None
    server_data: bool
    evidence: tuple[str, ...]
    kneed_users: float | None
    stop_reason: str = "throughput stops rising"
    axis: LoadAxis = USERS

    @property
    def text(self) -> str:
        """The verdict as printed after ``Critical concurrency: ``."""
        if self.users is not None:
            return f"{fmt_number(self.users)} ({self.stop_reason} at {self.axis.fmt(self.saturated_users)})"
        if self.stop_reason.startswith("not judged"):
            return self.stop_reason
        if self.saturated_users is not None:
            return f"below {self.axis.fmt(self.saturated_users)} ({self.stop_reason} already at the first step judged)"
        if self.highest_tested_users is None:
            return "not reached (no step with measured throughput)"
        return f"not reached within the tested ladder; highest tested is {fmt_number(self.highest_tested_users)}"


fmt_users = fmt_number
"""Concurrency (or any load level) as text: ``4`` rather than ``4.0``; ``-`` for None/NaN."""


def find_critical_concurrency(
    table: pd.DataFrame,
    *,
    min_gain_per_doubling: float = 1.15,
    waiting_threshold: float = 0.5,
    ttft_growth: float = 1.5,
    running_ceiling: float = 0.9,
    running_rise_tol: float = 0.05,
) -> CriticalConcurrency:
    """Find the critical concurrency of a ladder.

    Rule. Steps with a measured ``output_tps`` are sorted by load level ``c`` (target users, or
    ``target_rate_rps`` in a rate ladder: :func:`llm_locust.analysis.loadaxis.load_axis`). Step
    ``i >= 1`` is **saturated** when all of:

    (a) throughput gain per doubling of concurrency
        ``(tput_i / tput_{i-1}) ** (1 / log2(c_i / c_{i-1})) < min_gain_per_doubling``; or the
        server queues at the highest batch of the run (``server_waiting_i > waiting_threshold``
        and ``server_running_i >= running_ceiling * max(server_running)``) while the batch itself
        grew less than that per doubling (``(running_i / running_{i-1}) ** (1 / log2(c_i /
        c_{i-1})) < min_gain_per_doubling``): more concurrency can only add throughput through
        more sequences in the batch, so a larger gain is per-sequence speed (the queue filling
        the gaps between one user's requests), not concurrency. Measured: +17 % on vLLM from 4
        to 8 users at ``max_num_seqs`` 4 (running 3.47 then 3.54); +43 % on llama.cpp with 4
        slots on a busy load machine (running 3.89 then 4.00, 4 waiting); x1.37 on vLLM's CPU
        build at ``max_num_seqs`` 2 from 2 to 4 users (running 1.78 then 2.00, 2 waiting); or the
        queue is longer than the batch while running is at its highest (``server_waiting_i >
        server_running_i >= running_ceiling * max(server_running)``): more load only waits (a
        rate ladder whose offered rate outran the server: running 3.19 then 4.00 of 4 slots,
        10.8 waiting, throughput x1.21);
    (b) the server queues or runs a full batch: ``server_waiting_i > waiting_threshold``, or
        ``server_running_i >= running_ceiling * max(server_running)`` while running does not rise
        (``server_running_i <= (1 + running_rise_tol) * server_running_{i-1}``). Skipped for a
        step without server samples (with none at all, the verdict rests on client data only);
    (c) TTFT grows: ``ttft_p50_i > ttft_growth * ttft_p50_{i-1}``.

    The critical concurrency is ``c_{i-1}`` of the first saturated step ``i``; None when no step
    is saturated (not reached within the tested ladder). A comparison involving NaN is false.

    Parameters
    ----------
    table : pandas.DataFrame
        Per-step table (:func:`llm_locust.analysis.perstep.table.step_table`); uses ``step``, the load column,
        ``output_tps`` (tokens/s), ``ttft_p50_ms``, ``server_running``, ``server_waiting``.
    min_gain_per_doubling : float, default 1.15
        Throughput ratio per doubling below which throughput "stops rising".
    waiting_threshold : float, default 0.5
        Time-averaged waiting requests above which the server is queueing.
    ttft_growth : float, default 1.5
        TTFT p50 ratio to the previous step above which TTFT "climbs".
    running_ceiling : float, default 0.9
        Fraction of the highest time-averaged running count that counts as a full batch.
    running_rise_tol : float, default 0.05
        Relative rise of running still counted as "not rising".

    Returns
    -------
    CriticalConcurrency
    """
    axis = load_axis(table)
    finite = np.isfinite(table["output_tps"]) & np.isfinite(table[axis.column])
    valid = table[finite & (table[axis.column] > 0)].sort_values(axis.column, kind="stable")
    evidence = [
        f"step {s}: "
        + ("no measured throughput" if not np.isfinite(tps) else f"no target {axis.quantity}")
        + ", left out"
        for s, tps in zip(table.loc[~finite, "step"], table.loc[~finite, "output_tps"])
    ]
    if valid.empty:
        return CriticalConcurrency(
            users=None,
            saturated_step=None,
            saturated_users=None,
            highest_tested_users=None,
            server_data=False,
            evidence=tuple(evidence + ["no step with measured throughput"]),
            kneed_users=None,
            axis=axis,
        )
    server_cols = valid[["server_running", "server_waiting"]]
    server_data = bool(server_cols.notna().to_numpy().any())
    if not server_data:
        evidence.append(
            "no server metrics: condition (b) skipped, verdict rests on client data (throughput, TTFT) only"
        )
    max_running = float(valid["server_running"].max()) if server_data else math.nan
    c, tput = valid[axis.column].to_numpy(float), valid["output_tps"].to_numpy(float)
    ttft = valid["ttft_p50_ms"].to_numpy(float)
    running = valid["server_running"].to_numpy(float)
    waiting = valid["server_waiting"].to_numpy(float)
    if len(valid) < 2:
        evidence.append("fewer than two steps with measured throughput: nothing to compare")
    found = None
    for i in range(1, len(valid)):
        doublings = math.log2(c[i] / c[i - 1])
        with np.errstate(divide="ignore", invalid="ignore"):
            gain = (tput[i] / tput[i - 1]) ** (1.0 / doublings) if doublings > 0 else math.nan
        a = bool(gain < min_gain_per_doubling)
        line = (
            f"{axis.symbol}={fmt_number(c[i])} vs {fmt_number(c[i - 1])}: (a) gain per doubling "
            f"{gain:.3f} < {min_gain_per_doubling:g}: {_yes(a)}"
        )
        if np.isnan(running[i]) and np.isnan(waiting[i]):
            b = True
            if server_data:
                line += "; (b) skipped, no server samples in this window"
        else:
            queued = bool(waiting[i] > waiting_threshold)
            at_top = bool(max_running > 0 and running[i] >= running_ceiling * max_running)
            full = at_top and bool(running[i] <= (1 + running_rise_tol) * running[i - 1])
            b = queued or full
            with np.errstate(divide="ignore", invalid="ignore"):
                batch_gain = (running[i] / running[i - 1]) ** (1.0 / doublings) if doublings > 0 else math.nan
            # a queue at the highest batch of the run while the batch grew less than a doubling's
            # worth: throughput beyond the batch's growth is per-sequence speed (the queue fills
            # the gaps that one user's requests left at the step before), not concurrency
            if not a and queued and at_top and bool(batch_gain < min_gain_per_doubling):
                a = True
                line += (
                    f" (but a queue at the highest batch, which grew only x{batch_gain:.3f} per doubling: "
                    "the gain is per-sequence speed, not concurrency: yes)"
                )
            # a queue longer than the batch, at the highest batch seen: more load only lengthens
            # the queue (in a rate ladder the offered rate outruns the server: the queue grows
            # through the step while the batch may still have filled its last slots)
            elif not a and queued and at_top and waiting[i] > running[i]:
                a = True
                line += " (but a queue longer than the batch at its highest: more load only waits: yes)"
            line += (
                f"; (b) waiting {waiting[i]:.2f} > {waiting_threshold:g}: {_yes(queued)}, "
                f"running {running[i]:.2f} (prev {running[i - 1]:.2f}, max {max_running:.2f}) "
                f"at ceiling and flat: {_yes(full)}"
            )
        grown = bool(ttft[i] > ttft_growth * ttft[i - 1])
        line += f"; (c) TTFT p50 {ttft[i]:.0f} ms > {ttft_growth:g} x {ttft[i - 1]:.0f} ms: {_yes(grown)}"
        saturated = a and b and grown
        evidence.append(line + (" -> saturated" if saturated else " -> still scaling"))
        if saturated:
            found = i
            break
    return CriticalConcurrency(
        users=None if found is None else float(c[found - 1]),
        saturated_step=None if found is None else int(valid["step"].iloc[found]),
        saturated_users=None if found is None else float(c[found]),
        highest_tested_users=float(c[-1]),
        server_data=server_data,
        evidence=tuple(evidence),
        kneed_users=kneed_cross_check(c, tput),
        axis=axis,
    )


def kneed_cross_check(users: np.ndarray, output_tps: np.ndarray) -> float | None:
    """Concurrency at the knee of the concave throughput curve on a log2 axis, or None.

    Parameters
    ----------
    users : numpy.ndarray
        Target concurrency per step, increasing.
    output_tps : numpy.ndarray
        Output throughput per step, tokens/s.

    Returns
    -------
    float or None
        ``2 ** knee`` from ``kneed.KneeLocator(log2(users), output_tps, curve="concave",
        direction="increasing")``; None with fewer than three points or no knee.
    """
    if len(users) < 3 or len(np.unique(users)) < len(users):
        return None
    from kneed import KneeLocator  # imports scipy.signal (~2 s): only where the cross-check runs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        knee = KneeLocator(np.log2(users), output_tps, curve="concave", direction="increasing").knee
    return None if knee is None else float(2.0**knee)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
