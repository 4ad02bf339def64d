"""Server-side rules: batching off, scheduler ceiling, KV cache, compute, missing fields.

Each rule reads the usable steps of the step table (valid, not dominated by failures; sorted by
target users) and returns one :class:`~llm_locust.analysis.verdict.types.Evidence`. Written here rather
than taken from a library: these are the playbooks' attribution rules themselves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from llm_locust.analysis.loadaxis import USERS, LoadAxis, load_axis
from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.verdict.flags import flags_for
from llm_locust.analysis.verdict.knee import CriticalConcurrency
from llm_locust.analysis.verdict.types import BottleneckKind, Evidence, Rules

K = BottleneckKind


@dataclass(frozen=True, kw_only=True)
class ServerSide:
    """What the run says about the server beyond the step table.

    Attributes
    ----------
    family : str or None
        Server family (:class:`llm_locust.analysis.server.families.ServerFamily` value) for flag names.
    errors : pandas.DataFrame or None
        Server log error lines (``t_s`` Unix s, ``kind``); None without a log.
    batches : pandas.DataFrame or None
        Per-step statistics of the batches the log reports
        (:func:`llm_locust.analysis.server.batches.batch_stats`: ``step``, ``n_batches``,
        ``batch_size_p50/max``, ``batch_wait_ms_p50/max``, ``batch_wait_at_max_ratio``,
        ``queue_mean``...); None when the log reports no batches.
    batch_wait_max_ms : float or None
        The server's configured longest batch wait, ms (from its startup log), if read.
    replica_ceilings : dict
        With several replicas scraped: ``{name: its own configured batch ceiling or None}``
        (:mod:`llm_locust.analysis.server.replicas`); empty for one server.
    error_settings : dict
        ``{error kind: the setting behind those log lines}`` from the format file's
        ``[[log.errors]] setting`` (:attr:`~llm_locust.analysis.server.userformat.UserFormat.error_settings`;
        several settings of one kind joined with " / "); empty when none is named. Without a
        format file's ``timeout`` setting, the setting of the gateway whose 504 page the
        requests carry (:func:`llm_locust.analysis.perrequest.gatewaypage.gateway_timeouts`).
    timeout_page : str
        That gateway's name (``nginx``) when its 504 page names the ``timeout`` setting, "" otherwise.
    """

    family: str | None = None
    errors: pd.DataFrame | None = None
    batches: pd.DataFrame | None = None
    batch_wait_max_ms: float | None = None
    replica_ceilings: dict = field(default_factory=dict)
    error_settings: dict = field(default_factory=dict)
    timeout_page: str = ""


def gain_per_doubling(users_prev: float, users: float, tps_prev: float, tps: float) -> float:
    """``(tps / tps_prev) ** (1 / log2(users / users_prev))``; NaN when undefined.

    >>> round(gain_per_doubling(4, 8, 200.0, 210.0), 3)
    1.05
    """
    if not (users > users_prev > 0) or not (tps_prev > 0) or not np.isfinite(tps):
        return math.nan
    return float((tps / tps_prev) ** (1.0 / math.log2(users / users_prev)))


def _ceiling(usable: pd.DataFrame, config: ServerConfig) -> tuple[float, str]:
    """The batch ceiling: configured when known, else the highest step-average running."""
    if config.batch_ceiling is not None:
        return float(
            config.batch_ceiling
        ), f"the configured {config.batch_ceiling_name or 'batch ceiling'} = {config.batch_ceiling}"
    top = usable["server_running"].max() if usable["server_running"].notna().any() else math.nan
    return float(top), f"the highest observed running {top:.2f}"


def batching_off(usable: pd.DataFrame, config: ServerConfig, rules: Rules) -> Evidence:
    """Rule ``batching_off``: batch size ~1 while requests wait, or a configured ceiling of 1.

    Holds when the configured batch ceiling is 1, or when at some step with 2 or more users
    the server's time-averaged running is at most ``rules.batch_of_one`` while its waiting is
    above ``rules.waiting_threshold`` (whatever a setting says) and no usable step ever ran
    more than ``rules.batch_of_one`` (a static batcher that runs 1 at 2 users and 4 at 8 does
    batch).
    """
    axis = load_axis(usable)
    name = config.batch_ceiling_name or "batch ceiling"
    if config.batch_ceiling == 1:
        return Evidence(
            rule="batching_off",
            kind=K.BATCHING_OFF,
            holds=True,
            values={"configured_ceiling": 1},
            units={"configured_ceiling": "requests"},
            text=f"the configured {name} = 1 runs one request at a time: batching is off",
        )
    logged = _logged_batch_of_one(usable, rules)
    if logged is not None:
        return logged
    top = usable["server_running"].max() if usable["server_running"].notna().any() else math.nan
    never_batched = bool(np.isfinite(top) and top <= rules.batch_of_one)
    for row in usable.itertuples(index=False):
        if (
            never_batched
            and _demand(row, axis) >= 2
            and row.server_running <= rules.batch_of_one
            and row.server_waiting > rules.waiting_threshold
        ):
            return Evidence(
                rule="batching_off",
                kind=K.BATCHING_OFF,
                holds=True,
                values={
                    axis.value_key: getattr(row, axis.column),
                    "server_running": row.server_running,
                    "server_waiting": row.server_waiting,
                },
                units={axis.value_key: axis.value_unit, "server_running": "requests", "server_waiting": "requests"},
                text=(
                    f"at {axis.fmt(getattr(row, axis.column))} the server ran {row.server_running:.2f} "
                    f"requests at a time while {row.server_waiting:.2f} waited: batching is off in practice"
                    + (f" (although {name} = {config.batch_ceiling})" if config.batch_ceiling else "")
                ),
            )
    return Evidence(
        rule="batching_off",
        kind=K.BATCHING_OFF,
        holds=False,
        values={"max_server_running": top},
        units={"max_server_running": "requests"},
        text=(
            "no server running/waiting data to tell"
            if not np.isfinite(top)
            else f"the server batched up to {top:.2f} requests"
        ),
    )


def _logged_batch_of_one(usable: pd.DataFrame, rules: Rules) -> Evidence | None:
    """``batching_off`` from the log's own batches: every logged batch of every usable step
    held at most one sequence, while at some step with 2 or more users requests waited (the
    log's queue, else the server's waiting). None when the log reports no batch sizes."""
    axis = load_axis(usable)
    if "batch_size_max" not in usable.columns or not usable["batch_size_max"].notna().any():
        return None
    if usable["batch_size_max"].max() > 1:
        return None
    queue = usable["queue_mean"] if "queue_mean" in usable.columns else pd.Series(np.nan, index=usable.index)
    waiting = queue.where(queue.notna(), usable["server_waiting"])
    demand = usable["target_users"] if axis is USERS else usable["client_inflight"]
    waited = usable[(demand >= 2) & (waiting > rules.waiting_threshold)]
    if waited.empty:
        return None
    row = waited.iloc[0]
    wait = float(waiting.loc[waited.index[0]])
    return Evidence(
        rule="batching_off",
        kind=K.BATCHING_OFF,
        holds=True,
        values={
            axis.value_key: row[axis.column],
            "batch_size_max": 1.0,
            "n_batches": float(usable["n_batches"].sum()),
            "waiting": wait,
        },
        units={
            axis.value_key: axis.value_unit,
            "batch_size_max": "requests",
            "n_batches": "batches",
            "waiting": "requests",
        },
        text=(
            f"every batch the server logged held 1 sequence ({int(usable['n_batches'].sum())} "
            f"batches) while at {axis.fmt(row[axis.column])} {wait:.2f} requests "
            "waited: batching is off in practice"
        ),
    )


def batch_wait(usable: pd.DataFrame, batch_wait_max_ms: float | None, rules: Rules) -> Evidence:
    """Rule ``batch_wait``: batches wait to fill. Not a bottleneck kind of its own: evidence and a
    recommendation (shorten the batch wait).

    Holds when at some usable step at least ``rules.batch_wait_at_max_share`` of the logged
    batches waited their configured maximum (:data:`llm_locust.analysis.server.batches.AT_MAX_FRACTION` of
    ``batch_wait_max_ms``): batches start because the timer fires, not because they filled, so
    every request pays that wait in its TTFT.
    """
    axis = load_axis(usable)
    if "batch_wait_at_max_ratio" not in usable.columns or not usable["batch_wait_at_max_ratio"].notna().any():
        why = (
            "the log reports no batch waits"
            if batch_wait_max_ms is None or "batch_wait_ms_p50" not in usable.columns
            else "the configured batch wait is not known: cannot tell whether batches wait to fill"
        )
        return Evidence(rule="batch_wait", kind=K.NONE, holds=False, text=why)
    at_max = usable[usable["batch_wait_at_max_ratio"] >= rules.batch_wait_at_max_share]
    if at_max.empty:
        worst = float(usable["batch_wait_at_max_ratio"].max())
        return Evidence(
            rule="batch_wait",
            kind=K.NONE,
            holds=False,
            values={"batch_wait_at_max_ratio": worst},
            units={"batch_wait_at_max_ratio": "ratio"},
            text=f"batches rarely wait their configured maximum (at most {worst:.0%} of a step's)",
        )
    row = at_max.iloc[0]
    values = {
        axis.value_key: row[axis.column],
        "batch_wait_at_max_ratio": row["batch_wait_at_max_ratio"],
        "batch_wait_ms_p50": row["batch_wait_ms_p50"],
        "batch_wait_max_ms": float(batch_wait_max_ms or math.nan),
        "batch_size_p50": row["batch_size_p50"],
    }
    units = {
        axis.value_key: axis.value_unit,
        "batch_wait_at_max_ratio": "ratio",
        "batch_wait_ms_p50": "ms",
        "batch_wait_max_ms": "ms",
        "batch_size_p50": "requests",
    }
    return Evidence(
        rule="batch_wait",
        kind=K.NONE,
        holds=True,
        values=values,
        units=units,
        text=(
            f"at {axis.fmt(row[axis.column])} {row['batch_wait_at_max_ratio']:.0%} of "
            f"the batches waited the configured maximum ({batch_wait_max_ms:g} ms; median "
            f"batch {row['batch_size_p50']:.0f}): batches wait to fill, and every request "
            "pays that wait in its TTFT"
        ),
    )


def _demand(row, axis: LoadAxis) -> float:
    """Requests the client asked to have in flight at a step: its target users, or (a rate
    ladder, where users are only the pool) its achieved in-flight."""
    return float(row.target_users if axis is USERS else row.client_inflight)


def _saturated_row(usable: pd.DataFrame, critical: CriticalConcurrency):
    if critical.saturated_step is None:
        return None, None
    rows = usable.reset_index(drop=True)
    at = rows.index[rows["step"] == critical.saturated_step]
    if not len(at):
        return None, None
    i = int(at[0])
    return rows.iloc[i], (rows.iloc[i - 1] if i > 0 else None)


def scheduler_ceiling(
    usable: pd.DataFrame, critical: CriticalConcurrency, config: ServerConfig, rules: Rules
) -> Evidence:
    """Rule ``scheduler_ceiling``: waiting persistently > 0 while running sits at the ceiling and
    throughput stops rising.

    At the first saturated step of the critical-concurrency rule (throughput stops rising):
    running >= ``rules.running_ceiling`` x the ceiling (configured, else the highest observed
    step-average running) and waiting > ``rules.waiting_threshold`` there and at every later
    usable step.
    """
    axis = load_axis(usable)
    row, prev = _saturated_row(usable, critical)
    if row is None:
        return Evidence(
            rule="scheduler_ceiling",
            kind=K.SCHEDULER_CEILING,
            holds=False,
            text="throughput did not stop rising on the usable steps",
        )
    ceiling, said = _ceiling(usable, config)
    later = usable[usable[axis.column] >= row[axis.column]]["server_waiting"]
    persistent = bool(len(later) and (later > rules.waiting_threshold).all())
    at_ceiling = bool(row["server_running"] >= rules.running_ceiling * ceiling)
    gain = (
        gain_per_doubling(prev[axis.column], row[axis.column], prev["output_tps"], row["output_tps"])
        if prev is not None
        else math.nan
    )
    values = {
        axis.value_key: row[axis.column],
        "server_running": row["server_running"],
        "server_waiting": row["server_waiting"],
        "ceiling": ceiling,
        "gain_per_doubling": gain,
        "ttft_p50_ms": row["ttft_p50_ms"],
        "previous_ttft_p50_ms": prev["ttft_p50_ms"] if prev is not None else math.nan,
    }
    units = {
        axis.value_key: axis.value_unit,
        "server_running": "requests",
        "server_waiting": "requests",
        "ceiling": "requests",
        "gain_per_doubling": "ratio",
        "ttft_p50_ms": "ms",
        "previous_ttft_p50_ms": "ms",
    }
    if not np.isfinite(row["server_running"]):
        return Evidence(
            rule="scheduler_ceiling",
            kind=K.SCHEDULER_CEILING,
            holds=False,
            values=values,
            units=units,
            text=(
                f"throughput stops rising at {axis.fmt(row[axis.column])} "
                "while TTFT climbs, but the server's running/waiting counts are "
                "missing: a scheduler ceiling cannot be told from a full KV cache"
            ),
        )
    holds = persistent and at_ceiling
    text = (
        f"at {axis.fmt(row[axis.column])} {row['server_waiting']:.2f} requests wait "
        f"while running sits at {row['server_running']:.2f} of {said}; output throughput "
        f"gains x{gain:.2f} per doubling and TTFT p50 goes {values['previous_ttft_p50_ms']:.0f} "
        f"-> {row['ttft_p50_ms']:.0f} ms"
    )
    if not holds:
        text = f"not a scheduler ceiling at {axis.fmt(row[axis.column])}: " + (
            "running {:.2f} is below {}".format(row["server_running"], said)
            if not at_ceiling
            else "requests do not wait at every step from there on"
        )
    return Evidence(
        rule="scheduler_ceiling", kind=K.SCHEDULER_CEILING, holds=holds, values=values, units=units, text=text
    )


def kv_cache(usable: pd.DataFrame, critical: CriticalConcurrency, config: ServerConfig, rules: Rules) -> Evidence:
    """Rule ``kv_cache``: running plateaus below the configured ceiling while the KV cache is
    near full or preemptions climb.

    At the first saturated step (else the first usable step where requests wait): running <
    ``rules.running_ceiling`` x the configured ceiling (skipped when no ceiling was read), and
    the cache is full - KV usage >= ``rules.kv_full_ratio``, or no room for one more request of
    the step's own size (:func:`no_room_for_one_more`) - or preemptions/s >
    ``rules.min_preemptions_per_s`` and at least half the previous step's (climbing, or sustained
    at the limit).
    """
    axis = load_axis(usable)
    row, prev = _saturated_row(usable, critical)
    if row is None:
        rows = usable.reset_index(drop=True)
        waits = rows.index[rows["server_waiting"] > rules.waiting_threshold]
        if not len(waits):
            return Evidence(rule="kv_cache", kind=K.KV_CACHE, holds=False, text="no usable step where requests wait")
        row, prev = rows.iloc[waits[0]], (rows.iloc[waits[0] - 1] if waits[0] > 0 else None)
    kv = float(row["kv_usage_ratio"])
    pre = float(row.get("server_preemptions_per_s", math.nan))
    pre_prev = float(prev.get("server_preemptions_per_s", math.nan)) if prev is not None else 0.0
    # sustained preemptions are the KV limit too: a run that preempts 8.6/s at 8 users and
    # 8.4/s at 16 is at that limit at both, not "no longer climbing"
    climbing = bool(pre > rules.min_preemptions_per_s and (not np.isfinite(pre_prev) or pre >= 0.5 * pre_prev))
    full = bool(kv >= rules.kv_full_ratio) or no_room_for_one_more(kv, float(row["server_running"]))
    ceiling = config.batch_ceiling
    below = True if ceiling is None else bool(row["server_running"] < rules.running_ceiling * ceiling)
    values = {
        axis.value_key: row[axis.column],
        "server_running": row["server_running"],
        "configured_ceiling": math.nan if ceiling is None else ceiling,
        "kv_usage_ratio": kv,
        "preemptions_per_s": pre,
    }
    units = {
        axis.value_key: axis.value_unit,
        "server_running": "requests",
        "configured_ceiling": "requests",
        "kv_usage_ratio": "ratio",
        "preemptions_per_s": "1/s",
    }
    holds = below and (full or climbing)
    name = config.batch_ceiling_name or "batch ceiling"
    where = f"below the configured {name} = {ceiling}" if ceiling is not None else "(no configured ceiling read)"
    if holds:
        text = (
            f"at {axis.fmt(row[axis.column])} running plateaus at "
            f"{row['server_running']:.2f} {where} while "
            + (f"the KV cache is {kv:.0%} full" if full else "")
            + (
                f" (each request holds about {kv / row['server_running']:.0%}: no room for one more)"
                if full and kv < rules.kv_full_ratio
                else ""
            )
            + (" and " if full and climbing else "")
            + (f"preemptions climb to {pre:.2f}/s" if climbing else "")
        )
    elif not np.isfinite(kv) and not np.isfinite(pre):
        text = "the server's KV cache usage and preemptions are missing: cannot tell"
    else:
        seen = ", ".join(
            part
            for part, value in ((f"KV cache {kv:.0%} full", kv), (f"preemptions {pre:.2f}/s", pre))
            if np.isfinite(value)
        )
        text = (
            f"{seen} at {axis.fmt(row[axis.column])}, running {row['server_running']:.2f} {where}: not a KV cache limit"
        )
    return Evidence(rule="kv_cache", kind=K.KV_CACHE, holds=holds, values=values, units=units, text=text)


def no_room_for_one_more(kv_usage_ratio: float, running: float) -> bool:
    """Whether a KV cache this full has no room for one more request of the step's own size.

    Both are step averages: the share one request holds is ``kv_usage_ratio / running``, so the
    cache cannot take another when ``kv_usage_ratio + kv_usage_ratio / running > 1``. A plain
    threshold misses a small cache read as a step average: the gauge dips in the moments
    between one request's end and the next one's admission, as running does (real vLLM,
    ``--num-gpu-blocks-override 5``, one 128-token block a request: 4 usable blocks, KV usage
    0.89 beside running 3.56 while 4 requests waited at 8 users; full at 4 running).

    >>> no_room_for_one_more(0.89, 3.56), no_room_for_one_more(0.5, 4.0)
    (True, False)
    """
    if not (np.isfinite(kv_usage_ratio) and np.isfinite(running)) or running <= 0:
        return False
    return bool(kv_usage_ratio * (1.0 + 1.0 / running) > 1.0)


def compute(usable: pd.DataFrame, rules: Rules) -> tuple[Evidence, pd.Series | None]:
    """Rule ``compute``: running keeps rising with no queue, yet output throughput stops rising.

    The first usable step ``i >= 1`` where the throughput gain per doubling is below
    ``rules.compute_gain_per_doubling``, no queue (:func:`step_wait_bound`) and running rose
    above ``(1 + rules.running_rise_tol)`` x the previous step's: the server batches every
    request it gets, and each decode step just takes longer - the hardware is at its limit.
    ``output_tps`` here is the throughput :func:`llm_locust.analysis.verdict.rules.judged_throughput`
    hands in (the prorated figure, so whole waves of completions are no plateau); and no later
    usable step may beat that step's throughput by more than ``rules.min_gain_per_doubling``
    (a plateau that does not last is noise).

    Returns
    -------
    (Evidence, row)
        ``row`` is the step where it happens (None when the rule does not hold).
    """
    axis = load_axis(usable)
    rows = usable.reset_index(drop=True)
    for i in range(1, len(rows)):
        row, prev = rows.iloc[i], rows.iloc[i - 1]
        gain = gain_per_doubling(prev[axis.column], row[axis.column], prev["output_tps"], row["output_tps"])
        rising = bool(row["server_running"] > (1 + rules.running_rise_tol) * prev["server_running"])
        if (
            gain < rules.compute_gain_per_doubling
            and rising
            and row["server_waiting"] <= step_wait_bound(row["server_running"], rules)
            and not _rises_later(rows, i, rules)
        ):
            values = {
                axis.value_key: row[axis.column],
                "gain_per_doubling": gain,
                "server_running": row["server_running"],
                "previous_server_running": prev["server_running"],
                "server_waiting": row["server_waiting"],
                "tpot_p50_ms": row["tpot_p50_ms"],
                "previous_tpot_p50_ms": prev["tpot_p50_ms"],
            }
            units = {
                axis.value_key: axis.value_unit,
                "gain_per_doubling": "ratio",
                "server_running": "requests",
                "previous_server_running": "requests",
                "server_waiting": "requests",
                "tpot_p50_ms": "ms",
                "previous_tpot_p50_ms": "ms",
            }
            text = (
                f"at {axis.fmt(row[axis.column])} running rose "
                f"{prev['server_running']:.2f} -> {row['server_running']:.2f} with no queue "
                f"(waiting {row['server_waiting']:.2f}, within the {step_wait_bound(row['server_running'], rules):.2f} "
                "that wait only for a decode step's end), yet output throughput gained only "
                f"x{gain:.2f} per doubling (TPOT p50 {prev['tpot_p50_ms']:.1f} -> "
                f"{row['tpot_p50_ms']:.1f} ms): the hardware is at its limit"
            )
            return Evidence(rule="compute", kind=K.COMPUTE, holds=True, values=values, units=units, text=text), row
    return Evidence(
        rule="compute",
        kind=K.COMPUTE,
        holds=False,
        text="no step where throughput stops rising while running still rises without a queue",
    ), None


def step_wait_bound(running: float, rules: Rules) -> float:
    """The most requests that may wait, on average, at a step with ``running`` requests running
    for the ``compute`` rule to count it as "no queue": ``rules.waiting_threshold``, or
    ``rules.compute_wait_share`` x running when more.

    A request that arrives while the engine runs a decode step waits for that step's end (vLLM,
    the embedded server), so a batch that grows and slows keeps a few requests waiting without a
    queue: about running / (2 x tokens per request) on average, and a step of three scrapes can
    read several times that (the embedded server's compute scenario: 1.14 waiting beside 6.86
    running, 0 at the next step). A queue of a ceiling or a full KV cache holds what running
    cannot take, and running does not rise there.
    """
    return max(rules.waiting_threshold, rules.compute_wait_share * running)


def _rises_later(rows: pd.DataFrame, i: int, rules: Rules) -> bool:
    """A later usable step beats step ``i``'s throughput by more than ``rules.min_gain_per_doubling``: the
    hardware was not at its limit at step ``i`` (a plateau that does not last is noise)."""
    later = rows.iloc[i + 1 :]
    return bool(len(later) and later["output_tps"].max() > rules.min_gain_per_doubling * rows.iloc[i]["output_tps"])


FIELDS: dict[str, tuple[str, ...]] = {
    "running": ("server_running",),
    "waiting": ("server_waiting",),
    "KV cache usage and preemptions": ("kv_usage_ratio", "server_preemptions_per_s"),
}
"""Server fields the rules read (by their name in the text) -> step-table columns; a field is
missing when none of its columns has a value in any step."""


def server_fields(table: pd.DataFrame, family: str | None) -> Evidence:
    """Rule ``server_fields_missing``: which server fields the run has no value of, and which
    flag or log level prints them (never guessed).

    Holds when some field of :data:`FIELDS` has no value in any step.
    """
    missing = [
        name for name, cols in FIELDS.items() if not any(c in table.columns and table[c].notna().any() for c in cols)
    ]
    values = {f"missing_{name.split()[0].lower()}": float(name in missing) for name in FIELDS}
    units = {k: "flag" for k in values}
    if not missing:
        return Evidence(
            rule="server_fields_missing",
            kind=K.NONE,
            holds=False,
            values=values,
            units=units,
            text="every server field the rules read has data",
        )
    flags = flags_for(family)
    hint = flags.kv_hint if missing == ["KV cache usage and preemptions"] and flags.kv_hint else flags.fields_hint
    return Evidence(
        rule="server_fields_missing",
        kind=K.NONE,
        holds=True,
        values=values,
        units=units,
        text=(
            f"the server's {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} "
            "missing from its log and metrics, and the rules that need them say "
            f"'cannot tell': {hint}"
        ),
    )
