"""Recommendations: one change each, tied to the evidence that calls for it, with how to verify it.

Every ``verify`` follows the playbooks' method: the same script and inputs, this one change,
rerun the same ladder, and compare the named figure.
"""

from __future__ import annotations

import math

from llm_locust.analysis.loadaxis import RATE, USERS, LoadAxis
from llm_locust.analysis.verdict.flags import flags_for
from llm_locust.analysis.verdict.knee import fmt_users
from llm_locust.analysis.verdict.types import BottleneckKind, Evidence, Recommendation

K = BottleneckKind
SAME = "rerun the same ladder with the same script and inputs, only this change, and check "


def _users(value) -> str:
    return fmt_users(float(value)) if value is not None and math.isfinite(float(value)) else "?"


def recommend(
    primary: BottleneckKind,
    secondary: tuple[BottleneckKind, ...],
    evidence: dict[str, Evidence],
    *,
    family: str | None,
    critical_users: float | None,
    client_flags: dict,
    chunked_prefill: bool | None = None,
    axis: LoadAxis = USERS,
    planned: tuple[float, ...] = (),
    tells_apart: str = "",
    error_settings: dict | None = None,
    timeout_page: str = "",
) -> tuple[Recommendation, ...]:
    """The recommendations for the primary kind, then each secondary kind.

    Parameters
    ----------
    primary, secondary : BottleneckKind
    evidence : dict
        ``{rule: Evidence}`` of every rule evaluated.
    family : str or None
        Server family, for its own flag names (:mod:`llm_locust.analysis.verdict.flags`).
    critical_users : float or None
        The critical load: concurrency (users), or offered req/s when ``axis`` is
        :data:`~llm_locust.analysis.loadaxis.RATE`.
    client_flags : dict
        ``connections`` (int or None) and ``keep_alive`` (bool or None) of the run.
    planned : tuple of float, default ()
        The planned ladder (users, or req/s on :data:`~llm_locust.analysis.loadaxis.RATE`): a ``none``
        evidence that says the ladder was cut short (``cut_short``) asks to rerun it.
    chunked_prefill : bool or None
        Whether the server already prefills in chunks (then it is not recommended).
    tells_apart : str, default ""
        With an ``undetermined`` primary: the measurement or rerun that separates its candidates.
    axis : LoadAxis, default USERS
        What the ladder's steps are (a rate ladder caps the offered rate, not the concurrency).
    error_settings : dict, optional
        ``{error kind: setting}`` the server log's format file names (``[[log.errors]] setting``,
        :attr:`~llm_locust.analysis.verdict.ServerSide.error_settings`): timeouts the log's
        ``timeout`` lines account for are first recommended against that setting (a gateway's
        ``proxy_read_timeout``), not only against the server's queue.
    timeout_page : str, default ""
        The gateway whose 504 error page the timed-out answers carry (``nginx``,
        :attr:`~llm_locust.analysis.verdict.ServerSide.timeout_page`): without the log's lines,
        those answers are recommended against its setting in ``error_settings``.
    """
    flags = flags_for(family)
    crit = _users(critical_users) if critical_users is not None else None
    cap = "cap the offered request rate" if axis is RATE else "cap the client concurrency"
    out: list[Recommendation] = []
    for kind in (primary, *secondary):
        if kind is K.CLIENT:
            ev = evidence["client"]
            if client_flags.get("keep_alive") is False:
                out.append(
                    Recommendation(
                        change="keep connections alive between requests",
                        flag="--keep-alive true",
                        because=ev.rule,
                        verify=SAME + "that every step is valid (client in-flight = target)",
                    )
                )
            if client_flags.get("connections"):
                out.append(
                    Recommendation(
                        change="give every user its own connection",
                        flag="--connections (leave unset: one per user)",
                        because=ev.rule,
                        verify=SAME + "that conn_wait_ms stays near 0 and the step is valid",
                    )
                )
            if axis is RATE:
                out.append(
                    Recommendation(
                        change="give the schedule more users: each sends one request at a time, so the pool "
                        "must cover the offered rate x the latency",
                        flag="--max-users N",
                        because=ev.rule,
                        verify=SAME + "that the send lag stays in milliseconds and every scheduled send is sent",
                    )
                )
            if ev.values.get("worker_lost") == 1.0:  # the client was short because a worker died, not slow
                out.append(
                    Recommendation(
                        change="find why the load worker was lost (killed, out of memory, its machine or "
                        "network gone) and rerun; more workers would not have kept its users",
                        flag="its locust_worker_<i>.log, the kernel log (dmesg: the OOM killer), run.json workers_lost",
                        because=ev.rule,
                        verify=SAME + "that run.json lists no workers_lost and every step is valid",
                    )
                )
            else:
                out.append(
                    Recommendation(
                        change="add load: more worker processes or load machines",
                        flag="--workers N (or more `locust --worker` machines)",
                        because=ev.rule,
                        verify=SAME + "that every step is valid (client CPU below one core per worker, "
                        "in-flight = target users)",
                    )
                )
        elif kind is K.BATCHING_OFF:
            ev = evidence["batching_off"]
            out.append(
                Recommendation(
                    change="turn batching on: raise the batch ceiling above 1 and confirm in the startup "
                    "log that it took effect",
                    flag=flags.batch_ceiling,
                    because=ev.rule,
                    verify=SAME + "that server running rises above 1 at 2+ users and waiting falls",
                )
            )
        elif kind is K.SCHEDULER_CEILING:
            ev = evidence["scheduler_ceiling"]
            if crit is not None:
                out.append(
                    Recommendation(
                        change=f"{cap} at the critical value, {crit} "
                        + ("req/s" if axis is RATE else "requests in flight"),
                        flag=f"the gateway's or client's rate limit (--rates up to {crit})"
                        if axis is RATE
                        else f"the gateway's or client's concurrency limit (--ladder up to {crit})",
                        because=ev.rule,
                        verify=SAME + "that TTFT stays at the critical step's and waiting near 0",
                    )
                )
            out.append(
                Recommendation(
                    change="raise the batch ceiling (and the tokens per batch) while the memory allows",
                    flag=" and ".join(f for f in (flags.batch_ceiling, flags.token_budget) if f),
                    because=ev.rule,
                    verify=SAME + "that the critical concurrency moves up with it and KV cache usage stays below 90 %",
                )
            )
            out.append(_router(ev.rule))
        elif kind is K.KV_CACHE:
            ev = _holding(evidence, "kv_cache", "kv_tokens")
            out.append(
                Recommendation(
                    change="give the KV cache more memory",
                    flag=flags.memory,
                    because=ev.rule,
                    verify=SAME + "that running reaches the configured ceiling and preemptions stop",
                )
            )
            if flags.chunked_prefill and chunked_prefill is not True:
                out.append(
                    Recommendation(
                        change="enable chunked prefill",
                        flag=flags.chunked_prefill,
                        because=ev.rule,
                        verify=SAME + "that KV usage peaks lower and throughput at the critical step rises",
                    )
                )
            out.append(_router(ev.rule))
        elif kind is K.COMPUTE:
            ev = _holding(evidence, "compute", "compute_beside_ceiling")
            if crit is not None:
                out.append(
                    Recommendation(
                        change=f"{cap} at the critical value, {axis.fmt(critical_users)}",
                        flag=f"the gateway's or client's {'rate' if axis is RATE else 'concurrency'} limit",
                        because=ev.rule,
                        verify=SAME + "that TPOT stays at the critical step's",
                    )
                )
            out.append(_router(ev.rule))
        elif kind is K.TIMEOUTS:
            ev, cause = evidence["timeouts"], evidence.get("timeout_cause")
            queued = cause is not None and cause.holds and cause.values.get("server_queue") == 1.0
            setting = (error_settings or {}).get("timeout")
            logged = int(ev.values.get("server_timeout", 0) or 0) if ev.holds else 0
            answers = int(ev.values.get("client_http_5xx_timed_out", 0) or 0) if ev.holds else 0
            if setting and (logged > 0 or (timeout_page and answers > 0)):
                source = (
                    f"the server log's {logged} timeout lines there come from it"
                    if logged > 0
                    else f"the {answers} 504 answers there are {timeout_page}'s own error page"
                )
                out.append(
                    Recommendation(
                        change=f"raise {setting} above the requests' E2E at {_at(ev, axis)}: {source}",
                        flag=setting,
                        because=ev.rule,
                        verify=SAME + f"that the step's timeouts and {'the log' if logged > 0 else 'its 504'}"
                        f"{'s timeout lines' if logged > 0 else 's'} fall to 0 with {setting} raised, and E2E "
                        "stays where it was",
                    )
                )
            if cause is not None and cause.holds and not queued:
                out.append(
                    Recommendation(
                        change="lengthen the client timeout: it is shorter than the server's latency without a queue",
                        flag=_timeout_flag(cause),
                        because=cause.rule,
                        verify=SAME + "that the step's timeouts fall to 0",
                    )
                )
            elif crit is None:
                out.append(
                    Recommendation(
                        change="requests time out already at the first step: measure one request's "
                        "latency with the single-request baseline and set the client timeout "
                        "above it",
                        flag="--shape baseline, then " + _timeout_flag(cause or ev),
                        because=(cause or ev).rule,
                        verify=SAME + "that the first step has no timeouts",
                    )
                )
            else:
                out.append(
                    Recommendation(
                        change=f"shorten the server's batch wait / queue, or {cap} below {_at(ev, axis)}",
                        flag=flags.batch_wait or flags.queue_limit or flags.batch_ceiling,
                        because=(cause or ev).rule,
                        verify=SAME + "that TTFT p95 stays below the timeout and the timeouts fall to 0",
                    )
                )
        elif kind is K.REJECTIONS and crit is None and kind is primary:
            ev = evidence["rejections"]
            out.append(
                Recommendation(
                    change="requests fail already at the first step, so the load is not the cause: read "
                    "the error messages (client_report.json, the server log) and fix the request "
                    "or the server before the ladder",
                    flag="",
                    because=ev.rule,
                    verify=SAME + "that the first step has no failures",
                )
            )
        elif kind is K.REJECTIONS:
            ev = evidence["rejections"]
            out.append(
                Recommendation(
                    change=f"{cap} below {_at(ev, axis)}, or raise the server's queue limit",
                    flag=flags.queue_limit or "the server's or gateway's queue / rate limit",
                    because=ev.rule,
                    verify=SAME + "that the step's 429/5xx fall to 0",
                )
            )
            out.append(_router(ev.rule))
        elif kind is K.NONE and evidence["none"].values.get("cut_short") == 1.0:
            ev = evidence["none"]
            flag = "--rates" if axis is RATE else "--ladder"
            out.append(
                Recommendation(
                    change=f"the ladder was cut short at step {int(ev.values['cut_at_step'])}: rerun it to "
                    "completion (let every planned step finish; do not stop it early)",
                    flag=f"{flag} {','.join(_users(u) for u in planned)}" if planned else flag,
                    because=ev.rule,
                    verify="rerun the same ladder with the same script and inputs and look for the step "
                    "where throughput stops rising",
                )
            )
        elif kind is K.NONE:
            ev = evidence["none"]
            steps = ", ".join(_users(u) for u in _doublings(ev, axis))
            out.append(
                Recommendation(
                    change=f"add ladder steps {steps}".strip(),
                    flag="--rates" if axis is RATE else "--ladder",
                    because=ev.rule,
                    verify="rerun with the longer ladder and look for the step where throughput stops rising",
                )
            )
    if primary is K.UNDETERMINED:
        short = evidence.get("steps_too_short")
        if short is not None and short.holds:
            dwell = short.values.get("dwell_s_needed")
            out.append(
                Recommendation(
                    change=f"lengthen every step so that it holds enough requests to decide ({tells_apart})",
                    flag=f"--dwell-s {_users(dwell)}" if dwell is not None else "--dwell-s",
                    because=short.rule,
                    verify="rerun the same ladder with the same script and inputs and the longer dwell; the "
                    "verdict then decides on steps whose throughput interval is narrow",
                )
            )
        else:
            out.append(
                Recommendation(
                    change=f"measure what tells the candidates apart: {tells_apart}",
                    flag="",
                    because="undetermined",
                    verify="rerun the same ladder with the same script and inputs and that measurement added",
                )
            )
    hidden = evidence.get("hidden_queue")
    if hidden is not None and hidden.holds and primary is not K.CLIENT:
        out.append(
            Recommendation(
                change="find where the requests the server's counters miss wait (the accept backlog, a gateway, "
                "a static batcher's next batch, an unscraped replica) and scrape or log it",
                flag="--server-metrics-url for each replica, or --server-log with the gateway's or batcher's log",
                because=hidden.rule,
                verify="rerun the same ladder with the same script and inputs and check that the server's running "
                "+ waiting equals the client's in-flight",
            )
        )
    waits = evidence.get("batch_wait")
    if waits is not None and waits.holds and primary is not K.CLIENT:
        out.append(
            Recommendation(
                change="shorten the batch wait: batches start when the timer fires, not when they fill",
                flag=flags.batch_wait or "the server's batch wait (batch timeout / max wait) setting",
                because=waits.rule,
                verify=SAME + "that TTFT p50 falls at the low steps and batches still fill at the high ones",
            )
        )
    static = evidence.get("static_batch")
    if static is not None and static.holds and primary is not K.CLIENT:
        out.append(
            Recommendation(
                change="switch to continuous batching: admit waiting requests into the running batch "
                "every step instead of holding them for the whole batch",
                flag="llama.cpp: drop --no-cont-batching (--cont-batching); an in-house batcher: "
                "iteration-level scheduling (vLLM, SGLang, TGI do it)",
                because=static.rule,
                verify=SAME + "that TTFT at the full-batch steps falls and the queue drains between batches",
            )
        )
        out.append(
            Recommendation(
                change="raise the max batch size while the memory allows: every batch is full and the queue persists",
                flag=flags.batch_ceiling,
                because=static.rule,
                verify=SAME + "that the critical concurrency moves up with it",
            )
        )
    unique, seen = [], set()
    for rec in out:
        if (rec.change, rec.flag) not in seen:
            seen.add((rec.change, rec.flag))
            unique.append(rec)
    return tuple(unique)


