"""Client validity per step: did the load client deliver the concurrency the step asked for?

A step is **invalid** (its figures describe the load client, not the server) when any of:

1. ``short``: (achieved client in-flight + users pausing after a refusal) / target users <
   ``rules.min_inflight_ratio``; in a
   request-rate ladder (:mod:`llm_locust.analysis.loadaxis`) the client could not keep the schedule (the
   pool of users, ``--max-users``, had no user free): median send lag >=
   ``rules.max_send_lag_ms``, or unsent sends >= ``rules.max_unsent_share`` of the step's
   planned ones (never the achieved rate in the window alone: Poisson sends in a window of a
   step vary by chance), while the server was not queueing (waiting <=
   ``rules.waiting_threshold``): past the server's saturation an open loop's backlog grows
   without bound and fills any pool, so there the late and unsent sends are the server's
   queue reaching the client, and the step's figures still show the saturation;
2. (no longer a client condition) the server's running + waiting short of the client's
   in-flight is a server-side queue the counters do not show (column ``hidden_inflight``,
   rule :mod:`llm_locust.analysis.verdict.hiddenqueue`): the client sent those requests, so it is never
   blamed for them;
3. ``conn_wait``: mean connection wait / (mean connection wait + E2E p50) >=
   ``rules.max_conn_wait_share`` (users wait for a free connection: ``--connections``);
4. ``cpu``: a worker's mean CPU over the window >= ``rules.max_worker_cpu_cores`` (from
   ``client_load.csv``);
5. ``loop_lag``: a worker's mean event-loop lag over the window >= ``rules.max_loop_lag_ms``;
6. ``worker_lost``: a worker was lost (run.json ``workers_lost``) during the window, or so
   shortly before it that its users were still moving to the workers left
   (``rules.worker_loss_margin_s``); later steps are judged by conditions 1-5 again. A worker
   that was missing and came back (run.json ``workers_missing`` with a ``to_s``) likewise
   invalidates the steps its spell ``[from_s, to_s + margin)`` overlaps. Either way the step's
   achieved concurrency fell short while the worker's users were gone: the reason gives its
   in-flight against the target.

Conditions 1 and 2 are not applied to a step dominated by failures: a request refused at once
leaves its user between requests most of the time, so a low in-flight there is the server's
answer, not the client's limit. Users pausing after a refusal (``backoff_users``, the
time-average number of users in a pause, :func:`llm_locust.analysis.perrequest.faults.step_faults`) are counted with
the in-flight in condition 1: the server sent them away, the client did not hold them back.

A step whose window overlaps an **outage** (the server unreachable, :mod:`llm_locust.analysis.verdict.outage`)
is invalid too (reason ``outage: ...``, column ``outage``), and like an incomplete step it is
never evidence for ``client``.

A step can also be **incomplete**: not fully measured, so neither the client nor the server is
judged on it (invalid, left out of the knee, and never evidence for ``client``):

- the run's stop cut it: it holds requests of kind ``interrupted`` (in flight when the test
  stopped: Ctrl-C, SIGTERM, a timeout) and its window reaches the moment the users stopped, or
  reaches past it (``ClientSide.stopped_at_s``: the first end of an interrupted request after which
  no request started, :data:`STOP_BURST_S`). A user Locust stops mid-run to dispatch its users
  again - a worker joining, one started again after a loss, one healing - leaves an
  ``interrupted`` request too, and the run goes on: that is not the stop, and the steps after it
  are judged (a worker restarted after a network cut: step 1 read 'the run was stopped during
  this step', tests/e2e/test_worker_partitioned.py);
- records are missing: ``requests.csv`` has fewer rows than the master counted
  (``client_report.json`` ``requests``: a file cut or lost), and the window ends after the last
  record (``ClientSide.records_end_s``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from llm_locust.analysis.loadaxis import RATE, load_axis
from llm_locust.analysis.perrequest.faults import outage_spells
from llm_locust.analysis.verdict.hiddenqueue import hidden_inflight
from llm_locust.analysis.verdict.outage import outage_reason
from llm_locust.analysis.verdict.types import BottleneckKind, Evidence, Rules

STOP_BURST_S = 1.0
"""The run's stop cuts every request in flight at once and no request starts after it: an
``interrupted`` request counts as the stop's only when it ended at most this long before the
last request's start (s; the workers hear the stop a few ms apart)."""


