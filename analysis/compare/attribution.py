"""Attribution across rounds: was the change's compute cost, or batching/scheduling, the cause?

The playbook's rule (``shared/playbooks/000``: "先看单请求速率差距，再看并发下的吞吐差距。若单请求差别很小、
并发下吞吐差别明显，问题更可能在批处理或调度；若量化后单请求就明显变慢，量化才是主要嫌疑"), as data:

single-request delta ``S``
    ratio (round / baseline) of the single-request medians - decode rate (tokens/s) and TTFT
    (ms) - with bootstrap intervals (:func:`analysis.compare.stats.median_ratio_ci`).
concurrent delta ``C``
    ratio of output tokens/s at the knee (each round's critical concurrency, else its highest
    step) and at every common ladder step, intervals from resampling each window's requests.

A delta is **clear** when its interval excludes 1 and it is at least :data:`MIN_EFFECT` away
from 1; a TTFT delta must also exceed one inter-token time of the baseline's single request (a
request waits up to one engine step before its prefill runs). Each single-request delta (decode
rate, TTFT) must also exceed the rounds' own **repeat
difference**: a round with both a baseline run and a concurrency-1 ladder step measures the
single request twice on the same server, minutes apart (``RoundSummary.single_repeat_*_ratio``);
a difference between rounds no larger than the largest such difference within a round is not
attributed to the change (the playbook: "同一配置重复跑几次取中位数，避免单次波动误判" - repeat the
same configuration and take the median, so one fluctuation is not misread). Then, first that
applies:

1. ``client`` - a round's verdict names the client as the bottleneck, or every change found is
   a client setting and ``C`` is clear: the load generator, not the server, set the numbers.
2. ``no_difference`` - neither ``S`` nor ``C`` is clear; the evidence says how large a difference
   this run length can detect (the intervals' half-widths).
3. ``undetermined`` - ``C`` is clear but ``S`` was not measured (a round with neither a baseline
   run nor a concurrency-1 ladder step): without the single request the concurrent difference
   cannot be split into compute cost and batching.
4. ``batching_or_scheduling`` - ``S`` is not clear but ``C`` is.
5. ``compute_cost`` - ``S`` is clear and ``C`` moves the same way by a similar factor (within
   :data:`EXPLAINED_FACTOR` of the decode-rate ratio), or ``C`` is not measured: the change's
   per-token cost explains the concurrent difference.
6. ``mixed`` - ``S`` is clear and ``C`` is not explained by it (opposite way, much larger or
   smaller, or not clear): the compute cost is one cause, batching/scheduling another.

The direction is measured, never assumed: a quantized model can be faster or slower.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from analysis.compare.rounds import RoundSummary
from analysis.compare.stats import Estimate, median_ratio_ci, nan_estimate, ratio_of
from analysis.loadaxis import RATE, USERS, LoadAxis

MIN_EFFECT = 0.10
"""Smallest relative difference counted as clear (10 %)."""

EXPLAINED_FACTOR = 1.25
"""``C`` is explained by ``S`` when ``max(C/S, S/C) <= EXPLAINED_FACTOR`` (same direction)."""

KINDS: tuple[str, ...] = ("compute_cost", "batching_or_scheduling", "client", "no_difference", "mixed", "undetermined")
"""The closed set of attribution kinds."""


@dataclass(frozen=True, kw_only=True)
class Attribution:
    """Why a round differs from the baseline round.

    Attributes
    ----------
    round, baseline : str
        Round names.
    kind : str
        One of :data:`KINDS`.
    evidence : tuple of str
        Sentences with the numbers behind ``kind``.
    single_decode_ratio, single_ttft_ratio, knee_tps_ratio : Estimate
        Round / baseline ratios with intervals.
    common_step_ratios : dict
        ``{load level: Estimate}`` throughput ratios at the ladder steps both rounds measured
        (target users, or offered requests/s: :attr:`axis`).
    detectable : dict
        ``{"single_decode": x, "knee_tps": y}``: smallest relative difference this run length
        could tell from noise (max of :data:`MIN_EFFECT` and the interval's half-width).
    single_repeat : dict
        ``{"decode rate": r, "TTFT": r}``, each ``r`` the round whose single-request figure moved
        most between its own two measurements with that ratio (module docstring), or None when
        no round measured it twice.
    axis : LoadAxis, default USERS
        What the rounds' ladder steps are keyed by (``compare.json`` names the key
        ``users`` or ``rate_rps``).
    """

    round: str
    baseline: str
    kind: str
    evidence: tuple[str, ...]
    single_decode_ratio: Estimate
    single_ttft_ratio: Estimate
    knee_tps_ratio: Estimate
    common_step_ratios: dict[float, Estimate]
    detectable: dict[str, float]
    single_repeat: dict[str, tuple[str, Estimate] | None] = field(default_factory=dict)
    axis: LoadAxis = USERS

    def to_json(self) -> dict:
        """The ``compare.json`` ``attribution`` object."""
        return {
            "round": self.round,
            "baseline": self.baseline,
            "kind": self.kind,
            "evidence": list(self.evidence),
            "single_request": {
                "decode_tps_ratio": self.single_decode_ratio.to_json(),
                "ttft_ms_ratio": self.single_ttft_ratio.to_json(),
                "repeat_within_round": {
                    key: None if found is None else {"round": found[0], "ratio": found[1].to_json()}
                    for key, found in (
                        ("decode_tps", self.single_repeat.get("decode rate")),
                        ("ttft_ms", self.single_repeat.get("TTFT")),
                    )
                },
            },
            "concurrent": {
                "knee_output_tps_ratio": self.knee_tps_ratio.to_json(),
                "common_steps": [
                    {self.axis.value_key: _users(u), "output_tps_ratio": e.to_json()}
                    for u, e in sorted(self.common_step_ratios.items())
                ],
            },
            "detectable_relative_difference": {
                k: (v if math.isfinite(v) else None) for k, v in self.detectable.items()
            },
            "rules": {"min_effect": MIN_EFFECT, "explained_factor": EXPLAINED_FACTOR},
        }


def is_clear(ratio: Estimate) -> bool:
    """The ratio's interval excludes 1 and the ratio is at least :data:`MIN_EFFECT` from 1."""
    return math.isfinite(ratio.value) and ratio.excludes_one and abs(ratio.value - 1.0) >= MIN_EFFECT


