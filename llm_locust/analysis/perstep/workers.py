"""Per load worker: its requests, its CPU, and when the master stopped hearing from it.

Inputs are the run directory's own files, as :func:`llm_locust.analysis.rundir.reader.load_run` types them:
``requests.csv`` (``worker_id``, ``t_start_s``, ``e2e_ms``, ``error_kind``), ``client_load.csv``
(``worker``, ``cpu_cores``, ``loop_lag_ms_mean``) and ``run.json`` (``workers``,
``worker_processes``, ``workers_missing``, ``workers_lost``). The master writes the result into
``client_report.json`` (``workers``) and the report into ``summary.md``; both call these
functions, so the two never disagree.

Why own code: this is the join of the run directory's files per worker (a groupby each), no
library holds it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

WORKER_COLUMNS: tuple[str, ...] = (
    "worker", "host", "pid", "requests", "ok", "failed", "cpu_mean_percent", "cpu_max_percent",
    "loop_lag_ms_mean", "load_samples", "first_record_s", "last_record_s", "missing_s",
)  # fmt: skip
"""Columns of :func:`worker_table`."""

MISSING_COLUMNS: tuple[str, ...] = ("worker", "from_s", "to_s", "until", "missing_s")
"""Columns of :func:`missing_intervals`."""

UNTIL_BACK = "back"
"""``until`` of an interval that ended with the worker's next heartbeat."""
UNTIL_RUN_END = "run_end"
"""``until`` of an interval the worker never came back from (``to_s`` is the run's end)."""

_LOCUST_CLIENT_ID = re.compile(r"^(?P<host>.+)_[0-9a-f]{32}$")
"""Locust's worker client id: ``socket.gethostname() + "_" + uuid4().hex`` (``locust/runners.py``,
``WorkerRunner.__init__``)."""


def host_of(worker: str) -> str:
    """The host name inside a Locust worker client id ("" when the id is not of that form).

    >>> host_of("gpu-box-3_0123456789abcdef0123456789abcdef")
    'gpu-box-3'
    >>> host_of("local")
    ''
    """
    match = _LOCUST_CLIENT_ID.match(worker)
    return match.group("host") if match else ""


def missing_intervals(meta: dict[str, Any], end_s: float) -> pd.DataFrame:
    """When each worker was missing: from the master's last word from it to its return or the run's end.

    Read from run.json ``workers_missing`` (``{"worker", "from_s", "noticed_s", "to_s"}``, Unix s;
    ``to_s`` null when the worker never came back); a run directory written before that key
    existed falls back on ``workers_lost`` (``lost_at_s`` to the run's end).

    Parameters
    ----------
    meta : dict
        ``run.json`` as loaded.
    end_s : float
        The run's end (Unix s): where an interval without ``to_s`` stops.

    Returns
    -------
    pandas.DataFrame
        :data:`MISSING_COLUMNS`: ``from_s`` and ``to_s`` (Unix s; ``to_s`` is ``end_s`` when the
        worker never came back, never before ``from_s``), ``until`` (:data:`UNTIL_BACK` or
        :data:`UNTIL_RUN_END`), ``missing_s`` (``to_s - from_s``, s). Sorted by ``from_s``.

    >>> meta = {"workers_missing": [{"worker": "a", "from_s": 10.0, "noticed_s": 14.5, "to_s": 18.0},
    ...                             {"worker": "b", "from_s": 12.0, "noticed_s": 16.2, "to_s": None}]}
    >>> missing_intervals(meta, end_s=30.0)[["worker", "to_s", "until", "missing_s"]].to_dict("records")
    [{'worker': 'a', 'to_s': 18.0, 'until': 'back', 'missing_s': 8.0}, {'worker': 'b', 'to_s': 30.0, 'until': 'run_end', 'missing_s': 18.0}]
    """
    raw = meta.get("workers_missing")
    if raw is None:
        raw = [{"worker": lost["worker"], "from_s": lost["lost_at_s"], "to_s": None}
               for lost in meta.get("workers_lost") or []]  # fmt: skip
    rows = []
    for interval in raw:
        from_s = float(interval["from_s"])
        back = interval.get("to_s") is not None
        to_s = max(from_s, float(interval["to_s"]) if back else float(end_s))
        rows.append((str(interval["worker"]), from_s, to_s, UNTIL_BACK if back else UNTIL_RUN_END, to_s - from_s))
    frame = pd.DataFrame(rows, columns=list(MISSING_COLUMNS))
    frame = frame.astype({"worker": str, "from_s": "float64", "to_s": "float64", "until": str, "missing_s": "float64"})
    return frame.sort_values(["from_s", "worker"], kind="stable").reset_index(drop=True)