@dataclass(frozen=True, kw_only=True)
class ClientSide:
    """What the run directory says about the load client.

    Attributes
    ----------
    load : pandas.DataFrame or None
        ``client_load.csv`` (:data:`CLIENT_LOAD_COLUMNS`); None or empty when not written.
    workers_lost : tuple of dict
        run.json ``workers_lost``: ``{"worker", "lost_at_s", "last_record_s"}`` (Unix s).
    workers_missing : tuple of dict
        run.json ``workers_missing``: ``{"worker", "from_s", "noticed_s", "to_s"}`` (Unix s;
        ``to_s`` null while never back: those are ``workers_lost`` as well).
    timeouts_s : dict
        run.json ``workload.timeouts_s`` (``connect``, ``ttft``, ``stall``, ``total``; s).
    connections : int or None
        ``--connections`` per worker (None: one per user).
    keep_alive : bool or None
    workers : int or None
        Worker processes (run.json ``workers``), when known.
    stopped_at_s : float or None
        When the run's stop cut the requests in flight (Unix s; the earliest end of an
        ``interrupted`` request at most :data:`STOP_BURST_S` before the last request's start),
        if it did.
    stop_read : bool
        True when ``stopped_at_s`` was read from the requests (:meth:`from_meta` with
        ``requests``): then an ``interrupted`` request before it is a user Locust stopped mid-run,
        not the stop. False (a client side built without requests): every step holding an
        ``interrupted`` request is taken as cut by the stop.
    records_end_s : float or None
        When records are missing (fewer rows than the master counted): the end of the last
        record (Unix s); None when every request is there.
    missing_records : int
        Requests the master counted that ``requests.csv`` lacks.
    outages : tuple of dict
        The server's outages (:func:`llm_locust.analysis.perrequest.faults.outage_spells` records, Unix s).
    started_at_s : float
        Start of the run (run.json ``started_at_s``, Unix s; NaN when unknown).
    unsampled_workers : tuple of str
        Workers that sent requests (``requests.csv`` ``worker_id``) with no row in a non-empty
        ``client_load.csv``: their load was not checked.
    """

    load: pd.DataFrame | None = None
    workers_lost: tuple[dict, ...] = ()
    workers_missing: tuple[dict, ...] = ()
    timeouts_s: dict = field(default_factory=dict)
    connections: int | None = None
    keep_alive: bool | None = None
    workers: int | None = None
    stopped_at_s: float | None = None
    stop_read: bool = False
    records_end_s: float | None = None
    missing_records: int = 0
    outages: tuple[dict, ...] = ()
    started_at_s: float = float("nan")
    unsampled_workers: tuple[str, ...] = ()

    @classmethod
    def from_meta(
        cls,
        meta: dict,
        load: pd.DataFrame | None = None,
        requests: pd.DataFrame | None = None,
        reported_requests: int | None = None,
    ) -> ClientSide:
        """Build from ``run.json`` (as loaded), the ``client_load.csv`` frame, and - to tell
        incomplete steps - ``requests.csv`` (``t_start_s``, ``e2e_ms``, ``error_kind``) with the
        master's count of requests (``client_report.json``)."""
        workload = meta.get("workload") or {}
        connections = workload.get("connections")
        workers = meta.get("workers")
        stopped_at_s = records_end_s = None
        missing = 0
        if requests is not None and len(requests):
            t_end = requests["t_start_s"].astype(float) + requests["e2e_ms"].astype(float) / 1000.0
            last_start_s = float(requests["t_start_s"].astype(float).max())
            interrupted = t_end[(requests["error_kind"] == "interrupted") & (t_end >= last_start_s - STOP_BURST_S)]
            if len(interrupted) and np.isfinite(interrupted).any():
                stopped_at_s = float(interrupted.min())
            if reported_requests is not None and reported_requests > len(requests):
                missing = reported_requests - len(requests)
                records_end_s = float(t_end.max())
        spells = outage_spells(requests) if requests is not None else None
        unsampled: tuple[str, ...] = ()
        if requests is not None and "worker_id" in requests and load is not None and not load.empty:
            sent = set(requests["worker_id"].dropna().astype(str)) - {""}
            unsampled = tuple(sorted(sent - set(load["worker"].dropna().astype(str))))
        return cls(
            unsampled_workers=unsampled,
            outages=tuple(spells.to_dict("records")) if spells is not None else (),
            started_at_s=float(meta.get("started_at_s", float("nan"))),
            stopped_at_s=stopped_at_s,
            stop_read=requests is not None and len(requests) > 0,
            records_end_s=records_end_s,
            missing_records=missing,
            load=load,
            workers_lost=tuple(meta.get("workers_lost") or ()),
            workers_missing=tuple(meta.get("workers_missing") or ()),
            timeouts_s=dict(workload.get("timeouts_s") or {}),
            connections=int(connections) if connections else None,
            keep_alive=workload.get("keep_alive"),
            workers=len(workers) if isinstance(workers, list) and workers else None,
        )