def detectable(ratio: Estimate) -> float:
    """Smallest relative difference the interval lets one tell from noise: the larger relative
    half-width of the interval around the ratio, at least :data:`MIN_EFFECT` (NaN without one)."""
    if not (math.isfinite(ratio.low) and math.isfinite(ratio.high) and ratio.value > 0):
        return math.nan
    return max(MIN_EFFECT, ratio.high / ratio.value - 1.0, 1.0 - ratio.low / ratio.value)


def attribute(base: RoundSummary, other: RoundSummary, *, client_changes_only: bool = False) -> Attribution:
    """Attribute the difference between ``other`` and ``base`` (module docstring's rules).

    Parameters
    ----------
    base, other : RoundSummary
        The baseline round and the round compared with it.
    client_changes_only : bool, default False
        Every change found between the rounds is a client setting.

    Returns
    -------
    Attribution
    """
    axis = RATE if RATE in (base.axis, other.axis) and (base.step_tps or other.step_tps) else USERS
    decode = median_ratio_ci(other.single_decode_values, base.single_decode_values)
    ttft = median_ratio_ci(other.single_ttft_values, base.single_ttft_values)
    knee_b, knee_o = base.tps_at(base.knee_users), other.tps_at(other.knee_users)
    knee = ratio_of(knee_o, knee_b) if knee_b is not None and knee_o is not None else nan_estimate()
    common = {
        u: ratio_of(other.step_tps[u], base.step_tps[u]) for u in sorted(set(base.step_tps) & set(other.step_tps))
    }
    repeat = {
        "decode rate": _repeat_difference("single_repeat_decode_ratio", base, other),
        "TTFT": _repeat_difference("single_repeat_ttft_ratio", base, other),
    }
    within = {
        "decode rate": _within_repeat(decode, repeat["decode rate"]),
        "TTFT": _within_repeat(ttft, repeat["TTFT"]),
    }
    # TTFT is quantised by the engine's step: a request waits for the running step to end (up to
    # one inter-token time) before its prefill runs, so a TTFT difference smaller than one of the
    # baseline's single-request inter-token times is where the request happened to arrive, not
    # the change's cost (embedded server, 20 ms steps: 29 vs 25 ms, interval [0.72, 0.96], with
    # decode rates equal to 0.1 %)
    step_ms = 1000.0 / base.single_decode_tps.value if base.single_decode_tps.value > 0 else math.nan
    ttft_gap_ms = abs(other.single_ttft_ms.value - base.single_ttft_ms.value)
    within_step = bool(ttft_gap_ms < step_ms)
    ttft_beyond_repeat = is_clear(ttft) and not within["TTFT"]
    s_clear = (is_clear(decode) and not within["decode rate"]) or (ttft_beyond_repeat and not within_step)
    c_clear = is_clear(knee)
    evidence = [
        f"single request ({base.single_source} vs {other.single_source}): decode rate "
        f"{base.single_decode_tps.text()} -> {other.single_decode_tps.text()} tokens/s, ratio "
        f"{decode.text('{:.2f}')} ({_direction(decode, 'faster', 'slower')}); TTFT "
        f"{base.single_ttft_ms.text('{:.0f}')} -> {other.single_ttft_ms.text('{:.0f}')} ms, ratio "
        f"{ttft.text('{:.2f}')}",
        f"concurrent: output tokens/s at the knee ({_u(base.knee_users)} vs {_u(other.knee_users)} {axis.unit}) "
        f"{_t(knee_b)} -> {_t(knee_o)}, ratio {knee.text('{:.2f}')} ({_direction(knee, 'higher', 'lower')})",
    ]
    if common:
        evidence.append(
            "throughput ratio at common steps: "
            + ", ".join(f"{axis.fmt(u)} {e.text('{:.2f}')}" for u, e in common.items())
        )
    for metric, found in repeat.items():
        if found is None:
            continue
        name, ratio = found
        evidence.append(
            f"single-request {metric} repeated within round {name} (its concurrency-1 ladder step vs its "
            f"baseline run): ratio {ratio.text('{:.2f}')}; a difference between rounds of that size or less "
            + (
                f"is not attributed to the change (the {metric} difference above is within it)"
                if within[metric]
                else "would not be attributed to the change"
            )
        )
    if ttft_beyond_repeat and within_step:
        evidence.append(
            f"the single-request TTFT differs by {ttft_gap_ms:.0f} ms, less than one inter-token time "
            f"({step_ms:.0f} ms at {base.single_decode_tps.value:.1f} tokens/s): a request waits up to one "
            "engine step before its prefill runs, so that difference is not attributed to the change"
        )
    sizes = {"single_decode": detectable(decode), "knee_tps": detectable(knee)}
    bottlenecks = {base.name: base.bottleneck, other.name: other.bottleneck}
    clients = [name for name, kind in bottlenecks.items() if kind == "client"]
    if clients or (client_changes_only and c_clear):
        kind = "client"
        evidence.append(
            ("the verdict names the client as the bottleneck of " + ", ".join(clients))
            if clients
            else "every change found is a client setting"
        )
    elif not s_clear and not c_clear:
        kind = "no_difference"
        evidence.append(
            "no difference beyond noise: this run length detects single-request "
            f"decode-rate differences of about {_pct(sizes['single_decode'])} and "
            f"throughput differences at the knee of about {_pct(sizes['knee_tps'])}"
        )
    elif not (math.isfinite(decode.value) or math.isfinite(ttft.value)):
        kind = "undetermined"
        evidence.append(
            (
                "the single request was not measured in both rounds (no baseline run; a request-rate "
                "ladder has no one-request-at-a-time step): "
                if axis is RATE
                else "the single request was not measured in both rounds (no baseline run, no "
                "concurrency-1 ladder step): "
            )
            + "the concurrent difference cannot be split into the change's compute cost and "
            "batching/scheduling; rerun with a baseline ("
            + (
                "a round folder with baseline/ beside the rate run's ladder/"
                if axis is RATE
                else "llm-locust diagnose, or a ladder starting at 1"
            )
            + ")"
        )
    elif not s_clear:
        kind = "batching_or_scheduling"
        evidence.append(
            "single-request figures nearly equal (within the noise or "
            f"{MIN_EFFECT:.0%}) while concurrent throughput differs clearly: batching or "
            "scheduling explains it, not the change's compute cost"
        )
    elif not math.isfinite(knee.value) or (c_clear and _explained(knee, decode)):
        kind = "compute_cost"
        evidence.append(
            "the single request already differs clearly, and the concurrent throughput "
            "moves the same way by a similar factor: the change's compute cost is the "
            "primary cause"
            if math.isfinite(knee.value)
            else "the single request differs clearly (no concurrent figure to compare)"
        )
    else:
        kind = "mixed"
        evidence.append(
            "the single request differs clearly, but the concurrent throughput does not "
            f"follow it (decode ratio {decode.value:.2f}, knee throughput ratio "
            f"{knee.value:.2f}): compute cost is one cause, batching/scheduling another"
        )
    return Attribution(
        round=other.name,
        baseline=base.name,
        kind=kind,
        evidence=tuple(evidence),
        single_decode_ratio=decode,
        single_ttft_ratio=ttft,
        knee_tps_ratio=knee,
        common_step_ratios=common,
        detectable=sizes,
        single_repeat=repeat,
        axis=axis,
    )