COUNT_COLUMNS: tuple[str, ...] = ("requests", "ok", "failed", "first_record_s", "last_record_s")
"""Columns of :func:`request_counts` (indexed by ``worker``)."""


def request_counts(requests: pd.DataFrame) -> pd.DataFrame:
    """Per ``worker_id`` of ``requests.csv``: its rows, failed rows, first start and last end.

    Parameters
    ----------
    requests : pandas.DataFrame
        ``worker_id`` (str), ``t_start_s`` (Unix s), ``e2e_ms`` (ms, NaN when the request never
        ended), ``error_kind`` ("" for a success).

    Returns
    -------
    pandas.DataFrame
        Indexed by ``worker`` (str), :data:`COUNT_COLUMNS`: ``requests``, ``ok`` (no
        ``error_kind``) and ``failed`` (any ``error_kind`` but ``interrupted``: cut by the test's
        stop, no failure), int64; ``first_record_s`` (earliest ``t_start_s``) and
        ``last_record_s`` (latest ``t_start_s + e2e_ms / 1000``, the start when it never ended).
    """
    start = requests["t_start_s"].astype(float)
    kinds = requests["error_kind"].astype(str)
    grouped = pd.DataFrame({
        "worker": requests["worker_id"].astype(str),
        "ok": kinds == "",
        "failed": (kinds != "") & (kinds != "interrupted"),  # cut by the test's stop: no failure
        "start": start,
        "end": start + requests["e2e_ms"].astype(float).fillna(0.0) / 1000.0,
    }).groupby("worker")  # fmt: skip
    out = pd.DataFrame({
        "requests": grouped.size().astype("int64"),
        "ok": grouped["ok"].sum().astype("int64"),
        "failed": grouped["failed"].sum().astype("int64"),
        "first_record_s": grouped["start"].min().astype("float64"),
        "last_record_s": grouped["end"].max().astype("float64"),
    })  # fmt: skip
    out.index = out.index.astype(str).rename("worker")
    return out[list(COUNT_COLUMNS)]


class WorkerCounts:
    """:func:`request_counts` accumulated batch by batch, as the master receives the rows (the
    counts add up, the first start and last end are a min and a max: the same figures whatever
    the batches, without reading ``requests.csv`` back).

    >>> counts = WorkerCounts()
    >>> counts.add(["w", "w"], np.array([True, False]), np.array([False, True]), np.array([10.0, 11.0]),
    ...            np.array([500.0, np.nan]))
    >>> counts.add(["v"], np.array([True]), np.array([False]), np.array([9.0]), np.array([2000.0]))
    >>> counts.frame().to_dict("index")["w"]
    {'requests': 2, 'ok': 1, 'failed': 1, 'first_record_s': 10.0, 'last_record_s': 11.0}
    """

    def __init__(self) -> None:
        self._by_worker: dict[str, list] = {}  # worker -> [requests, ok, failed, first start, last end]

    def add(
        self, worker_ids: Sequence[str | None], ok: np.ndarray, failed: np.ndarray, t_start_s: np.ndarray,
        e2e_ms: np.ndarray,
    ) -> None:  # fmt: skip
        """Add a batch of rows.

        Parameters
        ----------
        worker_ids : sequence of str, length n
            Each row's ``worker_id`` (None is "", anything else its ``str``).
        ok, failed : numpy.ndarray of bool, shape (n,)
            Rows without an ``error_kind``; rows failed (any ``error_kind`` but ``interrupted``).
        t_start_s, e2e_ms : numpy.ndarray of float64, shape (n,)
            Unix s; ms (NaN when the request never ended).
        """
        if not len(worker_ids):
            return
        end = t_start_s + np.where(np.isnan(e2e_ms), 0.0, e2e_ms) / 1000.0
        first = worker_ids[0]
        if isinstance(first, str) and worker_ids.count(first) == len(worker_ids):  # one worker's report
            self._update(first, len(worker_ids), int(ok.sum()), int(failed.sum()), t_start_s, end)
            return
        names = ["" if w is None else str(w) for w in worker_ids]
        ids = np.asarray(names, dtype=object)
        for worker in dict.fromkeys(names):
            mine = ids == worker
            self._update(worker, int(mine.sum()), int(ok[mine].sum()), int(failed[mine].sum()), t_start_s[mine],
                         end[mine])  # fmt: skip

    def _update(self, worker: str, requests: int, ok: int, failed: int, start: np.ndarray, end: np.ndarray) -> None:
        # NaN starts are skipped as pandas' min/max skip them
        first = float(np.nanmin(start)) if not np.isnan(start).all() else math.nan
        last = float(np.nanmax(end)) if not np.isnan(end).all() else math.nan
        entry = self._by_worker.setdefault(worker, [0, 0, 0, math.nan, math.nan])
        entry[0] += requests
        entry[1] += ok
        entry[2] += failed
        entry[3] = first if math.isnan(entry[3]) else entry[3] if math.isnan(first) else min(entry[3], first)
        entry[4] = last if math.isnan(entry[4]) else entry[4] if math.isnan(last) else max(entry[4], last)

    def frame(self) -> pd.DataFrame:
        """The counts so far, as :func:`request_counts` gives them."""
        workers = sorted(self._by_worker)
        out = pd.DataFrame(
            [self._by_worker[w] for w in workers], index=pd.Index(workers, name="worker", dtype=str),
            columns=list(COUNT_COLUMNS),
        )  # fmt: skip
        return out.astype({"requests": "int64", "ok": "int64", "failed": "int64", "first_record_s": "float64",
                           "last_record_s": "float64"})  # fmt: skip


