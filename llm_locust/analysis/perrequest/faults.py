"""What the client saw go wrong besides single failures: outages, and the pauses users took.

**Outage** (the server unreachable): all requests of all workers in the order they ended; each
maximal run of consecutive ones that failed at the connection level (:data:`CONNECTION_KINDS`:
refused, reset, closed mid-stream, no connection in time) is one spell (:func:`outages`) when
at least one of them never reached the server (:func:`connection_failures`: no status line came
back). A **cut stream** - a connection closed after the server (or a gateway in front of it)
had answered with its status line, e.g. nginx's ``proxy_read_timeout`` firing on a stream it
had answered 200 for - proves the server reachable: it joins a spell of unreachable requests
beside it (the streams in flight when a server dies are cut, the next connections refused),
but cut streams alone are no outage, however many end together. What they are instead
(timeouts when the server's or the gateway's log accounts for them) is the failure rules' to
say (:func:`llm_locust.analysis.verdict.failures.client_failures`, from ``cut_streams`` of
:func:`step_faults`).
:func:`outage_spells` adds when the server answered again: the start of the first request that
was answered (any other outcome) after the spell's last failure - the server was back by then,
and not before the last failure. A spell counts as an outage of the run when it has at least
:data:`OUTAGE_MIN_FAILURES` failures (one reset connection is a failure, not an outage).

**Backoff**: after a refused connection, a 429 or a 5xx a user pauses before its next request
(``llm_locust.client.backoff``); ``requests.csv`` ``backoff_ms`` is that pause, taken from the
request's end. A pause is no request: while it lasts the user has nothing in flight.
:func:`step_faults` gives, per step window, the time-average number of users pausing
(``backoff_users``) next to the seconds of the window the server was unreachable, and how the
users' time in requests split between answered ones (``answered_users``) and failed ones
(``failed_users``): the verdict weighs refusals by the users' time they take
(:func:`llm_locust.analysis.verdict.failures.failed_time_share`).

Why own code: these are the measurement's own definitions (a spell, a pause), a few lines each.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from llm_locust.analysis.perrequest.metrics import end_time_s, mean_inflight

CONNECTION_KINDS: frozenset[str] = frozenset({"connection_error", "connect_timeout"})
"""``error_kind`` values of a request that could not reach the server (or lost it midway)."""

OUTAGE_MIN_FAILURES = 2
"""Connection-level failures in a row from which a spell is an outage of the run."""

SPELL_COLUMNS: tuple[str, ...] = ("start_s", "end_s", "span_s", "requests", "recovered_s")
"""Columns of :func:`outage_spells`."""


def connection_failures(kinds, status_code=None) -> tuple[np.ndarray, np.ndarray]:
    """Which requests never reached the server, and which were cut after it answered.

    Parameters
    ----------
    kinds : sequence of str
        ``error_kind`` of each request ("" for a success).
    status_code : sequence of float, optional
        HTTP status of each request, 0 (or NaN) when no response arrived (``requests.csv``
        ``status_code``). Absent (a record without it): every connection-level failure counts
        as unreachable.

    Returns
    -------
    (numpy.ndarray of bool, numpy.ndarray of bool)
        ``unreachable``: a :data:`CONNECTION_KINDS` failure with no status line (refused, reset
        or closed before any byte of the answer, no connection in time); ``cut``: a
        :data:`CONNECTION_KINDS` failure after a status line (the connection closed mid-stream:
        the server or a gateway answered, then cut it).

    >>> connection_failures(["", "connection_error", "connection_error", "connect_timeout"], [200, 0, 200, 0])
    (array([False,  True, False,  True]), array([False, False,  True, False]))
    """
    # vectorised (a Python loop over a million Arrow-backed strings took 0.7 s per call)
    series = kinds if isinstance(kinds, pd.Series) else pd.Series(list(kinds), dtype=object)
    connection = series.astype(str).isin(list(CONNECTION_KINDS)).to_numpy(bool)
    if status_code is None:
        return connection, np.zeros(len(connection), dtype=bool)
    answered = np.nan_to_num(np.asarray(status_code, dtype=float), nan=0.0) > 0
    return connection & ~answered, connection & answered


def outages(end_s: np.ndarray, unreachable: np.ndarray, cut: np.ndarray | None = None) -> list[dict]:
    """Spells when the server could not be reached: runs of connection-level failures that hold
    at least one unreachable request (module docstring).

    Parameters
    ----------
    end_s : numpy.ndarray
        End of each request, Unix s.
    unreachable : numpy.ndarray of bool
        Whether each request failed without reaching the server (:func:`connection_failures`).
    cut : numpy.ndarray of bool, optional
        Whether each request's stream was cut after the server answered (joins a spell, makes
        none); default none was.

    Returns
    -------
    list of dict
        ``start_s``, ``end_s`` (ends of its first and last failed request, Unix s), ``span_s``
        and ``requests`` (how many failed in it, cut streams included), in time order.

    >>> outages(np.array([1.0, 2.0, 2.5, 3.0, 4.0]), np.array([False, True, True, False, True]))
    [{'start_s': 2.0, 'end_s': 2.5, 'span_s': 0.5, 'requests': 2}, {'start_s': 4.0, 'end_s': 4.0, 'span_s': 0.0, 'requests': 1}]
    >>> outages(np.array([1.0, 2.0, 2.5, 3.0]), np.array([False] * 4), np.array([False, True, True, False]))
    []
    """
    order = np.argsort(end_s, kind="stable")
    ends = np.asarray(end_s, dtype=float)[order]
    lost = np.asarray(unreachable, dtype=bool)[order]
    down = lost | (np.asarray(cut, dtype=bool)[order] if cut is not None else False)
    edges = np.diff(np.concatenate([[0], down.astype(np.int8), [0]]))
    firsts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)  # each run: [first, stop)
    return [
        {"start_s": float(ends[a]), "end_s": float(ends[b - 1]), "span_s": float(ends[b - 1]) - float(ends[a]),
         "requests": int(b - a)}
        for a, b in zip(firsts, stops)
        if lost[a:b].any()
    ]  # fmt: skip


def outage_spells(requests: pd.DataFrame, *, min_failures: int = OUTAGE_MIN_FAILURES) -> pd.DataFrame:
    """The outages of a run (module docstring), with when the server answered again.

    Parameters
    ----------
    requests : pandas.DataFrame
        ``requests.csv`` rows: ``t_start_s`` (Unix s), ``e2e_ms``, ``error_kind``, and
        ``status_code`` when recorded (:func:`connection_failures`).
    min_failures : int
        Fewest failures in a row that make an outage.

    Returns
    -------
    pandas.DataFrame
        :data:`SPELL_COLUMNS`: ``start_s``, ``end_s``, ``span_s`` as :func:`outages`;
        ``requests`` (int64, failures in the spell); ``recovered_s`` (Unix s: the start of the
        first request answered after ``end_s``; NaN when none was).
    """
    if requests.empty:
        return pd.DataFrame({c: pd.Series(dtype="int64" if c == "requests" else "float64") for c in SPELL_COLUMNS})
    end = end_time_s(requests).to_numpy("float64")
    kinds = requests["error_kind"].astype(str)
    unreachable, cut = connection_failures(kinds, _status(requests))
    spells = [s for s in outages(end, unreachable, cut) if s["requests"] >= min_failures]
    starts = requests["t_start_s"].to_numpy("float64")
    answered_starts = np.sort(starts[~unreachable & ~cut & (kinds != "interrupted").to_numpy()])
    for spell in spells:
        later = answered_starts[answered_starts > spell["end_s"]]
        spell["recovered_s"] = float(later[0]) if len(later) else np.nan
    frame = pd.DataFrame(spells, columns=list(SPELL_COLUMNS))
    return frame.astype({"start_s": "float64", "end_s": "float64", "span_s": "float64", "requests": "int64",
                         "recovered_s": "float64"})  # fmt: skip


def _status(requests: pd.DataFrame) -> np.ndarray | None:
    """``status_code`` as float (NaN where empty), None when the column is absent."""
    if "status_code" not in requests.columns:
        return None
    return pd.to_numeric(requests["status_code"], errors="coerce").to_numpy("float64")


def step_faults(requests: pd.DataFrame, windows: pd.DataFrame, spells: pd.DataFrame) -> pd.DataFrame:
    """Per step window: pausing users, and the outage overlapping it.

    Parameters
    ----------
    requests : pandas.DataFrame
        ``t_start_s``, ``e2e_ms``, ``backoff_ms`` (0 when absent: an older run).
    windows : pandas.DataFrame
        ``window_start_s``, ``window_end_s`` (Unix s), :func:`llm_locust.analysis.perstep.table.step_windows`.
    spells : pandas.DataFrame
        :func:`outage_spells`.

    Returns
    -------
    pandas.DataFrame
        Same index as ``windows``: ``backoff_users`` (time-average number of users pausing over
        the window: each pause ``[end, end + backoff_ms]`` clipped to it, summed, / its length),
        ``backoff_waits`` (int64, pauses that began in the window), ``outage_s`` (seconds of the
        window inside an outage, ``[start_s, recovered_s]``, the run's end when it never
        recovered) and ``outage_failures`` (int64, that outage's connection-level failures);
        ``answered_users`` and ``failed_users`` (time-average number of requests in flight over
        the window that succeeded / failed; ``interrupted`` ones, cut by the test's stop, in
        neither); ``cut_streams`` (int64, requests ending in ``[window_start_s, window_end_s)``,
        as the step table counts failures, whose stream was cut after the server answered:
        :func:`connection_failures`); ``http_504`` (int64, those ending there answered ``504
        Gateway Timeout``: a gateway that waited too long for the upstream, or a server that
        dropped a request for waiting too long in its queue - RFC 9110 15.6.5).
    """
    end = end_time_s(requests)
    kinds = (
        requests["error_kind"].astype(str) if "error_kind" in requests.columns else pd.Series("", index=requests.index)
    )
    answered, failed = kinds == "", (kinds != "") & (kinds != "interrupted")
    status = _status(requests)
    cut = connection_failures(kinds, status)[1]
    cut_end = end[cut].to_numpy("float64")
    gateway_timeout = failed.to_numpy(bool) & (status == 504 if status is not None else False)
    timeout_end = end[gateway_timeout].to_numpy("float64")
    starts = requests["t_start_s"].astype(float)
    backoff = requests["backoff_ms"] if "backoff_ms" in requests.columns else pd.Series(0.0, index=requests.index)
    paused = backoff.fillna(0.0).astype(float) > 0
    pause_start = end[paused]
    pause_end = pause_start + backoff[paused].astype(float) / 1000.0
    rows = []
    for w in windows.itertuples(index=False):
        lo, hi = float(w.window_start_s), float(w.window_end_s)
        users = mean_inflight(pause_start, pause_end, lo, hi) if hi > lo else np.nan
        waits = int(((pause_start >= lo) & (pause_start < hi)).sum())
        outage_s, failures = 0.0, 0
        for s in spells.itertuples(index=False):
            stop = s.recovered_s if np.isfinite(s.recovered_s) else hi
            overlap = min(hi, stop) - max(lo, s.start_s)
            if overlap > 0:
                outage_s += overlap
                failures += int(s.requests)
        answered_users = mean_inflight(starts[answered], end[answered], lo, hi) if hi > lo else np.nan
        failed_users = mean_inflight(starts[failed], end[failed], lo, hi) if hi > lo else np.nan
        cuts = int(((cut_end >= lo) & (cut_end < hi)).sum())
        timed_out = int(((timeout_end >= lo) & (timeout_end < hi)).sum())
        rows.append((users, waits, outage_s, failures, answered_users, failed_users, cuts, timed_out))
    out = pd.DataFrame(rows, index=windows.index, columns=["backoff_users", "backoff_waits", "outage_s",
                                                           "outage_failures", "answered_users",
                                                           "failed_users", "cut_streams", "http_504"])  # fmt: skip
    return out.astype({"backoff_users": "float64", "backoff_waits": "int64", "outage_s": "float64",
                       "outage_failures": "int64", "answered_users": "float64",
                       "failed_users": "float64", "cut_streams": "int64", "http_504": "int64"})  # fmt: skip
