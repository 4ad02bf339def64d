"""The verdict's one entry point: :func:`diagnose` names the bottleneck, with its evidence.

Order of judgement (the playbooks'): the client first, then failures, then the server's
batching, scheduler, KV cache and compute. The rule functions live in
:mod:`~llm_locust.analysis.verdict.client`, :mod:`~llm_locust.analysis.verdict.failures` and
:mod:`~llm_locust.analysis.verdict.batching`; recommendations in :mod:`~llm_locust.analysis.verdict.recommend`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
import pandas as pd

from llm_locust.analysis.loadaxis import USERS, load_axis
from llm_locust.analysis.perstep.table import replica_column, replica_names
from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.verdict.batching import (
    ServerSide,
    _saturated_row,
    batch_wait,
    batching_off,
    compute,
    kv_cache,
    scheduler_ceiling,
    server_fields,
)
from llm_locust.analysis.verdict.client import ClientSide, client_limit, client_load_note, client_validity
from llm_locust.analysis.verdict.failures import (
    failed_share,
    failed_time_share,
    failures,
    server_errors_per_step,
    step_failure_kind,
    timeout_cause,
)
from llm_locust.analysis.verdict.hiddenqueue import hidden_queue
from llm_locust.analysis.verdict.inferred import compute_beside_ceiling, kv_tokens
from llm_locust.analysis.verdict.knee import CriticalConcurrency, find_critical_concurrency, fmt_users
from llm_locust.analysis.verdict.outage import server_outage
from llm_locust.analysis.verdict.prefixcache import SharedPrefix, prefix_cache_recommendations, prefix_cache_unused
from llm_locust.analysis.verdict.recommend import recommend
from llm_locust.analysis.verdict.replicaimbalance import balance_recommendation, replica_imbalance, slack
from llm_locust.analysis.verdict.staticbatch import running_from_batches, static_batch
from llm_locust.analysis.verdict.types import RULES, BottleneckKind, Evidence, Recommendation, Rules, Verdict
from llm_locust.analysis.verdict.undetermined import Undecided, steps_too_short, unexplained

K = BottleneckKind

KIND_RULES: dict[BottleneckKind, str] = {
    K.CLIENT: "client",
    K.BATCHING_OFF: "batching_off",
    K.SCHEDULER_CEILING: "scheduler_ceiling",
    K.KV_CACHE: "kv_cache",
    K.COMPUTE: "compute",
    K.TIMEOUTS: "timeouts",
    K.REJECTIONS: "rejections",
    K.NONE: "none",
    K.UNDETERMINED: "undetermined",
}
"""The rule whose evidence speaks for each kind (secondaries are listed in this order)."""

INFERRED_RULES: dict[BottleneckKind, tuple[str, ...]] = {
    K.KV_CACHE: ("kv_tokens",),
    K.COMPUTE: ("compute_beside_ceiling",),
}
"""Rules of what the metrics do not show (:mod:`~llm_locust.analysis.verdict.inferred`) that make their kind a
secondary, never the primary."""

BATCH_COLUMNS: tuple[str, ...] = (
    "n_batches",
    "batch_size_p50",
    "batch_size_max",
    "batch_size_mean",
    "batch_wait_ms_p50",
    "batch_wait_at_max_ratio",
    "queue_mean",
)
"""Per-step statistics of the log's batches that the step table gains when the log reports
batches (:func:`llm_locust.analysis.server.batches.batch_stats`)."""


def diagnose(
    steps: pd.DataFrame,
    server: ServerSide,
    config: ServerConfig,
    client: ClientSide,
    *,
    rules: Rules = RULES,
    planned: Sequence[float] = (),
    warmup_s: float | None = None,
    request_tokens: float | None = None,
    shared_prefix: SharedPrefix | None = None,
) -> Verdict:
    """Name the run's bottleneck: one primary kind, secondaries, evidence, recommendations.

    1. Every step gets ``valid`` / ``invalid_reason`` (:func:`llm_locust.analysis.verdict.client.client_validity`)
       and its failure shares; the **usable** steps are valid and not dominated by failures
       (failures took >= ``rules.dominant_failure_share`` of the users' time,
       :func:`~llm_locust.analysis.verdict.failures.failed_time_share`: the same with or without the users'
       pause after a refusal).
    2. The critical-concurrency rule (:func:`llm_locust.analysis.verdict.knee.find_critical_concurrency`)
       runs on the usable steps only. The run **saturates** at the earliest of: its first
       saturated step, the first step where compute stops scaling (:func:`~llm_locust.analysis.verdict.batching.compute`),
       the first valid step dominated by failures. Failures that are significant (>=
       ``rules.significant_failure_share`` of the users' time) at the first saturated step itself
       count as failures there too (the playbook: the batch is full and requests are refused or
       time out - look at those first).
    3. Primary: ``client`` when an invalid step comes at or before that (or nothing saturated):
       no server kind is then named, even as a secondary. Else the kind of what happened first:
       failures dominate -> ``timeouts`` / ``rejections`` (critical concurrency: the usable step
       before); compute -> ``compute`` (likewise); a saturated step -> ``batching_off`` if its
       rule holds, else ``kv_cache`` if its rule holds, else ``scheduler_ceiling``. Nothing
       saturated -> ``batching_off`` if its rule holds, else ``none`` (with the steps to add).
       ``batching_off`` also replaces ``compute``.
       A step overlapping a server outage is invalid but never the client's doing
       (:mod:`~llm_locust.analysis.verdict.outage`): when no usable step is left, the primary is
       ``rejections`` with the outage as its evidence. With ``none``, a ladder the run's stop
       cut short (``planned`` levels never measured, or the last step incomplete) says so and
       asks to rerun it to completion, not for steps it already planned.
    4. Secondary: every other kind whose rule holds, in :data:`KIND_RULES` order, and the kinds
       of what the metrics do not show (:mod:`~llm_locust.analysis.verdict.inferred`: ``kv_cache`` by
       token arithmetic, ``compute`` beside a ceiling).

    Parameters
    ----------
    steps : pandas.DataFrame
        Per-step table (:func:`llm_locust.analysis.perstep.table.step_table`, with the server columns chosen by
        the pipeline); may also have ``server_preemptions_per_s`` and ``conn_wait_ms_mean``.
    server : ServerSide
        Family (for flag names) and log error lines.
    config : ServerConfig
        The server's configuration as read (batch ceiling etc.).
    client : ClientSide
        ``client_load.csv``, lost workers, client timeouts and connection settings.
    rules : Rules, default RULES
    planned : sequence of float, default ()
        The planned ladder (run.json ``shape.ladder`` users, or ``shape.rates`` requests/s); empty
        when unknown or when the run is still going (the live tab).
    request_tokens : float, optional
        The run's mean prompt tokens + max_tokens (the KV one request holds at most), for the
        token arithmetic of :func:`~llm_locust.analysis.verdict.inferred.kv_tokens`.
    shared_prefix : SharedPrefix, optional
        How the run's prompts share prefixes (run.json ``workload``): with the step table's
        ``prefix_cache_hit_ratio``, the note :func:`~llm_locust.analysis.verdict.prefixcache.prefix_cache_unused`
        and its recommendations.

    Returns
    -------
    Verdict
    """
    table = steps.copy()
    for column in ("server_preemptions_per_s", "conn_wait_ms_mean"):
        if column not in table.columns:
            table[column] = np.nan
    table["failed_share"] = failed_share(table)
    table["failed_time_share"] = failed_time_share(table)
    table["failures_dominate"] = table["failed_time_share"] >= rules.dominant_failure_share
    errors = server_errors_per_step(table, server.errors)
    table["server_errors"], table["server_error_kinds"] = errors["server_errors"], errors["server_error_kinds"]
    if server.batches is not None and not server.batches.empty:
        stats = server.batches.set_index("step")
        for column in BATCH_COLUMNS:
            if column in stats.columns:
                table[column] = table["step"].map(stats[column]).astype("float64")
    table, from_batches = running_from_batches(table)
    validity = client_validity(table, client, rules)
    for column in validity.columns:
        table[column] = validity[column]
    axis = load_axis(table)
    ordered = table[np.isfinite(table[axis.column])].sort_values(axis.column, kind="stable")
    dominated = ordered["failed_time_share"] >= rules.dominant_failure_share
    usable = ordered[ordered["valid"] & ~dominated]
    left_out = [
        f"step {r.step} ({axis.fmt(getattr(r, axis.column))}) left out: "
        + (
            (
                r.invalid_reason
                if r.invalid_reason.startswith(("incomplete", "outage"))
                else f"client-limited ({r.invalid_reason})"
            )
            if not r.valid
            else f"{r.failed_time_share:.0%} of the users' time went to failed requests ({r.error_kinds})"
        )
        for r in ordered[~ordered.index.isin(usable.index)].itertuples(index=False)
    ]
    usable, judged_on = judged_throughput(usable)
    usable = with_hidden_waiting(usable)
    knee = find_critical_concurrency(usable, **rules.knee_kwargs())
    knee = _ceiling_queue(knee, usable, config, axis.column, rules)
    knee = _replica_ceiling_queue(knee, usable, server.replica_ceilings, axis.column, rules)
    knee = replace(
        knee,
        evidence=tuple(left_out) + tuple(x for x in (judged_on, from_batches) if x) + knee.evidence,
        axis=axis,
    )  # the whole table's axis: the usable steps may be none

    ev: dict[str, Evidence] = {
        "timeouts": failures(table, K.TIMEOUTS, rules, server_log=server.errors is not None),
        "rejections": failures(table, K.REJECTIONS, rules, server_log=server.errors is not None),
        "batching_off": batching_off(usable, config, rules),
        "scheduler_ceiling": scheduler_ceiling(usable, knee, config, rules),
        "kv_cache": kv_cache(usable, knee, config, rules),
    }
    ev["compute"], compute_row = compute(usable, rules)
    ev["hidden_queue"] = hidden_queue(usable, rules)
    ev["batch_wait"] = batch_wait(usable, server.batch_wait_max_ms, rules)
    ev["static_batch"] = static_batch(usable, config, rules)
    ev["kv_tokens"] = kv_tokens(usable, knee, config, request_tokens, rules)
    ev["replica_imbalance"] = replica_imbalance(usable, server.replica_ceilings, rules, from_users=knee.saturated_users)
    first_fail = ordered[ordered["valid"] & dominated].head(1)
    failing_knee = _failing_at_knee(usable, knee.saturated_users, axis.column, rules)
    if failing_knee is not None and (len(first_fail) == 0 or knee.saturated_users < first_fail[axis.column].iloc[0]):
        first_fail = failing_knee
    if len(first_fail) == 0 and knee.saturated_users is None:
        # refusals that cap the throughput where the knee's other signs cannot show (a gateway's
        # limit_conn answers at once: no queue, no TTFT growth, the server's counters behind it)
        first_fail = _failing_flat(usable, axis.column, rules)
    cuts = [
        u
        for u in (
            knee.saturated_users,
            None if compute_row is None else float(compute_row[axis.column]),
            float(first_fail[axis.column].iloc[0]) if len(first_fail) else None,
        )
        if u is not None
    ]
    saturated = min(cuts) if cuts else None
    ev["client"] = client_limit(table, saturated)
    limited = ev["client"].holds and ev["client"].values.get("limited_run") == 1.0

    def before(users: float) -> float | None:
        below = usable.loc[usable[axis.column] < users, axis.column]
        return float(below.max()) if len(below) else None

    critical = knee
    undecided = Undecided(candidates=(), tells_apart="")
    if limited:
        primary = K.CLIENT
        first_bad = axis.fmt(ev["client"].values[axis.value_key])
        critical = replace(
            knee,
            users=None,
            saturated_step=None,
            saturated_users=None,
            evidence=knee.evidence + (ev["client"].text,),
            stop_reason=f"not judged: the load client was the limit from {first_bad}",
        )
    elif len(first_fail) and saturated == float(first_fail[axis.column].iloc[0]):
        row = first_fail.iloc[0]
        primary = step_failure_kind(row) or K.REJECTIONS
        critical = replace(
            knee,
            users=before(saturated),
            saturated_step=int(row["step"]),
            saturated_users=saturated,
            stop_reason="failures dominate" if bool(row["failures_dominate"]) else "requests fail at saturation",
        )
        # the failures' own evidence names the first step where they became significant: the run
        # stopped scaling there, not at the later step they came to dominate (nginx limit_conn 4:
        # 50 % failed at 8 users, 75 % at 16; the critical concurrency is 4, not 8)
        # (unless throughput still rose past that step: failures sprinkled below the saturation)
        named = ev[KIND_RULES[primary]].values.get(axis.value_key)
        if ev[KIND_RULES[primary]].holds and named is not None and np.isfinite(named) and named < saturated:
            at = ordered[ordered[axis.column] == named].head(1)
            tps_at = usable.loc[usable[axis.column] == named, "output_tps"]
            later = usable.loc[usable[axis.column] > named, "output_tps"]
            rose = bool(len(tps_at) and len(later) and later.max() > rules.min_gain_per_doubling * tps_at.iloc[0])
            if len(at) and not rose:
                critical = replace(
                    critical,
                    users=before(float(named)),
                    saturated_step=int(at["step"].iloc[0]),
                    saturated_users=float(named),
                    stop_reason="requests fail",
                )
    elif compute_row is not None and saturated == float(compute_row[axis.column]):
        primary = K.BATCHING_OFF if ev["batching_off"].holds else K.COMPUTE
        critical = replace(
            knee,
            users=before(saturated),
            saturated_step=int(compute_row["step"]),
            saturated_users=saturated,
            stop_reason="throughput stops rising without a queue",
        )
    elif knee.saturated_users is not None:
        if ev["batching_off"].holds:
            primary = K.BATCHING_OFF
        elif ev["kv_cache"].holds:
            primary = K.KV_CACHE
        elif ev["scheduler_ceiling"].holds or ev["replica_imbalance"].holds:
            primary = K.SCHEDULER_CEILING  # of the whole, or of the replica that fills first
        else:  # a saturation no kind's rule explains: say which kinds it can be, never one it denies
            primary = K.UNDETERMINED
            row, _ = _saturated_row(usable, knee)
            undecided = unexplained(row, config, rules, hidden=ev["hidden_queue"])
    else:
        primary = K.BATCHING_OFF if ev["batching_off"].holds else K.NONE
    if primary is K.BATCHING_OFF:
        critical = _queue_onset(critical, usable, axis.column, rules)
    ev["steps_too_short"] = steps_too_short(
        usable, _deciding_steps(usable, critical, axis.column), rules, warmup_s=warmup_s
    )
    proven = primary is K.SCHEDULER_CEILING and bool(config.batch_ceiling)  # the counters show it
    if ev["steps_too_short"].holds and primary in TOO_SHORT_KINDS and not proven:
        tentative = primary
        primary = K.UNDETERMINED
        undecided = Undecided(
            candidates=_short_candidates(tentative, undecided.candidates, usable, rules),
            tells_apart=ev["steps_too_short"].text.rsplit(": ", 1)[-1] + " and rerun the ladder",
        )
        critical = replace(
            critical,
            users=None,
            saturated_step=None,
            saturated_users=None,
            stop_reason="not judged: steps too short to tell (" + undecided.tells_apart + ")",
        )
    ev["compute_beside_ceiling"] = compute_beside_ceiling(
        usable, critical, primary in (K.SCHEDULER_CEILING, K.KV_CACHE), rules
    )
    ev["server_outage"] = server_outage(table, client.outages, client.started_at_s)
    outage_first = primary is K.NONE and usable.empty and ev["server_outage"].holds
    if outage_first:
        primary = K.REJECTIONS
    ev["none"] = _none_rule(usable, config, primary is K.NONE, table=table, planned=planned)
    ev["undetermined"] = _undetermined_rule(
        undecided if primary is K.UNDETERMINED else None, ev, critical, axis_fmt=axis.fmt
    )
    cause = timeout_cause(table, client.timeouts_s, rules)
    if cause is not None:
        ev["timeout_cause"] = cause
    ev["server_fields_missing"] = server_fields(table, server.family)
    ev["client_load_missing"] = client_load_note(client, rules)
    ev["prefix_cache_unused"] = prefix_cache_unused(
        usable, shared_prefix, config, replicas=max(1, len(server.replica_ceilings)), rules=rules
    )

    secondary = (
        ()
        if primary is K.CLIENT
        else tuple(
            kind
            for kind, rule in KIND_RULES.items()
            if kind not in (primary, K.NONE, K.UNDETERMINED)
            and (ev[rule].holds or any(ev[name].holds for name in INFERRED_RULES.get(kind, ())))
        )
    )
    first = ev["server_outage"] if outage_first else ev[KIND_RULES[primary]]
    if primary is K.SCHEDULER_CEILING and not first.holds and ev["replica_imbalance"].holds:
        first = ev["replica_imbalance"]
    evidence = (first, *[e for name, e in ev.items() if e is not first])
    recs = recommend(
        primary,
        secondary,
        ev,
        family=server.family,
        critical_users=critical.users,
        client_flags={"connections": client.connections, "keep_alive": client.keep_alive},
        chunked_prefill=config.chunked_prefill,
        axis=axis,
        planned=tuple(planned),
        tells_apart=undecided.tells_apart if primary is K.UNDETERMINED else "",
        error_settings=server.error_settings,
        timeout_page=server.timeout_page,
    )
    if ev["replica_imbalance"].holds:
        recs = (balance_recommendation(ev["replica_imbalance"]), *recs)
    recs = (*recs, *prefix_cache_recommendations(ev["prefix_cache_unused"], server.family))
    if ev["server_outage"].holds:
        recs = tuple(r for r in recs if not outage_first) + (
            Recommendation(
                change="find why the server went away (its log, restarts, OOM kills, the host) and rerun "
                "once it stays up",
                flag="",
                because="server_outage",
                verify="rerun the same ladder with the same script and inputs and check that "
                "client_report.json lists no outages and every step is valid",
            ),
        )
    return Verdict(
        bottleneck=primary,
        secondary=secondary,
        headline=first.text,
        critical=critical,
        evidence=evidence,
        recommendations=recs,
        table=table,
        candidates=undecided.candidates if primary is K.UNDETERMINED else (),
        tells_apart=undecided.tells_apart if primary is K.UNDETERMINED else "",
    )


def _failing_at_knee(usable: pd.DataFrame, users: float | None, column: str, rules: Rules) -> pd.DataFrame | None:
    """The first saturated step as a one-row frame when failures are significant there
    (``failed_time_share`` >= ``rules.significant_failure_share``, of one kind), else None."""
    if users is None or "failed_time_share" not in usable.columns:
        return None
    at = usable[usable[column] == users].head(1)
    if at.empty or not at["failed_time_share"].iloc[0] >= rules.significant_failure_share:
        return None
    return at if step_failure_kind(at.iloc[0]) is not None else None


def _failing_flat(usable: pd.DataFrame, column: str, rules: Rules) -> pd.DataFrame:
    """The first usable step where failures are significant (``failed_time_share`` >=
    ``rules.significant_failure_share``, of one kind) and throughput stopped rising: its gain per
    doubling over the usable step before it, ``(tps / tps_prev) ** (1 / log2(load / load_prev))``,
    is below ``rules.min_gain_per_doubling``. A one-row frame; empty when there is none.

    nginx ``limit_conn 4`` scraped through the gateway, ladder 2, 4, 8: flat from 4 to 8 users
    (gain 1.01) with 35 % of the 8-user requests refused, no server counters and a flat TTFT
    (the refusals come at once): the knee cannot see it, the refusals are the limit.
    """
    if "failed_time_share" not in usable.columns or len(usable) < 2:
        return usable.head(0)
    steps = usable.sort_values(column, kind="stable")
    load, tps = steps[column].astype(float).to_numpy(), steps["output_tps"].astype(float).to_numpy()
    for i in range(1, len(steps)):
        row = steps.iloc[i]
        if not row["failed_time_share"] >= rules.significant_failure_share or step_failure_kind(row) is None:
            continue
        if not (load[i] > load[i - 1] > 0 and tps[i - 1] > 0 and np.isfinite(tps[i])):
            continue
        gain = (tps[i] / tps[i - 1]) ** (1.0 / np.log2(load[i] / load[i - 1]))
        if gain < rules.min_gain_per_doubling:
            return steps.iloc[[i]]
    return usable.head(0)


def _queue_onset(critical: CriticalConcurrency, usable: pd.DataFrame, column: str, rules: Rules):
    """With batching off, the critical load is the last usable step before requests queue.

    One sequence at a time: past it every added request only waits, whatever the throughput
    figures say (on a busy machine a 1-user step can read slower than a 2-user one, because the
    server idles between one user's requests, and the knee's gain condition then misses it).
    Returns ``critical`` moved down to that step when the queue starts earlier than it says;
    unchanged without server data or when the first usable step already queues.
    """
    steps = usable[np.isfinite(usable["server_waiting"].astype(float))]
    queued = steps[steps["server_waiting"].astype(float) > rules.waiting_threshold]
    if queued.empty:
        return critical
    first = queued.iloc[0]
    before = steps[steps[column] < first[column]]
    if before.empty or (critical.users is not None and float(before[column].max()) >= critical.users):
        return critical
    users = float(before[column].max())
    return replace(
        critical,
        users=users,
        saturated_step=int(first["step"]),
        saturated_users=float(first[column]),
        stop_reason="requests queue behind one sequence at a time",
        evidence=critical.evidence
        + (
            f"batching off: past one sequence every added request only waits; requests first queue at "
            f"{float(first[column]):g} (waiting {float(first['server_waiting']):.2f} > {rules.waiting_threshold:g}), "
            f"so the critical load is {users:g}",
        ),
    )


def judged_throughput(usable: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The throughput the rules judge: ``output_tps_prorated`` where a step has it, else
    ``output_tps``.

    The headline ``output_tps`` counts the tokens of requests *completed* in the step's window,
    so it moves by a whole wave when long requests finish together: with a few completions per
    window (a short dwell, long answers) one step can read flat and the next x1.8 (seen on a
    real CPU vLLM and on the embedded server, where a 4-user step read 84.8 tokens/s while the
    server generated 165). The prorated figure counts the tokens that arrived during the window
    (each request's spread over its streaming time where its token times were not recorded),
    however requests are cut.

    Returns
    -------
    (pandas.DataFrame, str)
        A copy of ``usable`` whose ``output_tps`` is the judged throughput, and the evidence line
        saying so ("" when no step had a prorated value).
    """
    if "output_tps_prorated" not in usable.columns:
        return usable, ""
    prorated = usable["output_tps_prorated"]
    if not np.isfinite(prorated).any():
        return usable, ""
    judged = usable.copy()
    judged["output_tps"] = prorated.where(np.isfinite(prorated), usable["output_tps"])
    return judged, (
        "throughput judged on output_tps_prorated (the tokens that arrived in the window, "
        "each request's spread over its streaming time where its token times were not "
        "recorded; the headline output_tps counts requests completed in the window and "
        "moves by whole waves)"
    )


TOO_SHORT_KINDS = frozenset({K.NONE, K.SCHEDULER_CEILING, K.KV_CACHE, K.COMPUTE, K.UNDETERMINED})
"""Kinds decided on the steps' throughput, so never on steps too short to tell (the client,
failures and batching off rest on counts and shares that a short step still measures)."""


def with_hidden_waiting(usable: pd.DataFrame) -> pd.DataFrame:
    """``usable`` with the requests the server's counters missed (``hidden_inflight``,
    :func:`llm_locust.analysis.verdict.hiddenqueue.hidden_inflight`) added to ``server_waiting``: they wait,
    only where the counters do not see; the original count stays in ``server_waiting_counted``."""
    if "hidden_inflight" not in usable.columns or not (usable["hidden_inflight"].astype(float) > 0).any():
        return usable
    out = usable.copy()
    out["server_waiting_counted"] = out["server_waiting"]
    out["server_waiting"] = out["server_waiting"].astype(float) + out["hidden_inflight"].astype(float).fillna(0.0)
    return out


def _ceiling_queue(
    knee: CriticalConcurrency, usable: pd.DataFrame, config: ServerConfig, column: str, rules: Rules
) -> CriticalConcurrency:
    """Running at the configured batch ceiling with a queue at that step and every later one is a
    saturation, whatever the throughput figures of a noisy step say (a 4-slot llama.cpp read
    ``none`` beside running 4.00 of 4 with 3.86 waiting). A step whose client holds no more in
    flight than the ceiling (+ ``waiting_threshold``) has no such queue: its waiting requests wait
    for the next scheduler step, not for a slot (the demo's 8 users on 8 slots: running 7.48,
    0.52 waiting, read as saturated at 8). Returns ``knee`` saturated at the
    first such step when it found none (or a later one); unchanged without a configured ceiling."""
    ceiling = float(config.batch_ceiling or 0)
    if ceiling <= 0 or usable.empty:
        return knee
    rows = usable.sort_values(column, kind="stable").reset_index(drop=True)
    running, waiting = rows["server_running"].astype(float), rows["server_waiting"].astype(float)
    queued = (waiting > rules.waiting_threshold).to_numpy().copy()
    if "client_inflight" in rows.columns:  # no more in flight than slots: waiting is admission, not a queue
        inflight = rows["client_inflight"].astype(float)
        queued &= ~(inflight <= ceiling + rules.waiting_threshold).to_numpy()
    full = (running >= rules.running_ceiling * ceiling).to_numpy()
    i = _first_full_with_queue(full, queued)
    if i is None:
        return knee
    return _saturated_at(
        knee,
        rows,
        i,
        column,
        "requests queue at the configured batch ceiling",
        f"at {float(rows.at[i, column]):g} running {running[i]:.2f} sits at the configured ceiling {ceiling:g} and "
        f"{waiting[i]:.2f} wait, at this step and every later one: saturated there",
    )


def _first_full_with_queue(full: np.ndarray, queued: np.ndarray) -> int | None:
    """The first row after the first one that is ``full`` with a queue there and at every
    later row (``queued``), None when there is none."""
    return next((i for i in range(1, len(full)) if full[i] and queued[i:].all()), None)


def _saturated_at(
    knee: CriticalConcurrency, rows: pd.DataFrame, i: int, column: str, stop_reason: str, line: str
) -> CriticalConcurrency:
    """``knee`` saturated at row ``i`` of ``rows`` (the load-sorted usable steps), critical at
    the row before, with ``line`` added to its evidence - unchanged when ``knee`` already
    saturates there or earlier."""
    users = float(rows.at[i, column])
    if knee.saturated_users is not None and knee.saturated_users <= users:
        return knee
    return replace(
        knee,
        users=float(rows.at[i - 1, column]),
        saturated_step=int(rows.at[i, "step"]),
        saturated_users=users,
        stop_reason=stop_reason,
        evidence=knee.evidence + (line,),
    )


def _replica_ceiling_queue(
    knee: CriticalConcurrency,
    usable: pd.DataFrame,
    ceilings: Mapping[str, int | None],
    column: str,
    rules: Rules,
) -> CriticalConcurrency:
    """:func:`_ceiling_queue` per replica: one scraped replica running at its own configured
    ceiling (within :func:`~llm_locust.analysis.verdict.replicaimbalance.slack`) with its own
    queue at a step and every later one saturates the whole - a gateway that gives each replica
    the same share (nginx's round robin) sends it as many new requests as the others, so what it
    can finish caps the total, however many slots the others have free (1 + 3 llama.cpp slots
    behind round robin: at 8 users the 1-slot replica ran 1 with 5 waiting while the aggregate
    ran 3 of 4, and its throughput rose by noise alone: read ``none``). Returns ``knee``
    saturated at the first such step when it found none (or a later one); unchanged with fewer
    than two replicas or none with a configured ceiling."""
    names = [n for n in replica_names(usable) if ceilings.get(n)]
    if len(replica_names(usable)) < 2 or not names or usable.empty:
        return knee
    rows = usable.sort_values(column, kind="stable").reset_index(drop=True)
    first: tuple[int, str] | None = None
    for name in names:
        ceiling = float(ceilings[name] or 0)
        running = rows[replica_column("server_running", name)].astype(float).to_numpy()
        waiting = rows[replica_column("server_waiting", name)].astype(float).to_numpy()
        at = _first_full_with_queue(running >= ceiling - slack(ceiling, rules), waiting > rules.waiting_threshold)
        if at is not None and (first is None or at < first[0]):
            first = (at, name)
    if first is None:
        return knee
    i, name = first
    running = float(rows.at[i, replica_column("server_running", name)])
    waiting = float(rows.at[i, replica_column("server_waiting", name)])
    return _saturated_at(
        knee,
        rows,
        i,
        column,
        f"requests queue at replica {name}'s configured batch ceiling",
        f"at {float(rows.at[i, column]):g} replica {name} runs {running:.2f} of its configured ceiling "
        f"{ceilings[name]} and {waiting:.2f} wait there, at this step and every later one: saturated there",
    )


def _deciding_steps(usable: pd.DataFrame, critical: CriticalConcurrency, column: str) -> list[int]:
    """The ``step`` indices a decision compares: the first saturated step and the usable one
    before it; with no saturation the two highest usable steps."""
    rows = usable.sort_values(column, kind="stable")
    if critical.saturated_step is not None:
        at = rows.index[rows["step"] == critical.saturated_step]
        if len(at):
            i = rows.index.get_loc(at[0])
            return [int(s) for s in rows["step"].iloc[max(0, i - 1) : i + 1]]
    return [int(s) for s in rows["step"].iloc[-2:]]


def _short_candidates(
    tentative: BottleneckKind,
    unexplained_candidates: tuple[BottleneckKind, ...],
    usable: pd.DataFrame,
    rules: Rules,
) -> tuple[BottleneckKind, ...]:
    """What a run whose steps were too short is compatible with: what the rules read on them,
    and the kind its other reading points to (saturated: none; not saturated: the kind the top
    step's counters suggest)."""
    if tentative is K.UNDETERMINED:  # the unexplained saturation's candidates, or no saturation at all
        return (*unexplained_candidates, K.NONE)[:3]
    if tentative is not K.NONE:
        return (tentative, K.NONE)
    top = usable.sort_values(load_axis(usable).column, kind="stable").iloc[-1] if len(usable) else None
    if top is not None and float(top.get("kv_usage_ratio", np.nan)) >= rules.kv_full_ratio:
        other = K.KV_CACHE
    elif top is not None and float(top["server_waiting"]) > rules.waiting_threshold:
        other = K.SCHEDULER_CEILING
    else:
        other = K.COMPUTE
    return (K.NONE, other)


def _undetermined_rule(
    undecided: Undecided | None, ev: dict[str, Evidence], critical: CriticalConcurrency, *, axis_fmt
) -> Evidence:
    """Rule ``undetermined``: holds when the verdict could not name one kind; its text names the
    candidates and what tells them apart (the steps-too-short or the unexplained saturation)."""
    if undecided is None:
        return Evidence(rule="undetermined", kind=K.UNDETERMINED, holds=False, text="one kind's rule holds")
    names = " or ".join(k.value for k in undecided.candidates)
    if ev["steps_too_short"].holds:
        text = f"{ev['steps_too_short'].text}; the run is compatible with {names}"
    else:
        where = f"at {axis_fmt(critical.saturated_users)} " if critical.saturated_users is not None else ""
        text = (
            f"throughput stops rising {where}while requests queue or the batch is full, but no kind's rule "
            f"explains it: compatible with {names}; to tell them apart: {undecided.tells_apart}"
        )
    return Evidence(
        rule="undetermined",
        kind=K.UNDETERMINED,
        holds=True,
        values={"candidates": float(len(undecided.candidates))},
        units={"candidates": "kinds"},
        text=text,
    )


def _none_rule(
    usable: pd.DataFrame,
    config: ServerConfig,
    primary: bool,
    *,
    table: pd.DataFrame | None = None,
    planned: Sequence[float] = (),
) -> Evidence:
    """Rule ``none``: no saturation within the ladder; the next steps to add are the next two
    doublings of the highest usable step, or up to twice the configured batch ceiling when that
    is further.

    When the run's stop cut the ladder short - a level of ``planned`` has no step in ``table``,
    or the last step is incomplete (stopped during it) - the steps to add are the planned ones it
    never measured: the evidence says where it was cut (``cut_short`` 1, ``cut_at_step``, the
    last step started) and the recommendation is to rerun the planned ladder to completion.
    """
    if usable.empty:
        return Evidence(rule="none", kind=K.NONE, holds=False, text="no usable step")
    axis = load_axis(usable)
    top = float(usable[axis.column].max())
    cut = _cut_short(table, planned, axis.column)
    if cut is not None:
        last_step, last_level, missing = cut
        key = axis.value_key
        values = {
            f"highest_{key}": top,
            "cut_short": 1.0,
            "cut_at_step": float(last_step),
            "planned_steps": float(len(planned)),
            "unmeasured_steps": float(len(missing)),
        }
        units = {f"highest_{key}": axis.value_unit, "cut_short": "flag", "cut_at_step": "step",
                 "planned_steps": "steps", "unmeasured_steps": "steps"}  # fmt: skip
        text = (
            f"no saturation up to {axis.fmt(top)}, but the ladder was cut short at step {last_step} "
            f"({axis.fmt(last_level)}) of the planned {', '.join(fmt_users(u) for u in planned)}: "
            f"{', '.join(fmt_users(u) for u in missing)} not measured - rerun the ladder to completion"
        )
        return Evidence(rule="none", kind=K.NONE, holds=primary, values=values, units=units, text=text)
    target = max(2 * top, 2 * float(config.batch_ceiling or 0)) if axis is USERS else 2 * top
    nxt: list[float] = []
    users = top
    while len(nxt) < 2 or users < target:
        users *= 2
        nxt.append(users)
    key = axis.value_key
    values = {f"highest_{key}": top, f"next_{key}_1": nxt[0], f"next_{key}_2": nxt[-1]}
    units = {k: axis.value_unit for k in values}
    ceiling = (
        f" (the configured {config.batch_ceiling_name or 'batch ceiling'} is {config.batch_ceiling})"
        if config.batch_ceiling and axis is USERS
        else ""
    )
    text = f"no saturation up to {axis.fmt(top)}: add steps {', '.join(fmt_users(u) for u in nxt)}{ceiling}"
    return Evidence(rule="none", kind=K.NONE, holds=primary, values=values, units=units, text=text)


def _cut_short(
    table: pd.DataFrame | None, planned: Sequence[float], column: str
) -> tuple[int, float, list[float]] | None:
    """``(last step started, its level, planned levels not measured)`` when the ladder was cut
    short, else None: a planned level without a step in ``table``, or the last step incomplete
    (``incomplete`` column, :func:`llm_locust.analysis.verdict.client.client_validity`)."""
    if table is None or table.empty or not len(planned):
        return None
    ordered = table.sort_values("step", kind="stable")
    last = ordered.iloc[-1]
    measured = {
        float(r[column])
        for _, r in ordered.iterrows()
        if not bool(r.get("incomplete", False)) and np.isfinite(r[column])
    }
    missing = [float(u) for u in planned if float(u) not in measured]
    if not missing:
        return None
    return int(last["step"]), float(last[column]), missing
