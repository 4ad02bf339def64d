"""The master's live store of request records: per-name table and time series for the LLM tab.

Fed with the rows that already reach the master (``RequestRecord.to_row()`` batches, from the
:class:`~llm_locust.master.shipping.RecordShipper` sink), so it counts exactly the requests Locust's own
stats count. Each record keeps seven numbers in compact arrays (``array('d')`` / ``array('i')``,
about 48 bytes a request); percentiles are always taken over the raw values of every worker,
never averaged across workers.

Clocks: ``t_start_s`` is wall clock (Unix s); a request *completes* at
``t_end_s = t_start_s + e2e_ms / 1000`` (as in :func:`llm_locust.analysis.perrequest.metrics.end_time_s`).

Time series live on a fixed grid of ``bucket_s`` buckets from ``t0_s``: a request adds its TTFT,
tokens and error kind to the bucket it completed in, and its share of in-flight time to every
bucket it overlaps. A point of the series is a rolling window of ``window_buckets`` buckets.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from llm_locust.analysis.perrequest.metrics import with_request_metrics
from llm_locust.client.record import COLUMN_INDEX, ErrorKind, row_float, row_text
from llm_locust.jsonsafe import json_safe
from llm_locust.live.sketch import LogHistogram

BUCKET_S = 2.0
"""Width of one time-series bucket, s (the view refreshes at this period)."""
WINDOW_BUCKETS = 5
"""Buckets in a rolling window: 5 x 2 s = the last 10 s, like Locust's "current" figures."""
MAX_POINTS = 1800
"""Most recent points returned by :meth:`LiveRecords.series` (one hour at 2 s)."""

TABLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("name", "Name"),
    ("requests", "Requests"),
    ("failures", "Fails"),
    ("failures_by_kind", "Fails by kind"),
    ("ttft_p50_ms", "TTFT p50 ms"),
    ("ttft_p90_ms", "TTFT p90 ms"),
    ("ttft_p99_ms", "TTFT p99 ms"),
    ("tpot_p50_ms", "TPOT p50 ms"),
    ("tpot_p90_ms", "TPOT p90 ms"),
    ("itl_p99_ms", "ITL p99 ms"),
    ("decode_tps_p50", "Decode tok/s p50"),
    ("output_tps", "Output tok/s"),
    ("mean_output_tokens", "Mean output tokens"),
)
"""(key, title) of the live table's columns, in order."""

AGGREGATED = "Aggregated"
"""Name of the all-requests row (Locust's own spelling)."""

try:
    from llm_locust.analysis.perrequest.itl import request_itl
except ImportError:  # pragma: no cover - an llm_locust/analysis/ without the ITL definition: the column stays empty
    request_itl = None  # type: ignore[assignment]  # read only behind _HAVE_ITL

_HAVE_ITL = request_itl is not None and "token_times_us" in COLUMN_INDEX  # False: no per-event times


@dataclass(slots=True)
class _Bucket:
    """Aggregates of the requests completed in one bucket (successes only in ``ttft_ms``)."""

    ttft_ms: list[float] = field(default_factory=list)
    ok: int = 0
    output_tokens: float = 0.0
    errors: Counter = field(default_factory=Counter)
    inflight_s: float = 0.0  # integral of the in-flight count over the bucket, request-seconds


def _percentile(values: np.ndarray, q: float) -> float:
    """Linear-interpolation percentile (pandas' and analysis' default); NaN when empty."""
    values = values[np.isfinite(values)]
    return float(np.percentile(values, q)) if len(values) else math.nan


