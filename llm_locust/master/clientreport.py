"""The end-of-run client summary on the master: ``client_report.json`` and the console table.

Fed with the same row batches that become ``requests.csv`` (a sink on the run's
:class:`~llm_locust.master.shipping.RecordShipper`), so it covers exactly the requests Locust counted,
from every worker. Each request keeps a few numbers in compact arrays; every percentile is taken
over those raw values of all workers together (``numpy.percentile``, linear interpolation, as
``llm_locust/analysis/`` does) — never averaged across workers, never read from Locust's own
two-significant-digit response-time buckets. Pooled per-token ITL and inter-chunk latency are
accumulated as the rows arrive (:class:`llm_locust.analysis.perrequest.itlpool.PooledItl`: exact histograms of the
whole-microsecond gaps, mergeable block by block; the quantiles are those of the raw values), so
the end of a run only summarises: ``requests.csv`` is never read back.

Worker CPU: each worker adds its current CPU usage (Locust's own ``current_cpu_usage``, percent
of one core) to every report it sends the master; the peak per worker is kept.

Per worker (``workers``, :mod:`llm_locust.analysis.perstep.workers`): requests ok/failed, first and last record
counted from the rows as they arrive (:class:`llm_locust.analysis.perstep.workers.WorkerCounts`: the rows that
become ``requests.csv``), CPU mean/max read from ``client_load.csv`` and the spells it was
missing from run.json ``workers_missing`` at the end.

Faults: ``outages`` (the server unreachable: runs of connection-level failures holding one that
never reached it - streams cut after the server answered join a run but make none - see
:func:`llm_locust.analysis.perrequest.faults.outages`), ``backoff`` (the pauses users took after a refused connection,
a 429 or a 5xx: ``llm_locust.client.backoff``), ``interrupted`` requests (in flight when the test stopped) and ``workers_lost``
(workers the master stopped hearing from, :mod:`llm_locust.master.workerloss`) are counted and
printed.
"""

from __future__ import annotations

import json
import logging
import math
import time
from array import array
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from llm_locust.analysis.perrequest.faults import CONNECTION_KINDS, connection_failures, outages
from llm_locust.analysis.perstep.workers import WorkerCounts
from llm_locust.client.load import CPU_KEY
from llm_locust.client.record import COLUMN_INDEX
from llm_locust.jsonsafe import json_safe
from llm_locust.master.workerloss import shipping_interval_s

if TYPE_CHECKING:
    from llm_locust.analysis.perrequest.itlpool import PooledItl

logger = logging.getLogger(__name__)

INTERRUPTED = "interrupted"
"""``error_kind`` of a request the test's stop cut (Ctrl-C, SIGTERM, ``--timeout-s``): no failure."""

_LATENCIES = ("ttft_ms", "first_answer_ms", "tpot_ms", "e2e_ms", "conn_wait_ms")
_KEPT = ("ttft_ms", "first_answer_ms", "e2e_ms", "conn_wait_ms")
_T_START, _OUTPUT_TOKENS, _ERROR_KIND, _WORKER_ID, _TOKEN_TIMES, _EVENT_TOKENS = (
    COLUMN_INDEX[name]
    for name in ("t_start_s", "output_tokens", "error_kind", "worker_id", "token_times_us", "event_tokens")
)
ITL_BLOCK_ROWS = 8192
"""Successful rows whose token times wait before they join the pooled ITL: numpy's cost per call
spread over many rows, and at most this many rows' times (~4 MB at 64 events) held."""


def _floats(cells: tuple) -> array:
    """One column of rows as doubles: at C speed when every cell is a number, else each cell by
    the rule of :func:`~llm_locust.client.record.row_float` (None, "" and text are NaN)."""
    try:
        return array("d", cells)
    except TypeError:
        return array("d", (_float(cell) for cell in cells))


def _float(cell) -> float:
    if cell is None or cell == "":
        return math.nan
    try:
        return float(cell)
    except (TypeError, ValueError):
        return math.nan


def stats(values: np.ndarray) -> dict[str, float | int]:
    """``count``, ``mean``, ``p50``, ``p95``, ``p99``, ``max`` of the non-NaN values (NaN if none).

    >>> stats(np.array([1.0, 2.0, 3.0, np.nan]))["p50"]
    2.0
    """
    values = values[~np.isnan(values)]
    if not len(values):
        return {"count": 0, "mean": math.nan, "p50": math.nan, "p95": math.nan, "p99": math.nan, "max": math.nan}
    p50, p95, p99 = np.percentile(values, [50, 95, 99])
    return {"count": int(len(values)), "mean": float(values.mean()), "p50": float(p50), "p95": float(p95),
            "p99": float(p99), "max": float(values.max())}  # fmt: skip