def worker_load_per_step(table: pd.DataFrame, load: pd.DataFrame | None) -> pd.DataFrame:
    """Per step, the busiest worker's mean CPU and mean event-loop lag over the window.

    Intervals count when their end ``t_s`` falls in ``(window_start_s, window_end_s]``. Each
    worker's intervals are averaged; the step gets the highest worker mean.

    Returns
    -------
    pandas.DataFrame
        ``client_cpu_cores`` (cores), ``client_loop_lag_ms`` (ms) and ``client_loop_lag_ms_max``
        (ms, the largest single lag); NaN without ``client_load.csv`` data in the window.
    """
    rows = []
    for row in table.itertuples(index=False):
        if load is None or load.empty:
            rows.append((np.nan, np.nan, np.nan))
            continue
        inside = load[(load["t_s"] > row.window_start_s) & (load["t_s"] <= row.window_end_s)]
        if inside.empty:
            rows.append((np.nan, np.nan, np.nan))
            continue
        per_worker = inside.groupby("worker")[["cpu_cores", "loop_lag_ms_mean"]].mean()
        rows.append(
            (
                float(per_worker["cpu_cores"].max()),
                float(per_worker["loop_lag_ms_mean"].max()),
                float(inside["loop_lag_ms_max"].max()),
            )
        )
    return pd.DataFrame(
        rows,
        index=table.index,
        dtype="float64",
        columns=["client_cpu_cores", "client_loop_lag_ms", "client_loop_lag_ms_max"],
    )


def client_validity(table: pd.DataFrame, client: ClientSide, rules: Rules) -> pd.DataFrame:
    """The validity columns of every step (rules in the module docstring).

    Parameters
    ----------
    table : pandas.DataFrame
        Step table with ``target_users``, ``client_inflight``, ``server_running``,
        ``server_waiting``, ``conn_wait_ms_mean``, ``e2e_p50_ms``, ``window_start_s``,
        ``window_end_s`` and ``failed_share`` (:func:`llm_locust.analysis.verdict.failures.failed_share`).
    client : ClientSide
    rules : Rules

    Returns
    -------
    pandas.DataFrame
        Same index: ``inflight_ratio``, ``server_inflight``, ``hidden_inflight`` (requests, :func:`llm_locust.analysis.verdict.hiddenqueue.hidden_inflight`), ``conn_wait_share``
        (0-1), the columns of :func:`worker_load_per_step`, ``valid`` (bool),
        ``invalid_reason`` (str, "" when valid; reasons joined by ``"; "``), ``incomplete``
        and ``outage`` (bool: why a step is invalid without the client being the limit).
    """
    out = worker_load_per_step(table, client.load)
    axis = load_axis(table)
    if axis is RATE:  # the pool is no load level: the schedule's rate is the target
        target = table[RATE.column].astype(float)
        achieved = table["achieved_rate_rps"].astype(float)
    else:
        target, achieved = table["target_users"].astype(float), table["client_inflight"].astype(float)
    out["inflight_ratio"] = achieved / target.where(target > 0)
    out["server_inflight"] = table["server_running"] + table["server_waiting"]
    out["hidden_inflight"] = hidden_inflight(table, rules)
    wait = table.get("conn_wait_ms_mean", pd.Series(np.nan, index=table.index)).astype(float)
    out["conn_wait_share"] = wait / (wait + table["e2e_p50_ms"].astype(float))
    pausing = table.get("backoff_users", pd.Series(0.0, index=table.index)).astype(float).fillna(0.0)
    reasons, incomplete, outage, gone = [], [], [], []
    for i, row in table.iterrows():
        cut = _incomplete(row, client)
        down = "" if cut else outage_reason(row, client.outages, client.started_at_s)
        incomplete.append(cut)
        outage.append(bool(down))
        if cut or down:
            reasons.append(cut or down)
            gone.append(False)
            continue
        why = []
        dominated = bool(row["failed_share"] >= rules.dominant_failure_share)
        if axis is RATE:
            lag_ms, unsent, planned = row["send_lag_p50_ms"], row["unsent"], row["planned_sends"]
            slipped = lag_ms >= rules.max_send_lag_ms or unsent >= rules.max_unsent_share * planned > 0
            if not dominated and slipped and not row["server_waiting"] > rules.waiting_threshold:
                why.append(
                    f"the schedule was not kept: send lag p50 {lag_ms:.0f} ms, p99 {row['send_lag_p99_ms']:.0f} ms, "
                    f"{unsent:.0f} of {planned:.0f} scheduled sends not sent, {row['achieved_rate_rps']:.2f} of "
                    f"{row[RATE.column]:g} req/s sent (no user free at the scheduled times: raise --max-users)"
                )
        held = (row["client_inflight"] + pausing[i]) / row["target_users"] if row["target_users"] > 0 else np.nan
        if axis is not RATE and not dominated and held < rules.min_inflight_ratio:
            paused = f" (+ {pausing[i]:.2f} users pausing after a refusal)" if pausing[i] > 0.005 else ""
            why.append(
                f"client in-flight {row['client_inflight']:.2f}{paused} of {row['target_users']:g} target users "
                f"({held:.0%})"
            )
        share = out.at[i, "conn_wait_share"]
        if share >= rules.max_conn_wait_share:
            why.append(f"users waited {wait[i]:.0f} ms on average for a free connection ({share:.0%} of their time)")
        cpu, lag = out.at[i, "client_cpu_cores"], out.at[i, "client_loop_lag_ms"]
        if cpu >= rules.max_worker_cpu_cores:
            why.append(f"a load worker used {cpu:.2f} CPU cores (saturated at {rules.max_worker_cpu_cores:g})")
        if lag >= rules.max_loop_lag_ms:
            why.append(f"a load worker's event loop lagged {lag:.0f} ms on average")
        lost = _worker_gone_reasons(row, client, rules)
        gone.append(bool(lost))
        why += lost
        reasons.append("; ".join(why))
    out["invalid_reason"] = pd.Series(reasons, index=table.index, dtype=str)
    out["valid"] = out["invalid_reason"] == ""
    out["incomplete"] = pd.Series([bool(c) for c in incomplete], index=table.index, dtype=bool)
    out["outage"] = pd.Series(outage, index=table.index, dtype=bool)
    out["worker_gone"] = pd.Series(gone, index=table.index, dtype=bool)
    return out