def _repeat_difference(field: str, *rounds: RoundSummary) -> tuple[str, Estimate] | None:
    """The round whose single-request figure ``field`` (a ``single_repeat_*_ratio``) moved most
    between its own two measurements, with that ratio; None when no round has both."""
    measured = [
        (r.name, getattr(r, field))
        for r in rounds
        if math.isfinite(getattr(r, field).value) and getattr(r, field).value > 0
    ]
    if not measured:
        return None
    return max(measured, key=lambda item: abs(math.log(item[1].value)))


def _within_repeat(ratio: Estimate, repeat: tuple[str, Estimate] | None) -> bool:
    """A clear between-round ``ratio`` no larger than the rounds' own repeat difference."""
    return (
        repeat is not None
        and is_clear(ratio)
        and ratio.value > 0
        and abs(math.log(ratio.value)) <= abs(math.log(repeat[1].value))
    )


def _explained(knee: Estimate, decode: Estimate) -> bool:
    if not (math.isfinite(decode.value) and decode.value > 0 and knee.value > 0):
        return False
    if (knee.value - 1.0) * (decode.value - 1.0) <= 0:
        return False
    return max(knee.value / decode.value, decode.value / knee.value) <= EXPLAINED_FACTOR


def _direction(ratio: Estimate, up: str, down: str) -> str:
    if not math.isfinite(ratio.value):
        return "not measured"
    if not is_clear(ratio):
        return "no clear difference"
    return f"{up} after the change" if ratio.value > 1 else f"{down} after the change"


def _users(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


def _u(value: float | None) -> str:
    return "-" if value is None else str(_users(value))


def _t(est: Estimate | None) -> str:
    return "-" if est is None else est.text()


def _pct(value: float) -> str:
    return "? (no interval)" if not math.isfinite(value) else f"{value:.0%}"