class ClientReport:
    """Raw per-request values of a run, and their summary.

    Parameters
    ----------
    environment : locust.env.Environment
        The master's (or a standalone process's); its ``worker_report`` events carry CPU usage.
    """

    def __init__(self, environment) -> None:
        self.environment = environment
        self.t_start_s = array("d")
        self.values = {name: array("d") for name in _KEPT}
        self.output_tokens = array("d")
        self.ok = array("b")
        self.unreachable = array("b")  # 1: never reached the server, 2: cut after its answer, 0: neither
        self.failures: Counter = Counter()
        self.failures_by_status: Counter = Counter()
        self.interrupted = 0
        self.ignore_eos_violations = 0
        self.resent = 0
        self.backoff_waits: Counter = Counter()
        self.backoff_s = 0.0
        self.cpu_peak: dict[str, float] = {}
        self.worker_counts = WorkerCounts()
        self._itl: PooledItl | None = None  # made with the first block
        self._itl_pending: list[tuple] = []
        self._itl_pending_rows = 0
        self._itl_error: str | None = None
        environment.events.worker_report.add_listener(self._on_worker_report)

    def add_rows(self, rows: list[tuple]) -> None:
        """Sink for row batches (:meth:`RequestRecord.to_row` tuples).

        Column by column (one C-level pass per column when its cells are all numbers, the rows
        as the workers ship them); a column holding ``None`` or text goes cell by cell. The
        per-worker counts are updated here, and the successful rows' token times wait for the
        pooled ITL (:meth:`_pool_itl`, a block of :data:`ITL_BLOCK_ROWS` at a time).
        """
        if not rows:
            return
        columns = list(zip(*rows))
        start = _floats(columns[_T_START])
        self.t_start_s.extend(start)
        new = {name: _floats(columns[COLUMN_INDEX[name]]) for name in self.values}
        for name, values in self.values.items():
            values.extend(new[name])
        tokens = _floats(columns[_OUTPUT_TOKENS])
        self.output_tokens.extend(tokens)
        kinds = ["" if kind is None else str(kind) for kind in columns[_ERROR_KIND]]
        self.ok.extend(0 if kind else 1 for kind in kinds)
        if any(kind in CONNECTION_KINDS for kind in kinds):
            lost, cut = connection_failures(kinds, _floats(columns[COLUMN_INDEX["status_code"]]))
            self.unreachable.extend((lost.astype(np.int8) + 2 * cut.astype(np.int8)).tolist())
        else:
            self.unreachable.extend(bytes(len(kinds)))
        unanswered = np.fromiter(map(bool, kinds), dtype=bool, count=len(kinds))  # any error_kind
        failed = unanswered & np.fromiter((kind != INTERRUPTED for kind in kinds), dtype=bool, count=len(kinds))
        e2e = np.frombuffer(new["e2e_ms"], dtype=float)
        self.worker_counts.add(columns[_WORKER_ID], ~unanswered, failed, np.frombuffer(start, dtype=float), e2e)
        if self._itl_error is None and not unanswered.all():
            ok = ~unanswered
            times: Sequence = columns[_TOKEN_TIMES]
            events: Sequence = columns[_EVENT_TOKENS]
            if unanswered.any():
                times = [cell for cell, bad in zip(times, unanswered) if not bad]
                events = [cell for cell, bad in zip(events, unanswered) if not bad]
            self._itl_pending.append((np.frombuffer(new["ttft_ms"], dtype=float)[ok], e2e[ok],
                                      np.frombuffer(tokens, dtype=float)[ok], times, events))  # fmt: skip
            self._itl_pending_rows += len(times)
            if self._itl_pending_rows >= ITL_BLOCK_ROWS:
                self._pool_itl()
        if unanswered.any():
            statuses = _floats(columns[COLUMN_INDEX["status_code"]])
            for kind, status in zip(kinds, statuses):
                if kind == INTERRUPTED:  # cut by the test's stop: no failure (counted on its own)
                    self.interrupted += 1
                elif kind:
                    self.failures[kind] += 1
                    if status > 0:
                        self.failures_by_status[str(int(status))] += 1
        self.ignore_eos_violations += sum(1 for v in _floats(columns[COLUMN_INDEX["ignore_eos_violated"]]) if v > 0)
        self.resent += sum(1 for v in _floats(columns[COLUMN_INDEX["resent"]]) if v > 0)
        for kind, pause_ms in zip(kinds, _floats(columns[COLUMN_INDEX["backoff_ms"]])):
            if pause_ms > 0:
                self.backoff_waits[kind] += 1
                self.backoff_s += pause_ms / 1000.0

    def _pool_itl(self) -> None:
        """Add the waiting successful rows to the pooled ITL (:class:`llm_locust.analysis.perrequest.itlpool.PooledItl`,
        exact histograms). A cell that is no number (never from a worker of this version) stops
        the pooling: the report then says why instead of giving figures of part of the rows."""
        if not self._itl_pending or self._itl_error is not None:
            self._itl_pending, self._itl_pending_rows = [], 0
            return
        import pyarrow as pa

        from llm_locust.analysis.perrequest.itlpool import PooledItl

        pending, self._itl_pending, self._itl_pending_rows = self._itl_pending, [], 0
        if self._itl is None:
            self._itl = PooledItl()
        try:
            ttft, e2e, tokens = (np.concatenate([part[i] for part in pending]) for i in range(3))
            self._itl.add_columns(
                ttft,
                e2e,
                tokens,
                [cell for part in pending for cell in part[3]],
                [cell for part in pending for cell in part[4]],
            )
        except (ValueError, TypeError, pa.ArrowException) as exc:
            self._itl_error = f"{type(exc).__name__}: {exc}"
            logger.warning("client_report.json without itl_ms: %s", self._itl_error)

    def itl_summary(self) -> dict[str, float]:
        """The pooled ITL and inter-chunk figures of every successful row added
        (:meth:`llm_locust.analysis.perrequest.itlpool.PooledItl.summary`: exact quantiles of the raw values).

        Raises
        ------
        ValueError
            When a row's token times held a cell that is no number (the message names it).
        """
        self._pool_itl()
        if self._itl_error is not None:
            raise ValueError(self._itl_error)
        if self._itl is None:
            from llm_locust.analysis.perrequest.itlpool import PooledItl

            self._itl = PooledItl()
        return self._itl.summary()

    def _on_worker_report(self, client_id, data) -> None:
        cpu = data.get(CPU_KEY)
        if cpu is not None:
            self.cpu_peak[client_id] = max(self.cpu_peak.get(client_id, 0.0), float(cpu))

    def summary(self, requests_csv: Path | None = None, *, workers_lost: list[dict] | None = None) -> dict:
        """The report as a JSON-ready dict (NaN where a figure does not apply).

        Latency figures (ms) and decode rates are over the successful requests;
        ``failures`` (and ``failures_by_kind`` / ``_by_status``) leave out the ``interrupted``
        requests, cut by the test's stop, no failure of the server: ``requests`` = ``successes`` +
        ``failures`` + ``interrupted``. ``achieved_concurrency`` is the time-average number of requests in flight (all of them)
        between the first send and the last end: ``sum(e2e) / (last end - first start)``.
        ``outages``: :func:`llm_locust.analysis.perrequest.faults.outages` of the requests; ``backoff``: the pauses
        users took between requests (``waits``, ``total_s``, ``waits_by_kind``: the failure
        kind that led to each; no pause is a request); ``interrupted``: requests in flight when the
        test stopped; ``workers_lost``: as given (run.json's entries, plus ``last_report_s``),
        each with ``unshipped_s``, the span of its requests that never reached the master.
        """
        import pandas as pd  # here, not at the top: the master imports this module at start-up

        from llm_locust.analysis.perrequest.metrics import decode_tps, tpot_ms

        ok = np.frombuffer(self.ok, dtype=np.int8).astype(bool) if len(self.ok) else np.zeros(0, bool)
        kept = {name: np.frombuffer(values, dtype=float) if len(values) else np.zeros(0)
                for name, values in self.values.items()}  # fmt: skip
        start = np.frombuffer(self.t_start_s, dtype=float) if len(self.t_start_s) else np.zeros(0)
        e2e = kept["e2e_ms"]
        end = start + np.nan_to_num(e2e) / 1000.0
        codes = np.frombuffer(self.unreachable, dtype=np.int8) if len(self.unreachable) else np.zeros(0, np.int8)
        window_s = float(end.max() - start.min()) if len(start) else math.nan
        tokens = np.frombuffer(self.output_tokens, dtype=float) if len(self.output_tokens) else np.zeros(0)
        tpot_all = tpot_ms(pd.DataFrame({"ttft_ms": kept["ttft_ms"], "e2e_ms": e2e, "output_tokens": tokens}))
        arrays = {name: tpot_all.to_numpy() if name == "tpot_ms" else kept[name] for name in _LATENCIES}
        decode = decode_tps(tpot_all[ok]).to_numpy()
        report = {
            "requests": int(len(ok)),
            "successes": int(ok.sum()),
            "failures": int((~ok).sum()) - self.interrupted,
            "failures_by_kind": dict(sorted(self.failures.items())),
            "failures_by_status": dict(sorted(self.failures_by_status.items())),
            "ignore_eos_violations": self.ignore_eos_violations,
            "resent_requests": self.resent,
            "latency_ms": {name.removesuffix("_ms"): stats(values[ok]) for name, values in arrays.items()},
            "decode_tps": stats(decode),
            "output_tokens": float(np.nansum(tokens[ok])) if len(tokens) else 0.0,
            "window_s": window_s,
            "output_tps": float(np.nansum(tokens[ok]) / window_s) if window_s and window_s > 0 else math.nan,
            "achieved_concurrency": float(np.nansum(e2e) / 1000.0 / window_s)
            if window_s and window_s > 0
            else math.nan,
            "worker_cpu_peak_percent": dict(sorted(self.cpu_peak.items())),
            "interrupted": self.interrupted,
            "outages": outages(end, codes == 1, codes == 2),
            "backoff": {
                "waits": int(sum(self.backoff_waits.values())),
                "total_s": self.backoff_s,
                "waits_by_kind": dict(sorted(self.backoff_waits.items())),
            },
            "workers_lost": [_loss_entry(loss) for loss in workers_lost or []],
            "percentiles": "linear interpolation over the raw per-request values of all workers",
        }
        if requests_csv is not None and Path(requests_csv).is_file():
            report.update(self._from_run_dir(Path(requests_csv).parent, end))
        return report

    def _from_run_dir(self, run_dir: Path, end_s: np.ndarray) -> dict:
        """``itl_ms`` (pooled per-token ITL and inter-chunk latency, :meth:`itl_summary`) and
        ``workers`` (:mod:`llm_locust.analysis.perstep.workers`, by worker id: the counts of the rows added, the CPU
        of ``client_load.csv``, the spells of ``run.json``). Either one that fails gives
        ``files_error`` (its message) instead of itself: the rest of the report stands."""
        from llm_locust.analysis.perstep.workers import missing_intervals, worker_records, worker_table
        from llm_locust.analysis.rundir.reader import read_meta_and_load

        out: dict = {}
        errors = []
        try:
            out["itl_ms"] = self.itl_summary()
        except ValueError as exc:
            errors.append(f"itl_ms: {exc}")
        try:
            meta, load = read_meta_and_load(run_dir)
            # a run without ended_at_s (not the master's: it writes it before the report) ends with its last record
            run_end_s = meta.get("ended_at_s")
            run_end_s = (
                float(run_end_s) if run_end_s is not None else float(np.nanmax(end_s, initial=meta["started_at_s"]))
            )
            table = worker_table(self.worker_counts, load, meta, run_end_s)
            out["workers"] = worker_records(table, missing_intervals(meta, run_end_s))
        except Exception as exc:  # a report without these beats no report
            errors.append(f"{type(exc).__name__}: {exc}")
        if errors:
            logger.warning("client_report.json without part of itl_ms and workers: %s", "; ".join(errors))
            out["files_error"] = "; ".join(errors)
        return out

    def write(self, path: Path, requests_csv: Path | None = None, *, workers_lost: list[dict] | None = None) -> dict:
        """Write :meth:`summary` to ``path`` (NaN as null) and return it."""
        report = self.summary(requests_csv, workers_lost=workers_lost)
        path.write_text(json.dumps(json_safe(report), indent=2) + "\n")
        return report