def worker_table(
    requests: pd.DataFrame | WorkerCounts, load: pd.DataFrame | None, meta: dict[str, Any], end_s: float
) -> pd.DataFrame:
    """One row per load worker: requests, CPU, first and last record, time missing.

    Every worker named anywhere is listed - run.json ``workers``, a ``worker_id`` in
    ``requests.csv``, a ``worker`` in ``client_load.csv``, a missing interval - so a worker that
    sent nothing shows up with 0 requests.

    Parameters
    ----------
    requests : pandas.DataFrame or WorkerCounts
        ``requests.csv``: ``worker_id`` (str), ``t_start_s`` (Unix s), ``e2e_ms`` (ms, NaN when
        the request never ended), ``error_kind`` ("" for a success); or the same rows' counts
        accumulated as they came (:class:`WorkerCounts`, the master's).
    load : pandas.DataFrame or None
        ``client_load.csv``: ``worker``, ``cpu_cores`` (cores, per ~1 s interval),
        ``loop_lag_ms_mean`` (ms); None or empty when not written.
    meta : dict
        ``run.json``: ``workers`` (ids), ``worker_processes`` (``[{"worker", "host", "pid"}]``,
        optional), the missing intervals (:func:`missing_intervals`).
    end_s : float
        The run's end (Unix s).

    Returns
    -------
    pandas.DataFrame
        :data:`WORKER_COLUMNS`, sorted by ``worker``: ``host`` (from ``worker_processes``, else
        the host part of a Locust client id, else ""), ``pid`` (Int64, NA when unknown);
        ``requests`` (rows of ``requests.csv``) = ``ok`` + ``failed`` + the ``interrupted`` ones
        (cut by the test's stop: no failure; ``failed``: any other ``error_kind``); ``cpu_mean_percent`` / ``cpu_max_percent``
        (percent of one core, mean and max of its ``client_load.csv`` intervals; NaN without
        any), ``loop_lag_ms_mean`` (mean of the intervals' mean lag, ms), ``load_samples``
        (intervals); ``first_record_s`` (earliest ``t_start_s``) and ``last_record_s`` (latest
        end, ``t_start_s + e2e_ms / 1000``, or the start when it never ended), NaN without
        records; ``missing_s`` (sum of its missing intervals, s).
    """
    processes = {str(p.get("worker")): p for p in meta.get("worker_processes") or [] if isinstance(p, dict)}
    missing = missing_intervals(meta, end_s)
    load = load if load is not None and not load.empty else None
    counts = requests.frame() if isinstance(requests, WorkerCounts) else request_counts(requests)
    names = set(map(str, meta.get("workers") or [])) | set(counts.index) | set(missing["worker"])
    if load is not None:
        names |= set(load["worker"].astype(str))
    names.discard("")
    index = pd.Index(sorted(names), name="worker", dtype=str)

    out = pd.DataFrame(index=index)
    out["requests"] = counts["requests"].reindex(index, fill_value=0).astype("int64")
    out["failed"] = counts["failed"].reindex(index, fill_value=0).astype("int64")
    out["ok"] = counts["ok"].reindex(index, fill_value=0).astype("int64")
    if load is not None:
        per = load.assign(worker=load["worker"].astype(str)).groupby("worker")
        out["cpu_mean_percent"] = (per["cpu_cores"].mean() * 100.0).reindex(index)
        out["cpu_max_percent"] = (per["cpu_cores"].max() * 100.0).reindex(index)
        out["loop_lag_ms_mean"] = per["loop_lag_ms_mean"].mean().reindex(index)
        out["load_samples"] = per.size().reindex(index, fill_value=0).astype("int64")
    else:
        out["cpu_mean_percent"] = out["cpu_max_percent"] = out["loop_lag_ms_mean"] = math.nan
        out["load_samples"] = 0
    out["first_record_s"] = counts["first_record_s"].reindex(index)
    out["last_record_s"] = counts["last_record_s"].reindex(index)
    out["missing_s"] = missing.groupby("worker")["missing_s"].sum().reindex(index, fill_value=0.0)
    out["host"] = [str(processes.get(name, {}).get("host") or host_of(name)) for name in index]
    out["pid"] = pd.array([_pid(processes.get(name, {}).get("pid")) for name in index], dtype="Int64")
    out = out.reset_index()
    return out.astype({c: "float64" for c in ("cpu_mean_percent", "cpu_max_percent", "loop_lag_ms_mean",
                                              "first_record_s", "last_record_s", "missing_s")})[list(WORKER_COLUMNS)]  # fmt: skip


