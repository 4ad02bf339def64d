"""Attribution across rounds: was the change's compute cost, or batching/scheduling, the cause?

The playbook's rule (``shared/playbooks/000``: "先看单请求速率差距，再看并发下的吞吐差距。若单请求差别很小、
并发下吞吐差别明显，问题更可能在批处理或调度；若量化后单请求就明显变慢，量化才是主要嫌疑"), as data. Three
things can move between a baseline round and the round after one change:

compute (the single request)
    The ratio (round / baseline) of the single-request medians - decode rate (tokens/s) and TTFT
    (ms), from each round's baseline run, else its concurrency-1 ladder step - with bootstrap
    intervals over the repeats (:func:`llm_locust.analysis.compare.stats.median_ratio_ci`). It *moved* when
    the decode-rate ratio is **clear**: its interval excludes 1, it is at least
    :data:`MIN_EFFECT` from 1, and it is larger than the rounds' own **repeat difference** (a round
    with both a baseline run and a concurrency-1 step measures the single request twice on the
    same server, minutes apart: ``RoundSummary.single_repeat_*_ratio``; the playbook's "同一配置重复跑
    几次取中位数，避免单次波动误判"). A TTFT ratio alone moves compute only when it is clear, beyond
    the repeat, longer than one inter-token time of the baseline's single request (a request waits
    up to one engine step before its prefill runs) and not a wait (:func:`llm_locust.analysis.compare.moved.ttft_wait`:
    the servers' own prefill times, a declared batch timer, or a TTFT that falls as load fills
    the batch say it is scheduling: the static batcher's max batch 8 vs 1 differs by its timer).
the batch ceiling
    Observed running maximum of a round whose requests waited, else the startup config's
    ``batch_ceiling`` (:func:`llm_locust.analysis.compare.moved.ceiling_change`); it counts only when the
    lower ceiling was reached.
the knee
    Each round's critical concurrency (its verdict); two knees within
    :data:`llm_locust.analysis.compare.moved.KNEE_TOLERANCE_STEPS` ladder step are the same
    (:func:`llm_locust.analysis.compare.moved.knee_change`).

The concurrent figure is the **prorated** output throughput (``output_tps_prorated``: the tokens
that arrived in the window, what the critical-concurrency rule judges) at each round's knee and at
every common step, with intervals over the window's one-second bins
(:func:`llm_locust.analysis.compare.rounds.prorated_step_estimates`); it is **clear** by the same rule.
Then, first that applies (the closed set :data:`KINDS`):

1. ``client`` - a round's verdict names the client as the bottleneck, or every change found is
   a client setting and the concurrent throughput moved: the load generator set the numbers.
2. ``no_difference`` - neither compute, nor the knee, nor the concurrent throughput moved (a
   ceiling that moved without any of them changes nothing measured); the evidence says how large a
   difference this run length can detect.
3. ``undetermined`` - something concurrent moved but no round measured the single request (no
   baseline run, no concurrency-1 step): it cannot be split into compute and batching.
4. ``batching_or_scheduling`` - compute did not move; the ceiling (reached), the knee or the
   concurrent throughput did.
5. ``prefix_cache`` - the prefill alone moved (the single-request TTFT beyond noise, its decode
   rate not), the ceiling did not, and the rounds' prefix-cache hit ratios (the server's own
   counters, :attr:`~llm_locust.analysis.compare.rounds.RoundSummary.prefix_cache_hit_ratio`) differ by at
   least :data:`MIN_PREFIX_HIT_CHANGE` in the direction that explains it (more prompt tokens
   found cached, shorter TTFT): a prefix cache skips prefill work, never decode work, so the
   cache is the cause. A knee or concurrent throughput that moved with it is that same prefill
   work (the evidence gives both). When the decode rate moved too, the kind is ``compute_cost`` or
   ``mixed`` by the rules below, and the evidence says which part of the TTFT the cache explains.
6. ``compute_cost`` - compute moved; the ceiling and the knee stayed. Also when the concurrent
   ratio differs from the single-request one (beyond :data:`EXPLAINED_FACTOR`): the evidence gives
   both ratios and each round's batching gain (prorated tokens/s at the knee over the lowest step):
   the changed build gains less (or more) from batching, at its own per-token cost, with the same
   scheduler.
7. ``mixed`` - compute moved and so did the ceiling (reached) or the knee; the knee throughput
   ratio ``T`` is split into the compute factor ``S`` (the single-request decode ratio) and the
   batching factor ``B = T / S``, with their shares of ``|log S| + |log B|``.

The direction is measured, never assumed: a quantized model can be faster or slower.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from llm_locust.analysis.compare.moved import (
    CeilingChange,
    KneeChange,
    TtftWait,
    batching_gain,
    ceiling_change,
    knee_change,
    ttft_wait,
)
from llm_locust.analysis.compare.rounds import RoundSummary
from llm_locust.analysis.compare.stats import Estimate, median_ratio_ci, nan_estimate, ratio_of
from llm_locust.analysis.loadaxis import RATE, USERS, LoadAxis

MIN_EFFECT = 0.10
"""Smallest relative difference counted as clear (10 %)."""

EXPLAINED_FACTOR = 1.25
"""The concurrent ratio ``T`` follows the single-request ratio ``S`` when ``max(T/S, S/T) <=
EXPLAINED_FACTOR`` (same direction); beyond it the evidence says the build gains less or more from
batching."""

MIN_PREFIX_HIT_CHANGE = 0.10
"""Smallest difference of the rounds' prefix-cache hit ratios (absolute, 0-1) counted as a change
of the cache (10 points of the prompt tokens)."""

KINDS: tuple[str, ...] = (
    "compute_cost",
    "batching_or_scheduling",
    "client",
    "no_difference",
    "mixed",
    "undetermined",
    "prefix_cache",
)
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
    single_decode_ratio, single_ttft_ratio : Estimate
        Round / baseline single-request median ratios with intervals.
    knee_tps_ratio : Estimate
        Ratio of the prorated output tokens/s at each round's knee.
    common_step_ratios : dict
        ``{load level: Estimate}`` prorated throughput ratios at the ladder steps both rounds
        measured (target users, or offered requests/s: :attr:`axis`).
    detectable : dict
        ``{"single_decode": x, "knee_tps": y}``: smallest relative difference this run length
        could tell from noise (max of :data:`MIN_EFFECT` and the interval's half-width).
    single_repeat : dict
        ``{"decode rate": r, "TTFT": r}``, each ``r`` the round whose single-request figure moved
        most between its own two measurements with that ratio (module docstring), or None when
        no round measured it twice.
    compute_moved : bool
        The single request moved beyond noise (module docstring).
    ceiling : CeilingChange or None
    knee : KneeChange or None
    ttft_wait : TtftWait or None
        Whether the TTFT difference is a wait (None when not asked: no clear TTFT difference).
    batching_gains : dict
        ``{"baseline": (lowest level, Estimate), "round": (...)}``: prorated tokens/s at each
        round's knee over its lowest step.
    shares : dict or None
        ``mixed`` only: ``{"compute_factor": S, "batching_factor": B, "compute": s, "batching": b}``
        (``s + b == 1``).
    axis : LoadAxis, default USERS
        What the rounds' ladder steps are keyed by (``compare.json`` names the key
        ``users`` or ``rate_rps``).
    prefix_cache_hit_ratios : dict
        ``{"baseline": r, "round": r}``: each round's prefix-cache hit ratio (0-1, NaN without
        the server's counters).
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
    compute_moved: bool = False
    ceiling: CeilingChange | None = None
    knee: KneeChange | None = None
    ttft_wait: TtftWait | None = None
    batching_gains: dict[str, tuple[float | None, Estimate]] = field(default_factory=dict)
    shares: dict[str, float] | None = None
    axis: LoadAxis = USERS
    prefix_cache_hit_ratios: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict:
        """The ``compare.json`` ``attribution`` object (``compare.json`` schema 2)."""
        return {
            "round": self.round,
            "baseline": self.baseline,
            "kind": self.kind,
            "evidence": list(self.evidence),
            "single_request": {
                "decode_tps_ratio": self.single_decode_ratio.to_json(),
                "ttft_ms_ratio": self.single_ttft_ratio.to_json(),
                "server_prefill_ms_ratio": (
                    self.ttft_wait.prefill_ratio if self.ttft_wait is not None else nan_estimate()
                ).to_json(),
                "ttft_is_wait": None if self.ttft_wait is None else self.ttft_wait.explained,
                "moved": self.compute_moved,
                "repeat_within_round": {
                    key: None if found is None else {"round": found[0], "ratio": found[1].to_json()}
                    for key, found in (
                        ("decode_tps", self.single_repeat.get("decode rate")),
                        ("ttft_ms", self.single_repeat.get("TTFT")),
                    )
                },
            },
            "concurrent": {
                "knee_output_tps_prorated_ratio": self.knee_tps_ratio.to_json(),
                "common_steps": [
                    {self.axis.value_key: _users(u), "output_tps_prorated_ratio": e.to_json()}
                    for u, e in sorted(self.common_step_ratios.items())
                ],
                "batching_gain": {
                    key: {f"from_{self.axis.value_key}": _level_json(low), "ratio": gain.to_json()}
                    for key, (low, gain) in self.batching_gains.items()
                },
            },
            "batch_ceiling": None if self.ceiling is None else self.ceiling.to_json(),
            "critical_concurrency": None if self.knee is None else self.knee.to_json(),
            "shares": self.shares,
            "prefix_cache_hit_ratio": {
                k: (v if math.isfinite(v) else None) for k, v in self.prefix_cache_hit_ratios.items()
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
    knee_b, knee_o = base.prorated_at(base.knee_users), other.prorated_at(other.knee_users)
    knee = ratio_of(knee_o, knee_b) if knee_b is not None and knee_o is not None else nan_estimate()
    common = {
        u: ratio_of(other.step_tps_prorated[u], base.step_tps_prorated[u])
        for u in sorted(set(base.step_tps_prorated) & set(other.step_tps_prorated))
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
    decode_moved = is_clear(decode) and not within["decode rate"]
    wait = ttft_wait(base, other, step_ms, is_clear) if ttft_beyond_repeat and not within_step else None
    prefill_moved = wait is not None and wait.explained is not True
    compute_moved = decode_moved or prefill_moved
    c_clear = is_clear(knee)
    ceiling = ceiling_change(base, other)
    knee_move = knee_change(base, other, axis.unit)
    ceiling_moved = ceiling.moved and ceiling.binding
    gains = {"baseline": batching_gain(base, base.knee_users), "round": batching_gain(other, other.knee_users)}
    evidence = [
        f"single request ({base.single_source} vs {other.single_source}): decode rate "
        f"{base.single_decode_tps.text()} -> {other.single_decode_tps.text()} tokens/s, ratio "
        f"{decode.text('{:.2f}')} ({_direction(decode, 'faster', 'slower')}); TTFT "
        f"{base.single_ttft_ms.text('{:.0f}')} -> {other.single_ttft_ms.text('{:.0f}')} ms, ratio "
        f"{ttft.text('{:.2f}')}",
        f"concurrent: prorated output tokens/s at the knee ({_u(base.knee_users)} vs {_u(other.knee_users)} "
        f"{axis.unit}) {_t(knee_b)} -> {_t(knee_o)}, ratio {knee.text('{:.2f}')} ({_direction(knee, 'higher', 'lower')})",
    ]
    if common:
        evidence.append(
            "prorated throughput ratio at common steps: "
            + ", ".join(f"{axis.fmt(u)} {e.text('{:.2f}')}" for u, e in common.items())
        )
    evidence += [ceiling.text, knee_move.text]
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
    if wait is not None and wait.text is not None:
        evidence.append(wait.text)
    elif wait is not None:
        evidence.append(
            f"the single-request TTFT differs by {ttft_gap_ms:.0f} ms and nothing says it is a wait (no "
            "server prefill times, no declared batch timer that covers it, no TTFT that falls as load "
            "fills the batch): it is counted as the change's prefill cost"
        )
    sizes = {"single_decode": detectable(decode), "knee_tps": detectable(knee)}
    bottlenecks = {base.name: base.bottleneck, other.name: other.bottleneck}
    clients = [name for name, kind in bottlenecks.items() if kind == "client"]
    single_measured = math.isfinite(decode.value) or math.isfinite(ttft.value)
    shares = None
    cache = _prefix_cache_change(base, other, ttft)
    if clients or (client_changes_only and c_clear):
        kind = "client"
        evidence.append(
            ("the verdict names the client as the bottleneck of " + ", ".join(clients))
            if clients
            else "every change found is a client setting"
        )
    elif not compute_moved and not (c_clear or knee_move.moved):
        kind = "no_difference"
        evidence.append(
            "no difference beyond noise: this run length detects single-request "
            f"decode-rate differences of about {_pct(sizes['single_decode'])} and "
            f"throughput differences at the knee of about {_pct(sizes['knee_tps'])}"
            + ("; the batch ceiling moved, but nothing it sets did" if ceiling_moved else "")
        )
    elif not single_measured:
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
    elif not compute_moved:
        kind = "batching_or_scheduling"
        moved = [
            what
            for what, did in (
                ("the batch ceiling", ceiling_moved),
                ("the critical concurrency", knee_move.moved),
                ("the concurrent throughput", c_clear),
            )
            if did
        ]
        evidence.append(
            "the single request's decode rate is unchanged (within the noise or "
            f"{MIN_EFFECT:.0%}) while {_join(moved)} moved: batching or scheduling explains it, not "
            "the change's compute cost"
        )
    elif cache is not None and prefill_moved and not (decode_moved or ceiling_moved):
        kind = "prefix_cache"
        evidence.append(
            f"the server's prefix cache hit {cache[0]:.1%} of the prompt tokens in round {base.name} and "
            f"{cache[1]:.1%} in round {other.name} (its own counters); the single request's TTFT moved "
            f"(ratio {ttft.text('{:.2f}')}) while its decode rate did not: a prefix cache skips the prefill of "
            "the cached tokens and nothing of the decode, so the prefix cache is the cause"
            + (
                f"; the concurrent throughput at the knee moved with it (ratio {knee.text('{:.2f}')}): the same "
                "prefill work, taken from or given back to the engine's steps"
                if c_clear or knee_move.moved
                else ""
            )
        )
    elif not (ceiling_moved or knee_move.moved):
        kind = "compute_cost"
        evidence.append(_compute_sentence(decode, knee, gains, axis, decode_moved))
    else:
        kind = "mixed"
        shares = _shares(decode, knee)
        moved = [
            w for w, did in (("the batch ceiling", ceiling_moved), ("the critical concurrency", knee_move.moved)) if did
        ]
        evidence.append(
            f"the single request moved and so did {_join(moved)}: both causes, "
            + (
                f"the knee throughput ratio x{knee.value:.2f} = compute x{shares['compute_factor']:.2f} "
                f"(the single-request decode ratio) times batching x{shares['batching_factor']:.2f}; "
                f"shares {shares['compute']:.0%} compute, {shares['batching']:.0%} batching/scheduling"
                if shares is not None
                else "the shares cannot be told apart (no knee throughput in both rounds, or only the prefill moved)"
            )
        )
    if kind in ("compute_cost", "mixed") and cache is not None and prefill_moved and decode_moved:
        evidence.append(
            f"the single request's TTFT (ratio {ttft.text('{:.2f}')}) follows the server's prefix-cache hit ratio "
            f"({cache[0]:.1%} in round {base.name}, {cache[1]:.1%} in round {other.name}): that part is the prefix "
            f"cache's; its decode rate moved too (ratio {decode.text('{:.2f}')}), which a prefix cache does not do: "
            "something else differs as well"
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
        compute_moved=compute_moved,
        ceiling=ceiling,
        knee=knee_move,
        ttft_wait=wait,
        batching_gains=gains,
        shares=shares,
        axis=axis,
        prefix_cache_hit_ratios={"baseline": base.prefix_cache_hit_ratio, "round": other.prefix_cache_hit_ratio},
    )


def _prefix_cache_change(base: RoundSummary, other: RoundSummary, ttft: Estimate) -> tuple[float, float] | None:
    """(base, other) prefix-cache hit ratios when they differ by at least
    :data:`MIN_PREFIX_HIT_CHANGE` in the direction the TTFT ratio moved (more hits, shorter
    TTFT); None otherwise or when a round has no such figure."""
    hit_b, hit_o = base.prefix_cache_hit_ratio, other.prefix_cache_hit_ratio
    if not (math.isfinite(hit_b) and math.isfinite(hit_o) and math.isfinite(ttft.value)):
        return None
    if abs(hit_o - hit_b) < MIN_PREFIX_HIT_CHANGE or (hit_o - hit_b) * (ttft.value - 1.0) >= 0:
        return None
    return hit_b, hit_o


def _compute_sentence(
    decode: Estimate,
    knee: Estimate,
    gains: dict[str, tuple[float | None, Estimate]],
    axis: LoadAxis,
    decode_moved: bool,
) -> str:
    """The ``compute_cost`` sentence: both ratios, and the batching gains when they differ."""
    head = "the single request differs beyond noise while the batch ceiling and the critical concurrency stayed"
    if not decode_moved:
        return head + ": the change's prefill cost is the cause (its decode rate did not move)"
    if not math.isfinite(knee.value):
        return head + " (no concurrent figure to compare): the change's compute cost is the cause"
    if _follows(knee, decode):
        return (
            head + f"; the concurrent throughput follows (x{knee.value:.2f} at the knee, x{decode.value:.2f} "
            "alone): the change's compute cost is the cause"
        )
    (_, gain_b), (low_o, gain_o) = gains["baseline"], gains["round"]
    less = knee.value / decode.value < 1.0
    gain_text = (
        f" (prorated tokens/s at the knee over the lowest step: x{gain_o.value:.2f} after the change, "
        f"x{gain_b.value:.2f} before, from {axis.fmt(low_o)})"
        if math.isfinite(gain_b.value) and math.isfinite(gain_o.value) and low_o is not None
        else ""
    )
    return (
        head + f": the change's compute cost is the cause; the single-request ratio is x{decode.value:.2f} "
        f"and the concurrent one x{knee.value:.2f} at the knee: the changed build gains "
        + ("less" if less else "more")
        + f" from batching{gain_text}, at its own per-token cost with the same scheduler"
    )


def _follows(knee: Estimate, decode: Estimate) -> bool:
    """``knee`` moves the same way as ``decode`` by a factor within :data:`EXPLAINED_FACTOR`."""
    if not (math.isfinite(decode.value) and decode.value > 0 and knee.value > 0):
        return False
    if (knee.value - 1.0) * (decode.value - 1.0) <= 0:
        return False
    return max(knee.value / decode.value, decode.value / knee.value) <= EXPLAINED_FACTOR


def _shares(decode: Estimate, knee: Estimate) -> dict[str, float] | None:
    """``T = S * B`` with ``S`` the decode ratio; shares of ``|log S| + |log B|`` (None when ``T`` or ``S``
    is missing). A round whose prefill alone moved has ``S`` near 1: its throughput change is batching's."""
    if not (math.isfinite(knee.value) and knee.value > 0 and decode.value > 0):
        return None
    compute, batching = decode.value, knee.value / decode.value
    total = abs(math.log(compute)) + abs(math.log(batching))
    share = abs(math.log(compute)) / total if total > 0 else 0.5
    return {"compute_factor": compute, "batching_factor": batching, "compute": share, "batching": 1.0 - share}


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _level_json(value: float | None) -> int | float | None:
    return None if value is None else _users(value)


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