def _incomplete(row: pd.Series, client: ClientSide) -> str:
    """Why the step was not fully measured ("" when it was; module docstring)."""
    kinds = str(row.get("error_kinds", "") or "")
    stop = client.stopped_at_s
    if (not client.stop_read and "interrupted" in kinds) or (
        stop is not None
        and (("interrupted" in kinds and row["window_end_s"] >= stop) or row["window_end_s"] > stop + 1.0)
    ):
        return "incomplete: the run was stopped during this step (requests interrupted), so it is not judged"
    if client.records_end_s is not None and row["window_end_s"] > client.records_end_s + 1.0:
        return (
            f"incomplete: {client.missing_records} requests the master counted are missing from requests.csv "
            "(cut or lost) and this step ends after the last record, so it is not judged"
        )
    return ""


def _worker_gone_reasons(row: pd.Series, client: ClientSide, rules: Rules) -> list[str]:
    """Rule 6 (module docstring) for one step: one reason per lost or missing worker whose spell
    overlaps its window, ending with the step's in-flight against its target."""
    start, end = row["window_start_s"], row["window_end_s"]
    found = []
    for lost in client.workers_lost:
        lost_at = _seconds(lost.get("lost_at_s"))
        since = min(lost_at, _seconds(lost.get("last_record_s")))
        if since < end and lost_at + rules.worker_loss_margin_s > start:
            found.append(
                f"worker {lost.get('worker', '?')} was lost {since - start:.1f} s into the window"
                if since >= start
                else f"worker {lost.get('worker', '?')} was lost "
                f"{start - since:.1f} s before the window (its users were still moving to the workers left)"
            )
    for spell in client.workers_missing:
        if spell.get("to_s") is None:
            continue  # never back: a loss, above
        from_s, to_s = _seconds(spell.get("from_s")), _seconds(spell.get("to_s"))
        if from_s < end and to_s + rules.worker_loss_margin_s > start:
            found.append(
                f"worker {spell.get('worker', '?')} sent no heartbeat from {from_s - start:+.1f} s to "
                f"{to_s - start:+.1f} s of the window, then came back"
            )
    if found:
        found[-1] += f" (in-flight {row['client_inflight']:.2f} of {row['target_users']:g} target users)"
    return found


def _seconds(value) -> float:
    return float(value) if value is not None else float("inf")