def _loss_entry(loss: dict) -> dict:
    """A lost worker's entry in the report: run.json's fields, when its last report came, and how
    long a span of its requests never reached the master (from its last report to the loss)."""
    entry = dict(loss)
    last_report = entry.get("last_report_s")
    entry["unshipped_s"] = max(0.0, entry["lost_at_s"] - last_report) if last_report is not None else math.nan
    return entry


def _clock(t_s: float | None) -> str:
    """Local wall-clock time of a Unix instant, to the tenth of a second ("-" for none)."""
    if t_s is None or t_s != t_s:
        return "-"
    return time.strftime("%H:%M:%S", time.localtime(t_s)) + f".{int(t_s * 10) % 10}"


def _fault_lines(report: dict) -> list[str]:
    """Console lines for the outages, the interrupted requests and the lost workers (none if none)."""
    lines = []
    spells = report.get("outages") or []
    if spells:
        failed = sum(spell["requests"] for spell in spells)
        lines.append(
            f"server unreachable: {len(spells)} spell(s), {failed} requests failed at the connection level "
            "(connection_error/connect_timeout; users paused 0.1-2 s between tries)"
        )
        for spell in sorted(spells, key=lambda spell: -spell["requests"])[:5]:
            lines.append(
                f"  {_clock(spell['start_s'])} - {_clock(spell['end_s'])}  {spell['span_s']:.1f} s  "
                f"{spell['requests']} requests"
            )
    backoff = report.get("backoff") or {}
    if backoff.get("waits"):
        kinds = " ".join(f"{k}:{n}" for k, n in (backoff.get("waits_by_kind") or {}).items())
        lines.append(
            f"backed off: {backoff['waits']} pauses between requests ({kinds}), {backoff['total_s']:.1f} s in "
            "total (users paused after a refused connection, a 429 or a 5xx; no request was sent meanwhile)"
        )
    if report.get("interrupted"):
        lines.append(
            f"interrupted: {report['interrupted']} requests were in flight when the test stopped "
            "(recorded with the tokens they had received; in no success statistic, and not failures)"
        )
    for loss in report.get("workers_lost") or []:
        unshipped = loss.get("unshipped_s")
        span = f"{unshipped:.1f} s" if unshipped is not None and unshipped == unshipped else "an unknown span"
        lines.append(
            f"worker lost: {loss['worker']} last heard from at {_clock(loss['lost_at_s'])}; the requests it "
            f"sent after its last report ({_clock(loss.get('last_report_s'))}, {span} before) are the only "
            f"loss, in neither requests.csv nor Locust's count (a worker ships every "
            f"{shipping_interval_s():.0f} s); its users went to the workers left"
        )
    for worker in report.get("workers") or []:
        for spell in worker.get("missing") or []:
            if spell.get("until") == "back":
                lines.append(
                    f"worker missing: {worker['worker']} sent no heartbeat from {_clock(spell['from_s'])} to "
                    f"{_clock(spell['to_s'])} ({spell['missing_s']:.1f} s), then came back; the steps it "
                    "overlaps fell short of their concurrency"
                )
    return lines