class LiveRecords:
    """Every request record of the run, for the live table and time series.

    Parameters
    ----------
    bucket_s : float, default :data:`BUCKET_S`
        Time-series bucket width, s.
    window_buckets : int, default :data:`WINDOW_BUCKETS`
        Buckets per rolling window.
    """

    def __init__(self, *, bucket_s: float = BUCKET_S, window_buckets: int = WINDOW_BUCKETS) -> None:
        self.bucket_s = float(bucket_s)
        self.window_buckets = int(window_buckets)
        self.t0_s: float | None = None
        self._names: dict[str, int] = {}
        self._kinds: dict[str, int] = {kind.value: i for i, kind in enumerate(ErrorKind)}
        self._t_start_s = array("d")
        self._ttft_ms = array("d")
        self._e2e_ms = array("d")
        self._output_tokens = array("d")
        self._scheduled_s = array("d")  # a request-rate run's planned send (NaN otherwise)
        self._name = array("i")
        self._kind = array("i")
        self._buckets: dict[int, _Bucket] = {}
        self._table_from = 0  # first row counted in the table (moves on Locust's "reset stats")
        self._frame: tuple[int, pd.DataFrame] | None = None
        self._itl: dict[str, LogHistogram] = {}  # per name, since the table's start; AGGREGATED too
        self._points: dict[int, tuple] = {}  # computed series points, valid below _dirty_from
        self._dirty_from = 0  # lowest bucket changed since the points were computed

    def __len__(self) -> int:
        return len(self._t_start_s)

    def start(self, t0_s: float) -> None:
        """Set the origin of the time grid (wall clock, Unix s), unless records already set it."""
        if self.t0_s is None:
            self.t0_s = float(t0_s)

    def reset_table(self) -> None:
        """Start the per-name table afresh (Locust's "reset stats"); the time series are kept."""
        self._table_from = len(self)
        self._itl = {}

    def add_rows(self, rows: list[tuple]) -> None:
        """Add a batch of ``requests.csv`` rows (:data:`~llm_locust.client.record.CSV_COLUMNS` order)."""
        for row in rows:
            self._add(row)
        if _HAVE_ITL:
            self._add_itl(rows)

    def _add(self, row: tuple) -> None:
        t_start_s = row_float(row, "t_start_s")
        e2e_ms = row_float(row, "e2e_ms")
        ttft_ms = row_float(row, "ttft_ms")
        tokens = row_float(row, "output_tokens")
        kind = row_text(row, "error_kind")
        name = row_text(row, "name")
        if self.t0_s is None:
            self.t0_s = t_start_s
        self._t_start_s.append(t_start_s)
        self._ttft_ms.append(ttft_ms)
        self._e2e_ms.append(e2e_ms)
        self._output_tokens.append(tokens)
        self._scheduled_s.append(row_float(row, "scheduled_s"))
        self._name.append(self._names.setdefault(name, len(self._names)))
        self._kind.append(self._kinds.setdefault(kind, len(self._kinds)))
        t_end_s = t_start_s + (0.0 if math.isnan(e2e_ms) else e2e_ms / 1000.0)
        bucket = self._bucket(self._index(t_end_s))
        if kind:
            bucket.errors[kind] += 1
        else:
            bucket.ok += 1
            bucket.output_tokens += 0.0 if math.isnan(tokens) else tokens
            if not math.isnan(ttft_ms):
                bucket.ttft_ms.append(ttft_ms)
        self._add_inflight(t_start_s, t_end_s)

    def _add_itl(self, rows: list[tuple]) -> None:
        """Per-token ITL (:func:`llm_locust.analysis.perrequest.itl.request_itl`) of the batch's successes, into the
        per-name sketches (:mod:`llm_locust.live.sketch`)."""
        per_name: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {}
        for row in rows:
            if row_text(row, "error_kind"):
                continue
            values, weights = request_itl(
                row_float(row, "ttft_ms"),
                row_float(row, "e2e_ms"),
                row_float(row, "output_tokens"),
                row_text(row, "token_times_us"),
                row_text(row, "event_tokens"),
            )
            if len(values):
                bucket = per_name.setdefault(row_text(row, "name"), ([], []))
                bucket[0].append(values)
                bucket[1].append(weights)
        for name, (value_parts, weight_parts) in per_name.items():
            values, weights = np.concatenate(value_parts), np.concatenate(weight_parts)
            for key in (name, AGGREGATED):
                sketch = self._itl.get(key)
                if sketch is None:
                    sketch = self._itl[key] = LogHistogram()
                sketch.add_many(values, weights)

    def _index(self, t_s: float) -> int:
        assert self.t0_s is not None  # set by start() or the first record (_add), before any index
        return max(0, int((t_s - self.t0_s) // self.bucket_s))

    def _bucket(self, index: int) -> _Bucket:
        self._dirty_from = min(self._dirty_from, index)
        bucket = self._buckets.get(index)
        if bucket is None:
            bucket = self._buckets[index] = _Bucket()
        return bucket

    def _add_inflight(self, t_start_s: float, t_end_s: float) -> None:
        """Add the request's overlap with each bucket it spans (exact in-flight integral)."""
        first, last = self._index(t_start_s), self._index(t_end_s)
        assert self.t0_s is not None  # (_index holds it)
        for index in range(first, last + 1):
            lo = self.t0_s + index * self.bucket_s
            overlap = min(t_end_s, lo + self.bucket_s) - max(t_start_s, lo)
            if overlap > 0:
                self._bucket(index).inflight_s += overlap

    # ---- per-name table -------------------------------------------------------------------

    def requests_frame(self) -> pd.DataFrame:
        """All records as a frame with :func:`llm_locust.analysis.perrequest.metrics.with_request_metrics` columns.

        Columns ``name``, ``t_start_s``, ``ttft_ms``, ``e2e_ms``, ``output_tokens``,
        ``scheduled_s`` (float64; NaN outside a request-rate run) and ``error_kind`` ("" for a
        success), plus the derived ``ok``, ``t_end_s``, ``tpot_ms``, ``decode_tps`` and the
        schedule's ``send_lag_ms``, ``ttft_from_schedule_ms``, ``e2e_from_schedule_ms``. Rebuilt
        only when records arrived since the last call.
        """
        if self._frame is not None and self._frame[0] == len(self):
            return self._frame[1]
        names = np.array(list(self._names), dtype=object)
        kinds = np.array(list(self._kinds), dtype=object)
        frame = pd.DataFrame(
            {
                "name": names[np.frombuffer(self._name, dtype=np.int32)] if len(self) else [],
                "t_start_s": np.frombuffer(self._t_start_s, dtype=float).copy(),
                "ttft_ms": np.frombuffer(self._ttft_ms, dtype=float).copy(),
                "e2e_ms": np.frombuffer(self._e2e_ms, dtype=float).copy(),
                "output_tokens": np.frombuffer(self._output_tokens, dtype=float).copy(),
                "scheduled_s": np.frombuffer(self._scheduled_s, dtype=float).copy(),
                "error_kind": kinds[np.frombuffer(self._kind, dtype=np.int32)] if len(self) else [],
            }
        )
        frame = with_request_metrics(frame.astype({"name": str, "error_kind": str}))
        self._frame = (len(self), frame)
        return frame

    def table(self, *, horizon_s: float) -> list[dict]:
        """The live table: one row per request name, then :data:`AGGREGATED`.

        Counts and percentiles are over every record since the start (or the last
        :meth:`reset_table`). ``requests`` counts successes and failures, as Locust does;
        ``failures_by_kind`` reads ``"http_429: 3, stall_timeout: 1"``. TTFT, TPOT (``(e2e -
        ttft) / (output_tokens - 1)``), decode rate (``1000 / TPOT``, tokens/s) and mean output
        tokens are over successes only. ``output_tps`` is the output tokens of successes completed
        in the last :data:`WINDOW_BUCKETS` x :data:`BUCKET_S` seconds up to ``horizon_s``, per s.
        ``itl_p99_ms`` is the p99 of the per-token inter-token latency of every token of every
        success (:func:`llm_locust.analysis.perrequest.itl.request_itl`, held in a 1 %-accurate mergeable sketch) when
        records carry per-event times, else None. Values not applicable are None.

        Parameters
        ----------
        horizon_s : float
            Wall clock (Unix s) up to which every completed request has arrived.
        """
        frame = self.requests_frame().iloc[self._table_from :]
        window_s = self.window_buckets * self.bucket_s
        rows = [self._row(name, group, horizon_s, window_s) for name, group in frame.groupby("name", sort=True)]
        rows.append(self._row(AGGREGATED, frame, horizon_s, window_s))
        for row in rows:
            sketch = self._itl.get(row["name"])
            if sketch is not None:
                row["itl_p99_ms"] = _clean({"v": sketch.quantile(0.99)})["v"]
        return rows

    @staticmethod
    def _row(name: str, group: pd.DataFrame, horizon_s: float, window_s: float) -> dict:
        ok = group[group["ok"]]
        kinds = group.loc[~group["ok"], "error_kind"]
        failed = kinds[kinds != "interrupted"].value_counts().sort_index()  # cut by the stop: no failure
        recent = ok[(ok["t_end_s"] > horizon_s - window_s) & (ok["t_end_s"] <= horizon_s)]
        ttft, tpot = ok["ttft_ms"].to_numpy(float), ok["tpot_ms"].to_numpy(float)
        return _clean(
            {
                "name": name,
                "requests": int(len(group)),
                "failures": int(failed.sum()),
                "failures_by_kind": ", ".join(f"{kind}: {n}" for kind, n in failed.items()),
                "ttft_p50_ms": _percentile(ttft, 50),
                "ttft_p90_ms": _percentile(ttft, 90),
                "ttft_p99_ms": _percentile(ttft, 99),
                "tpot_p50_ms": _percentile(tpot, 50),
                "tpot_p90_ms": _percentile(tpot, 90),
                "itl_p99_ms": math.nan,
                "decode_tps_p50": _percentile(ok["decode_tps"].to_numpy(float), 50),
                "output_tps": float(recent["output_tokens"].sum()) / window_s if len(group) else math.nan,
                "mean_output_tokens": float(ok["output_tokens"].mean()) if len(ok) else math.nan,
            }
        )

    # ---- time series ----------------------------------------------------------------------

    def series(self, *, horizon_s: float, settle_s: float = 0.0) -> dict:
        """Rolling-window time series up to ``horizon_s``, one point per bucket end.

        Point ``k`` sits at ``t_s = t0_s + (k + 1) * bucket_s`` and covers the window
        ``(t_s - W, t_s]`` (``W = window_buckets * bucket_s``, shorter at the start):

        - ``ttft_p50_ms``, ``ttft_p95_ms``: percentiles of the TTFT of successes completed in
          the window (None when none);
        - ``output_tps``, ``request_rps``: output tokens / successes completed in the window, per s;
        - ``errors_per_s``: ``{kind: [...]}`` failures completed in the window per s, by kind;
          ``error_rate_per_s`` all kinds together;
        - ``client_inflight``: time-average number of requests in flight over bucket ``k``
          (exact integral, as :func:`llm_locust.analysis.perrequest.metrics.mean_inflight`), None for buckets ending
          after ``horizon_s - settle_s`` (requests still open may yet add to them).

        Only buckets ending at or before ``horizon_s`` are returned (later ones still miss
        records), at most :data:`MAX_POINTS` of them, the most recent.
        """
        empty: dict[str, Any] = {
            "t_s": [],
            "ttft_p50_ms": [],
            "ttft_p95_ms": [],
            "output_tps": [],
            "request_rps": [],
            "error_rate_per_s": [],
            "errors_per_s": {},
            "client_inflight": [],
        }
        if self.t0_s is None or horizon_s <= self.t0_s:
            return empty
        n_points = int((horizon_s - self.t0_s) // self.bucket_s)
        first = max(0, n_points - MAX_POINTS)
        for k in [k for k in self._points if k >= self._dirty_from or k < first]:  # a change in bucket b
            del self._points[k]  # moves points b, b + 1, ...; points before `first` are never shown again
        self._dirty_from = max(self._dirty_from, n_points)
        points = [self._points.get(k) or self._point(k) for k in range(first, n_points)]
        kinds = sorted({kind for point in points for kind in point[5]})
        out = {**empty, "errors_per_s": {kind: [] for kind in kinds}}
        for k, (ttft_p50, ttft_p95, output_tps, request_rps, inflight, errors) in zip(range(first, n_points), points):
            t_s = self.t0_s + (k + 1) * self.bucket_s
            length_s = (min(k, self.window_buckets - 1) + 1) * self.bucket_s
            out["t_s"].append(t_s)
            out["ttft_p50_ms"].append(ttft_p50)
            out["ttft_p95_ms"].append(ttft_p95)
            out["output_tps"].append(output_tps)
            out["request_rps"].append(request_rps)
            out["error_rate_per_s"].append(sum(errors.values()) / length_s)
            for kind in kinds:
                out["errors_per_s"][kind].append(errors.get(kind, 0) / length_s)
            out["client_inflight"].append(inflight if t_s <= horizon_s - settle_s else None)
        return out

    def _point(self, k: int) -> tuple:
        """Point ``k`` of :meth:`series` (cached until a record changes one of its buckets)."""
        blank = _Bucket()
        window = [self._buckets.get(j, blank) for j in range(max(0, k - self.window_buckets + 1), k + 1)]
        length_s = len(window) * self.bucket_s
        ttft = np.fromiter((v for b in window for v in b.ttft_ms), dtype=float)
        errors: Counter[str] = Counter()
        for bucket in window:
            errors.update(bucket.errors)
        point = (
            json_safe(_percentile(ttft, 50)),
            json_safe(_percentile(ttft, 95)),
            sum(b.output_tokens for b in window) / length_s,
            sum(b.ok for b in window) / length_s,
            self._buckets.get(k, blank).inflight_s / self.bucket_s,
            dict(errors),
        )
        self._points[k] = point
        return point

    def recent_max_e2e_s(self, *, since_s: float) -> float:
        """Longest E2E among requests completed after ``since_s`` (wall clock), s; 0 if none."""
        if not len(self):
            return 0.0
        start = np.frombuffer(self._t_start_s, dtype=float)
        e2e = np.nan_to_num(np.frombuffer(self._e2e_ms, dtype=float)) / 1000.0
        recent = e2e[start + e2e > since_s]
        return float(recent.max()) if len(recent) else 0.0


def _clean(row: dict) -> dict:
    """NaN/inf -> None (JSON null, an empty cell); floats rounded for display."""
    out = {}
    for key, value in row.items():
        if isinstance(value, float):
            value = json_safe(round(value, 2))
        out[key] = value
    return out