def client_load_note(client: ClientSide, rules: Rules) -> Evidence:
    """Rule ``client_load_missing``: without ``client_load.csv`` conditions 4 and 5 (a worker's
    CPU, its event-loop lag) cannot be checked, so a saturated load machine is not ruled out.

    Holds (a note, not a bottleneck: it names no kind and moves no verdict) when the frame is
    None or empty: the file was not written (a run from before it existed, a worker that could
    not sample its load) or was lost; or when a worker that sent requests has no row in it
    (:attr:`ClientSide.unsampled_workers`).
    """
    missing = client.load is None or client.load.empty
    limit = (
        f"(a worker at >= {rules.max_worker_cpu_cores:g} CPU cores or with >= {rules.max_loop_lag_ms:g} ms "
        "event-loop lag)"
    )
    if missing:
        text = (
            f"client_load.csv is missing or empty: the client check could not rule out a saturated load machine "
            f"{limit}; the in-flight and connection checks still ran"
        )
    elif client.unsampled_workers:
        text = (
            f"client_load.csv has no row for {len(client.unsampled_workers)} worker(s) that sent requests "
            f"({', '.join(client.unsampled_workers)}): their load machine is not ruled out as saturated {limit}; "
            "the other workers' CPU and event-loop lag were checked per step"
        )
    else:
        text = "client_load.csv present: every worker's CPU and event-loop lag checked per step"
    holds = missing or bool(client.unsampled_workers)
    return Evidence(rule="client_load_missing", kind=BottleneckKind.CLIENT, holds=holds, text=text)


def client_limit(table: pd.DataFrame, saturated_users: float | None) -> Evidence:
    """Rule ``client``: some step is invalid (module docstring); it *limited the run* when the
    first invalid step comes at or before the first step where the server saturated
    (``saturated_users``; None = the server never saturated on the valid steps). A run the
    client limited never blames the server.

    Parameters
    ----------
    table : pandas.DataFrame
        Step table with the columns of :func:`client_validity`.
    saturated_users : float or None
        Load level (target users, or offered req/s in a rate ladder) of the first step where
        throughput stopped rising or failures dominated.
    """
    axis = load_axis(table)
    cut = table["incomplete"] if "incomplete" in table.columns else pd.Series(False, index=table.index)
    down = table["outage"] if "outage" in table.columns else pd.Series(False, index=table.index)
    invalid = table[~table["valid"] & ~cut.astype(bool) & ~down.astype(bool)].sort_values(axis.column)
    if invalid.empty:
        return Evidence(
            rule="client",
            kind=BottleneckKind.CLIENT,
            holds=False,
            values={"invalid_steps": 0},
            units={"invalid_steps": "steps"},
            text=f"the load client delivered every step's target {axis.quantity}",
        )
    row = invalid.iloc[0]
    limited = saturated_users is None or row[axis.column] <= saturated_users
    values = {
        axis.value_key: row[axis.column],
        "client_inflight": row["client_inflight"],
        "inflight_ratio": row["inflight_ratio"],
        "server_inflight": row["server_inflight"],
        "conn_wait_ms_mean": row.get("conn_wait_ms_mean", np.nan),
        "client_cpu_cores": row["client_cpu_cores"],
        "client_loop_lag_ms": row["client_loop_lag_ms"],
        "invalid_steps": len(invalid),
        "limited_run": float(limited),
        "worker_lost": float(bool(row.get("worker_gone", False))),
    }
    units = {
        axis.value_key: axis.value_unit,
        "client_inflight": "requests",
        "inflight_ratio": "ratio",
        "server_inflight": "requests",
        "conn_wait_ms_mean": "ms",
        "client_cpu_cores": "cores",
        "client_loop_lag_ms": "ms",
        "invalid_steps": "steps",
        "limited_run": "flag",
        "worker_lost": "flag",
    }
    users = axis.fmt(row[axis.column])
    if limited and values["worker_lost"]:
        text = (
            f"a load worker was lost at {users} ({row['invalid_reason']}); its users were gone until "
            "Locust moved them to the workers left, so the steps it cut short are left unjudged and the "
            "valid steps never drove the server to saturation: rerun the ladder"
        )
    elif limited:
        text = (
            f"the load client was the limit from {users} ({row['invalid_reason']}); the "
            "valid steps never drove the server to saturation: fix the client before "
            "judging the server"
        )
    else:
        text = (
            f"steps from {users} are invalid ({row['invalid_reason']}); the server had "
            f"already saturated at {axis.fmt(saturated_users)}, so the verdict rests "
            "on the steps below"
        )
    return Evidence(rule="client", kind=BottleneckKind.CLIENT, holds=True, values=values, units=units, text=text)