def worker_lines(report: dict, started_at_s: float) -> list[str]:
    """The per-worker table of a report (``workers``), only when it has more than one worker;
    times since ``started_at_s`` (Unix s)."""
    from llm_locust.analysis.perstep.workers import WORKER_HEADER, worker_text_rows

    workers = report.get("workers") or []
    if len(workers) < 2:
        return []
    rows = [WORKER_HEADER, *worker_text_rows(workers, started_at_s)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(WORKER_HEADER))]
    return ["per worker (requests from requests.csv, CPU % of one core from client_load.csv):"] + [
        "  " + "  ".join(cell.rjust(width) if i >= 2 else cell.ljust(width) for i, (cell, width) in
                         enumerate(zip(row, widths))).rstrip()
        for row in rows
    ]  # fmt: skip


def format_summary(report: dict, started_at_s: float | None = None) -> str:
    """The console table of a report (what the master prints at the end of a run); with
    ``started_at_s`` (the run's start, Unix s) also the per-worker table (:func:`worker_lines`)."""
    lines = [
        f"LLM requests: {report['requests']}  ok {report['successes']}  failed {report['failures']}"
        + ("  " + " ".join(f"{k}:{v}" for k, v in report["failures_by_kind"].items()) if report["failures"] else "")
    ]
    lines.append(f"{'metric':<14}{'count':>7}{'mean':>10}{'p50':>10}{'p95':>10}{'p99':>10}{'max':>10}")
    for name, s in report["latency_ms"].items():
        if s["count"]:
            figures = "".join(f"{s[k]:>10.1f}" for k in ("mean", "p50", "p95", "p99", "max"))
            lines.append(f"{name + ' ms':<14}{s['count']:>7}{figures}")
    lines.append(f"output tok/s {report['output_tps']:.1f}  achieved concurrency {report['achieved_concurrency']:.2f}"
                 + (f"  ignore_eos violations {report['ignore_eos_violations']}" if report["ignore_eos_violations"] else "")
                 + (f"  resent after a closed keep-alive connection {report['resent_requests']}"
                    if report.get("resent_requests") else ""))  # fmt: skip
    lines += _fault_lines(report)
    if started_at_s is not None:
        lines += worker_lines(report, started_at_s)
    return "\n".join(lines)