def _doublings(ev: Evidence, axis: LoadAxis) -> list[float]:
    """The steps a ``none`` evidence asks for: ``next_*_1`` doubled up to ``next_*_2``, the
    steps its sentence names (its values keep only the first and the last)."""
    first = ev.values.get(f"next_{axis.value_key}_1")
    last = ev.values.get(f"next_{axis.value_key}_2")
    if first is None or last is None or not (math.isfinite(first) and math.isfinite(last) and first > 0):
        return [v for v in (first, last) if v is not None]
    steps = [float(first)]
    while steps[-1] * 2 <= float(last) * (1 + 1e-9):
        steps.append(steps[-1] * 2)
    return steps


def _at(ev: Evidence, axis: LoadAxis) -> str:
    """The load level an evidence names, with its unit (``"16 users"``, ``"4 req/s"``; ``"?"``)."""
    value = ev.values.get(axis.value_key)
    return axis.fmt(float(value)) if value is not None and math.isfinite(float(value)) else "?"


def _router(rule: str) -> Recommendation:
    return Recommendation(
        change="add instances behind a router when one instance is at its limit",
        flag="a load balancer / router in front of N server instances",
        because=rule,
        verify=SAME + "that the critical concurrency scales with the number of instances",
    )


def _timeout_flag(cause: Evidence) -> str:
    """The llm-locust flag of the timeout ``cause`` names (``--ttft-timeout-s`` by default)."""
    for key, flag in (
        ("ttft", "--ttft-timeout-s"),
        ("total", "--total-timeout-s"),
        ("stall", "--stall-timeout-s"),
        ("connect", "--connect-timeout-s"),
    ):
        if f"{key}_timeout_s" in cause.values:
            return flag
    return "--ttft-timeout-s"


def _holding(evidence: dict[str, Evidence], rule: str, inferred: str) -> Evidence:
    """The kind's own evidence, or the inferred one (:mod:`~llm_locust.analysis.verdict.inferred`) that made
    it a secondary when its own does not hold: the recommendation says which it follows."""
    own = evidence[rule]
    other = evidence.get(inferred)
    return other if not own.holds and other is not None and other.holds else own
