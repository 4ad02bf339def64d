"""Failures by kind on both sides, per step: the ``timeouts`` and ``rejections`` rules.

Client kinds (``requests.csv`` ``error_kind``) and server log error kinds
(:mod:`llm_locust.analysis.server.serverlog.errors`) map onto the two bottleneck kinds:

- ``timeouts``: client ``connect_timeout``, ``ttft_timeout``, ``stall_timeout``,
  ``total_timeout``; server ``timeout`` lines; client ``http_5xx`` answers whose status is 504
  Gateway Timeout (the step table's ``http_504``: a gateway that waited too long for its upstream -
  nginx's ``proxy_read_timeout`` before the response header - or a server that dropped a request
  for waiting too long; RFC 9110 15.6.5), counted as ``http_5xx_timed_out`` with or without a
  log; and the other ``http_5xx`` answers that the
  server's ``timeout`` lines in the same steady window account for (an in-house server's
  504 "timed out in queue": the client sees only a 5xx, the server's log says it dropped the
  request for waiting too long), counted as ``http_5xx_timed_out``, at most one per line; and,
  with the lines left, client ``connection_error`` streams cut after the server answered
  (``cut_streams`` of :func:`llm_locust.analysis.perrequest.faults.step_faults`: the status line came, then the
  connection closed mid-stream) counted as ``connection_error_timed_out``. That is a gateway or
  a server timing out a stream it had started - nginx's ``proxy_read_timeout`` on a stream it
  answered 200 for logs ``upstream timed out ... while reading upstream`` and closes the
  client's connection - not an outage (the server answered; :mod:`llm_locust.analysis.perrequest.faults`).
- ``rejections``: every other client failure - ``http_429``, ``http_5xx``, ``http_4xx``,
  ``connection_error`` (a cut stream no ``timeout`` line accounts for included), ``stream_error``,
  ``truncated``, ``bad_response`` (the server did not complete the request) - and server
  ``queue_full``, ``rejected``, ``dropped`` lines.

``interrupted`` (a request still in flight when the test stopped it) is no failure of the server:
it is left out of every count here.

Which kind a step's failures are is decided by the client's counts (the client knows which of
its requests completed); the server's lines are shown beside them as corroboration.

After a refused connection, a 429 or a 5xx a user pauses before its next request (the client's
backoff); the ``rejections`` evidence gives the share of the users' time spent so
(``backoff_share``, from the step table's ``backoff_users``) and names every valid step where it
reaches ``rules.significant_backoff_share``: there the in-flight and throughput are what the
server let through.

How much failures weigh in a step is the users' time they take (:func:`failed_time_share`),
not their share of the requests: with the pause a refused user sends one request every ~2 s,
without it hundreds, yet either way it spends its time refused, so the verdict is the same.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from llm_locust.analysis.loadaxis import load_axis
from llm_locust.analysis.verdict.knee import fmt_users
from llm_locust.analysis.verdict.types import BottleneckKind, Evidence, Rules

CLIENT_TIMEOUT_KINDS: frozenset[str] = frozenset(
    {"connect_timeout", "ttft_timeout", "stall_timeout", "total_timeout", "http_5xx_timed_out",
     "connection_error_timed_out"}
)  # fmt: skip
"""Client error kinds that are timeouts; every other client error kind is a rejection."""

SERVER_KIND_MAP: dict[str, BottleneckKind] = {
    "timeout": BottleneckKind.TIMEOUTS,
    "queue_full": BottleneckKind.REJECTIONS,
    "rejected": BottleneckKind.REJECTIONS,
    "dropped": BottleneckKind.REJECTIONS,
}
"""Server log error kinds the verdict counts, and the bottleneck kind each speaks for."""

NOT_FAILURES: frozenset[str] = frozenset({"interrupted"})
"""Client error kinds that say nothing about the server (the client stopped the request)."""

TIMEOUT_FLAGS: dict[str, tuple[str, str]] = {
    "ttft_timeout": ("ttft", "--ttft-timeout-s"),
    "total_timeout": ("total", "--total-timeout-s"),
    "stall_timeout": ("stall", "--stall-timeout-s"),
    "connect_timeout": ("connect", "--connect-timeout-s"),
}
"""Client timeout kind -> (key of run.json ``workload.timeouts_s``, llm-locust flag)."""


def parse_kinds(text: str, *, failures_only: bool = False) -> dict[str, int]:
    """``"http_429:3 ttft_timeout:1"`` (the step table's ``error_kinds``) -> ``{kind: count}``;
    with ``failures_only``, without :data:`NOT_FAILURES`.

    >>> parse_kinds("http_429:3 ttft_timeout:1")
    {'http_429': 3, 'ttft_timeout': 1}
    >>> parse_kinds("interrupted:2 http_429:1", failures_only=True)
    {'http_429': 1}
    >>> parse_kinds("")
    {}
    """
    out: dict[str, int] = {}
    for item in str(text or "").split():
        kind, _, count = item.rpartition(":")
        if kind and not (failures_only and kind in NOT_FAILURES):
            out[kind] = out.get(kind, 0) + int(count)
    return out


def format_kinds(counts: dict[str, int]) -> str:
    """Inverse of :func:`parse_kinds` (kinds sorted by name)."""
    return " ".join(f"{kind}:{n}" for kind, n in sorted(counts.items()) if n)


def client_kind(kind: str) -> BottleneckKind:
    """The bottleneck kind of one client ``error_kind``."""
    return BottleneckKind.TIMEOUTS if kind in CLIENT_TIMEOUT_KINDS else BottleneckKind.REJECTIONS


def server_errors_per_step(table: pd.DataFrame, errors: pd.DataFrame | None) -> pd.DataFrame:
    """Server log error lines of the kinds in :data:`SERVER_KIND_MAP` inside each steady window.

    Parameters
    ----------
    table : pandas.DataFrame
        Step table (``window_start_s``, ``window_end_s``, Unix s).
    errors : pandas.DataFrame or None
        Error lines (``t_s`` Unix s, ``kind``), :attr:`llm_locust.analysis.server.serverlog.ServerLogResult.errors`.

    Returns
    -------
    pandas.DataFrame
        ``server_errors`` (int64, lines in ``[window_start_s, window_end_s)``) and
        ``server_error_kinds`` (``"kind:n ..."``), one row per step, same index as ``table``.
    """
    counts, kinds = [], []
    for row in table.itertuples(index=False):
        if errors is None or errors.empty:
            counts.append(0)
            kinds.append("")
            continue
        inside = errors[
            (errors["t_s"] >= row.window_start_s)
            & (errors["t_s"] < row.window_end_s)
            & errors["kind"].isin(list(SERVER_KIND_MAP))
        ]
        by_kind = inside["kind"].value_counts().to_dict()
        counts.append(int(sum(by_kind.values())))
        kinds.append(format_kinds({str(k): int(v) for k, v in by_kind.items()}))
    return pd.DataFrame(
        {
            "server_errors": pd.Series(counts, dtype="int64", index=table.index),
            "server_error_kinds": pd.Series(kinds, dtype=str, index=table.index),
        }
    )


def failures_per_step(table: pd.DataFrame) -> pd.Series:
    """Failed requests per step: the ``error_kinds`` counts without :data:`NOT_FAILURES` (float64)."""
    return table["error_kinds"].map(lambda text: sum(parse_kinds(text, failures_only=True).values())).astype("float64")


def failed_share(table: pd.DataFrame) -> pd.Series:
    """``failed / (completed + failed)`` per step, ``failed`` from :func:`failures_per_step`
    (0-1; NaN when nothing finished in the window)."""
    failed = failures_per_step(table)
    finished = table["completed"].astype(float) + failed
    return (failed / finished.where(finished > 0)).astype("float64")


def failed_time_share(table: pd.DataFrame) -> pd.Series:
    """Share of the users' time a step's failures took (0-1): the measure of "refusals dominate".

    Counted in requests, refusals look small once users pause after a 429 (a refused user sends
    one request per pause instead of one per millisecond), and large without the pause; the
    users' time they take is the same either way, so the verdict judges on that. Over the
    step's steady window, in time-average users (:func:`llm_locust.analysis.perrequest.faults.step_faults`)::

        idle   = max(0, target_users - answered_users - failed_users - backoff_users)
        failed = failed_users + backoff_users + idle * n_failed / (n_failed + n_completed)
        share  = min(1, failed / target_users)

    ``failed_users`` is the users in a failed request, ``backoff_users`` those pausing after a
    refusal; ``idle`` is the client's own turnaround between a user's requests (no request in
    flight, no pause), about the same after every request, so the failed requests' part of it
    is their part of the requests that ended in the window (``n_failed`` from
    :func:`failures_per_step`, ``n_completed`` = ``completed``). Without a pause (a client
    that retries at once) that turnaround is most of a refused user's time.

    Falls back to the request share (:func:`failed_share`) for a request-rate ladder (the
    pool's idle users are not refused) and for a table without ``answered_users`` /
    ``failed_users`` (the live tab's). 0 for a step without failures or pauses; NaN where the
    request share is NaN and nothing paused.
    """
    by_count = failed_share(table)
    axis = load_axis(table)
    if axis.column != "target_users" or not {"answered_users", "failed_users"} <= set(table.columns):
        return by_count
    target = table["target_users"].astype(float)
    answered = table["answered_users"].astype(float).fillna(0.0)
    in_failed = table["failed_users"].astype(float).fillna(0.0)
    paused = table.get("backoff_users", pd.Series(0.0, index=table.index)).astype(float).fillna(0.0)
    n_failed = failures_per_step(table)
    ended = n_failed + table["completed"].astype(float)
    idle = (target - answered - in_failed - paused).clip(lower=0.0)
    failed = in_failed + paused + idle * (n_failed / ended.where(ended > 0)).fillna(0.0)
    share = (failed / target.where(target > 0)).clip(upper=1.0)
    none = (n_failed == 0) & (paused <= 0)
    share = share.where(~none, 0.0).where(~(none & by_count.isna()), np.nan)
    return share.astype("float64")


def _count(row, column: str) -> int:
    """A step-table count column of ``row``, 0 where it is NaN or absent (an older table)."""
    value = getattr(row, column, 0)
    return int(value) if value == value and value else 0


def client_failures(row) -> dict[str, int]:
    """``{client error kind: n}`` of one step's failures, with the timeouts among them moved to
    timeout kinds (module docstring): first the 504 answers (``http_504``) to
    ``http_5xx_timed_out``, each taking one of the server's ``timeout`` lines where there are
    any (the line a server logs for the 504 it sends); then, with the lines left, the other
    ``http_5xx`` answers, to ``http_5xx_timed_out``, and the cut streams, to
    ``connection_error_timed_out``; each line accounts for one request at most.

    Parameters
    ----------
    row
        A step-table row (namedtuple or Series) with ``error_kinds`` and, optionally,
        ``server_error_kinds``, ``cut_streams`` (the step's ``connection_error`` requests
        cut after the server answered) and ``http_504`` (its ``http_5xx`` answered 504).

    >>> from types import SimpleNamespace as Row
    >>> client_failures(Row(error_kinds="connection_error:5 http_5xx:1", server_error_kinds="timeout:4",
    ...                     cut_streams=5))
    {'connection_error': 2, 'http_5xx_timed_out': 1, 'connection_error_timed_out': 3}
    >>> client_failures(Row(error_kinds="http_5xx:6", server_error_kinds="", http_504=4))
    {'http_5xx': 2, 'http_5xx_timed_out': 4}
    """
    counts = parse_kinds(row.error_kinds, failures_only=True)
    logged = parse_kinds(str(getattr(row, "server_error_kinds", "") or "")).get("timeout", 0)
    gateway = min(counts.get("http_5xx", 0), _count(row, "http_504"))
    if gateway:
        logged = max(0, logged - gateway)
        counts["http_5xx"] -= gateway
        counts["http_5xx_timed_out"] = gateway
        if not counts["http_5xx"]:
            del counts["http_5xx"]
    cut = _count(row, "cut_streams")
    for kind, eligible in (("http_5xx", counts.get("http_5xx", 0)), ("connection_error", cut)):
        moved = min(counts.get(kind, 0), eligible, logged)
        if moved:
            logged -= moved
            counts[kind] -= moved
            counts[f"{kind}_timed_out"] = counts.get(f"{kind}_timed_out", 0) + moved
            if not counts[kind]:
                del counts[kind]
    return counts


def step_failure_kind(row) -> BottleneckKind | None:
    """The kind that most of one step's client failures are (ties: timeouts), None without any
    (kinds of :func:`client_failures`)."""
    counts = client_failures(row)
    if not counts:
        return None
    timeouts = sum(n for k, n in counts.items() if client_kind(k) is BottleneckKind.TIMEOUTS)
    return BottleneckKind.TIMEOUTS if timeouts * 2 >= sum(counts.values()) else BottleneckKind.REJECTIONS


def failures(table: pd.DataFrame, kind: BottleneckKind, rules: Rules, *, server_log: bool = True) -> Evidence:
    """Rule ``timeouts`` / ``rejections``: failures of this kind are significant in a step.

    Holds when, in some valid step, failures took at least ``rules.significant_failure_share``
    of the users' time (``failed_time_share``, :func:`failed_time_share`; the request share
    ``failed_share`` where the table has no such column), most of them client errors of
    ``kind``. The first such step is reported; ``dominates`` says whether they took
    ``rules.dominant_failure_share`` or more of it - most of the users' time spent refused or
    timed out (such a step never counts as healthy throughput and drives the verdict). The
    values give both shares.

    Parameters
    ----------
    table : pandas.DataFrame
        Step table with ``valid``, ``failed_share``, ``error_kinds``, ``server_error_kinds``,
        ``completed``, ``errors``, ``target_users``.
    kind : BottleneckKind
        ``TIMEOUTS`` or ``REJECTIONS``.
    rules : Rules
    server_log : bool, default True
        Whether the run has a server log to compare with (the text says so when not).
    """
    name = kind.value
    axis = load_axis(table)
    timed = "failed_time_share" in table.columns
    for row in table[table["valid"]].sort_values(axis.column).itertuples(index=False):
        share = row.failed_time_share if timed else row.failed_share
        if not (share >= rules.significant_failure_share) or step_failure_kind(row) is not kind:
            continue
        client = {k: n for k, n in client_failures(row).items() if client_kind(k) is kind}
        failed = sum(parse_kinds(row.error_kinds, failures_only=True).values())
        server = {k: n for k, n in parse_kinds(row.server_error_kinds).items() if SERVER_KIND_MAP.get(k) is kind}
        dominates = bool(share >= rules.dominant_failure_share)
        paused = _backoff_share(table, rules) if kind is BottleneckKind.REJECTIONS else {}
        values = {
            axis.value_key: getattr(row, axis.column),
            "failed_share": row.failed_share,
            **({"failed_time_share": share} if timed else {}),
            "failed": failed,
            "finished": row.completed + failed,
            "dominates": float(dominates),
            **{f"client_{k}": n for k, n in client.items()},
            **{f"server_{k}": n for k, n in server.items()},
            **({"backoff_share": paused.get(row.step, 0.0), "backoff_steps": len(paused)} if paused else {}),
        }
        units = {
            k: (
                axis.value_unit
                if k == axis.value_key
                else "ratio"
                if k in ("failed_share", "failed_time_share")
                else "flag"
                if k == "dominates"
                else "ratio"
                if k == "backoff_share"
                else "steps"
                if k == "backoff_steps"
                else "requests"
                if k.startswith(("client_", "f"))
                else "log lines"
            )
            for k in values
        }
        side = ", ".join(f"{k} {n}" for k, n in client.items())
        logged = (
            f"; the server log has {', '.join(f'{k} {n}' for k, n in server.items())}"
            if server
            else "; the server log shows no such line in this window"
            if server_log
            else "; no server log to compare (--server-log)"
        )
        how = (
            f"{share:.0%} of the users' time went to failed requests and the pauses after them "
            f"({row.failed_share:.0%} of the finished requests failed: {side})"
            if timed
            else f"{share:.0%} of the finished requests failed ({side})"
        )
        text = (
            f"at {axis.fmt(getattr(row, axis.column))} {how}{logged}"
            + (": the step is dominated by failures and left out of the healthy throughput" if dominates else "")
            + _backoff_text(table, paused)
        )
        return Evidence(rule=name, kind=kind, holds=True, values=values, units=units, text=text)
    return Evidence(
        rule=name,
        kind=kind,
        holds=False,
        values={},
        units={},
        text=f"no valid step has {rules.significant_failure_share:.0%} or more "
        f"{'timed-out' if kind is BottleneckKind.TIMEOUTS else 'refused'} requests",
    )


def _backoff_share(table: pd.DataFrame, rules: Rules) -> dict:
    """``{step: backoff_users / target_users}`` of the valid steps where it reaches
    ``rules.significant_backoff_share`` (none without a ``backoff_users`` column)."""
    if "backoff_users" not in table.columns:
        return {}
    valid = table[table["valid"]]
    share = valid["backoff_users"].astype(float) / valid["target_users"].astype(float)
    return {int(step): float(x) for step, x in zip(valid["step"], share) if x >= rules.significant_backoff_share}


def _backoff_text(table: pd.DataFrame, paused: dict) -> str:
    """``; users spent ... pausing: 43% at 4 users, ...`` ("" when nowhere)."""
    if not paused:
        return ""
    users = dict(zip(table["step"].astype(int), table["target_users"]))
    steps = ", ".join(f"{share:.0%} at {fmt_users(users[step])} users" for step, share in sorted(paused.items()))
    return (
        f"; users spent their time pausing after refusals (backoff, no request sent): {steps} - "
        "in-flight and throughput there are what the server let through"
    )


def timeout_cause(table: pd.DataFrame, timeouts_s: dict, rules: Rules) -> Evidence | None:
    """Rule ``timeout_cause``: is the client timeout shorter than the server's real latency, or
    does the server's queue push latency over the line?

    At the first valid step with timeouts: when the server queues there (``server_waiting >
    rules.waiting_threshold``) the queue pushes latency over the timeout (value
    ``server_queue`` 1); when it does not, the timeout is shorter than what the server needs
    for one request without queueing (``server_queue`` 0). Holds when the cause could be told;
    without the server's waiting count it cannot, and the evidence says so (holds false).
    None when no step has timeouts.

    Parameters
    ----------
    timeouts_s : dict
        run.json ``workload.timeouts_s`` (``connect``, ``ttft``, ``stall``, ``total``; s, 0 = off).
    """
    axis = load_axis(table)
    rows = table[table["valid"]].sort_values(axis.column).reset_index(drop=True)
    for i, row in rows.iterrows():
        counts = {k: n for k, n in parse_kinds(row["error_kinds"]).items() if k in TIMEOUT_FLAGS}
        if not counts:
            continue
        main = max(counts, key=counts.__getitem__)
        key, flag = TIMEOUT_FLAGS[main]
        limit_s = float((timeouts_s or {}).get(key) or math.nan)
        waiting = float(row["server_waiting"])
        prev_ttft = float(rows.loc[i - 1, "ttft_p50_ms"]) if i > 0 else math.nan
        values = {
            axis.value_key: row[axis.column],
            f"{key}_timeout_s": limit_s,
            "server_waiting": waiting,
            "ttft_p50_ms": row["ttft_p50_ms"],
            "e2e_p50_ms": row["e2e_p50_ms"],
            "previous_ttft_p50_ms": prev_ttft,
        }
        units = {
            axis.value_key: axis.value_unit,
            f"{key}_timeout_s": "s",
            "server_waiting": "requests",
            "ttft_p50_ms": "ms",
            "e2e_p50_ms": "ms",
            "previous_ttft_p50_ms": "ms",
        }
        limit = f"{limit_s:g} s" if np.isfinite(limit_s) else "(value not recorded)"
        if np.isfinite(waiting):
            queue = waiting > rules.waiting_threshold
            text = f"{main} first at {axis.fmt(row[axis.column])} with {flag} {limit}: " + (
                f"the server's queue (waiting {waiting:.2f}) pushes latency over the line"
                if queue
                else f"the server queued nothing (waiting {waiting:.2f}): the client timeout is "
                "shorter than the server's real latency"
            )
            return Evidence(
                rule="timeout_cause",
                kind=BottleneckKind.TIMEOUTS,
                holds=True,
                values={**values, "server_queue": float(queue)},
                units={**units, "server_queue": "flag"},
                text=text,
            )
        text = (
            f"{main} first at {axis.fmt(row[axis.column])} with {flag} {limit}; the "
            "server's waiting count is missing, so whether its queue or the timeout itself "
            "is too short cannot be told"
        )
        return Evidence(
            rule="timeout_cause", kind=BottleneckKind.TIMEOUTS, holds=False, values=values, units=units, text=text
        )
    return None