def _pid(value) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def worker_records(table: pd.DataFrame, missing: pd.DataFrame) -> list[dict]:
    """:func:`worker_table` rows as JSON-ready dicts, each with its ``missing`` intervals
    (``from_s``, ``to_s``, ``until``, ``missing_s``; NaN and NA become None)."""
    out = []
    for row in table.to_dict("records"):
        row = {key: _plain(value) for key, value in row.items()}
        mine = missing[missing["worker"] == row["worker"]]
        row["missing"] = [{key: _plain(value) for key, value in interval.items() if key != "worker"}
                          for interval in mine.to_dict("records")]  # fmt: skip
        out.append(row)
    return out


def _plain(value):
    """A numpy / pandas scalar as a plain Python one; NaN and NA as None."""
    if value is None or value is pd.NA:
        return None
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    return value


def short_id(worker: str) -> str:
    """A Locust client id cut to its host and the first 8 hex digits of its uuid (other ids as they are).

    >>> short_id("gpu-box-3_0123456789abcdef0123456789abcdef")
    'gpu-box-3_01234567'
    """
    host = host_of(worker)
    return f"{host}_{worker[len(host) + 1 : len(host) + 9]}" if host else worker


WORKER_HEADER: tuple[str, ...] = (
    "worker", "host", "pid", "requests", "ok", "failed", "CPU mean %", "CPU max %", "first", "last", "missing",
)  # fmt: skip
"""Column titles of :func:`worker_text_rows`."""


def worker_text_rows(records: list[dict], started_at_s: float) -> list[tuple[str, ...]]:
    """Per-worker records (:func:`worker_records`, ``client_report.json`` ``workers``) as text
    cells under :data:`WORKER_HEADER`, for the console and ``summary.md``.

    Times are seconds since ``started_at_s`` (the run's start, Unix s); ``missing`` lists each
    spell as ``+from-+to s`` with ``(back)`` or ``(to the end)``; "-" where nothing applies.

    >>> worker_text_rows([{"worker": "w", "host": "", "pid": None, "requests": 3, "ok": 2, "failed": 1,
    ...     "cpu_mean_percent": 12.4, "cpu_max_percent": None, "first_record_s": 101.0,
    ...     "last_record_s": 109.25, "missing": [{"from_s": 104.0, "to_s": 110.0, "until": "run_end"}]}], 100.0)
    [('w', '-', '-', '3', '2', '1', '12', '-', '+1.0 s', '+9.2 s', '+4.0-+10.0 s (to the end)')]
    """

    def number(value, fmt: str) -> str:
        return "-" if value is None or value != value else format(value, fmt)

    def since(t_s) -> str:
        return "-" if t_s is None or t_s != t_s else f"+{t_s - started_at_s:.1f} s"

    rows: list[tuple[str, ...]] = []
    for record in records:
        spells = ", ".join(
            f"+{s['from_s'] - started_at_s:.1f}-+{s['to_s'] - started_at_s:.1f} s "
            + ("(back)" if s["until"] == UNTIL_BACK else "(to the end)")
            for s in record.get("missing") or []
        )
        rows.append((
            short_id(str(record["worker"])), record.get("host") or "-", number(record.get("pid"), "d"),
            str(record["requests"]), str(record["ok"]), str(record["failed"]),
            number(record.get("cpu_mean_percent"), ".0f"), number(record.get("cpu_max_percent"), ".0f"),
            since(record.get("first_record_s")), since(record.get("last_record_s")), spells or "-",
        ))  # fmt: skip
    return rows
