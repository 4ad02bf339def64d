"""The end-of-run client summary on the master: ``client_report.json`` and the console table.

Fed with the same row batches that become ``requests.csv`` (a sink on the run's
:class:`~llm_locust.shipping.RecordShipper`), so it covers exactly the requests Locust counted,
from every worker. Each request keeps a few numbers in compact arrays; every percentile is taken
over those raw values of all workers together (``numpy.percentile``, linear interpolation, as
``analysis/`` does) — never averaged across workers, never read from Locust's own
two-significant-digit response-time buckets. Pooled per-token ITL and inter-chunk latency are
computed from ``requests.csv`` itself (:func:`analysis.itl.itl_summary`).

Worker CPU: each worker adds its current CPU usage (Locust's own ``current_cpu_usage``, percent
of one core) to every report it sends the master; the peak per worker is kept.
"""

from __future__ import annotations

import json
import math
from array import array
from collections import Counter
from pathlib import Path

import numpy as np

from llm_locust.record import CSV_COLUMNS

CPU_KEY = "llm_cpu_percent"
"""Key of the worker's CPU usage inside its report to the master."""

_COL = {name: i for i, name in enumerate(CSV_COLUMNS)}
_LATENCIES = ("ttft_ms", "first_answer_ms", "tpot_ms", "e2e_ms", "conn_wait_ms")


def _float(value) -> float:
    try:
        return float(value)
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
        self.values = {name: array("d") for name in _LATENCIES}
        self.output_tokens = array("d")
        self.ok = array("b")
        self.failures: Counter = Counter()
        self.failures_by_status: Counter = Counter()
        self.ignore_eos_violations = 0
        self.resent = 0
        self.cpu_peak: dict[str, float] = {}
        environment.events.worker_report.add_listener(self._on_worker_report)

    def add_rows(self, rows: list[tuple]) -> None:
        """Sink for row batches (:meth:`RequestRecord.to_row` tuples)."""
        c = _COL
        for row in rows:
            e2e, ttft, tokens = _float(row[c["e2e_ms"]]), _float(row[c["ttft_ms"]]), _float(row[c["output_tokens"]])
            kind = row[c["error_kind"]] or ""
            self.t_start_s.append(_float(row[c["t_start_s"]]))
            self.values["e2e_ms"].append(e2e)
            self.values["ttft_ms"].append(ttft)
            self.values["first_answer_ms"].append(_float(row[c["first_answer_ms"]]))
            self.values["conn_wait_ms"].append(_float(row[c["conn_wait_ms"]]))
            self.values["tpot_ms"].append((e2e - ttft) / (tokens - 1) if tokens >= 2 else math.nan)
            self.output_tokens.append(tokens)
            self.ok.append(0 if kind else 1)
            if kind:
                self.failures[kind] += 1
                status = int(_float(row[c["status_code"]]) or 0)
                if status:
                    self.failures_by_status[str(status)] += 1
            if int(_float(row[c["ignore_eos_violated"]]) or 0):
                self.ignore_eos_violations += 1
            if int(_float(row[c["resent"]]) or 0):
                self.resent += 1

    def _on_worker_report(self, client_id, data) -> None:
        cpu = data.get(CPU_KEY)
        if cpu is not None:
            self.cpu_peak[client_id] = max(self.cpu_peak.get(client_id, 0.0), float(cpu))

    def summary(self, requests_csv: Path | None = None) -> dict:
        """The report as a JSON-ready dict (NaN where a figure does not apply).

        Latency figures (ms) and decode rates are over the successful requests;
        ``achieved_concurrency`` is the time-average number of requests in flight (all of them)
        between the first send and the last end: ``sum(e2e) / (last end - first start)``.
        """
        ok = np.frombuffer(self.ok, dtype=np.int8).astype(bool) if len(self.ok) else np.zeros(0, bool)
        arrays = {name: np.frombuffer(values, dtype=float) if len(values) else np.zeros(0)
                  for name, values in self.values.items()}  # fmt: skip
        start = np.frombuffer(self.t_start_s, dtype=float) if len(self.t_start_s) else np.zeros(0)
        e2e = arrays["e2e_ms"]
        end = start + np.nan_to_num(e2e) / 1000.0
        window_s = float(end.max() - start.min()) if len(start) else math.nan
        tokens = np.frombuffer(self.output_tokens, dtype=float) if len(self.output_tokens) else np.zeros(0)
        tpot = arrays["tpot_ms"][ok]
        report = {
            "requests": int(len(ok)),
            "successes": int(ok.sum()),
            "failures": int((~ok).sum()),
            "failures_by_kind": dict(sorted(self.failures.items())),
            "failures_by_status": dict(sorted(self.failures_by_status.items())),
            "ignore_eos_violations": self.ignore_eos_violations,
            "resent_requests": self.resent,
            "latency_ms": {name.removesuffix("_ms"): stats(values[ok]) for name, values in arrays.items()},
            "decode_tps": stats(1000.0 / tpot[tpot > 0]) if len(tpot) else stats(np.zeros(0)),
            "output_tokens": float(np.nansum(tokens[ok])) if len(tokens) else 0.0,
            "window_s": window_s,
            "output_tps": float(np.nansum(tokens[ok]) / window_s) if window_s and window_s > 0 else math.nan,
            "achieved_concurrency": float(np.nansum(e2e) / 1000.0 / window_s) if window_s and window_s > 0 else math.nan,
            "worker_cpu_peak_percent": dict(sorted(self.cpu_peak.items())),
            "percentiles": "linear interpolation over the raw per-request values of all workers",
        }
        if requests_csv is not None and Path(requests_csv).is_file():
            report["itl_ms"] = _itl_from_csv(Path(requests_csv).parent)
        return report

    def write(self, path: Path, requests_csv: Path | None = None) -> dict:
        """Write :meth:`summary` to ``path`` (NaN as null) and return it."""
        report = self.summary(requests_csv)
        path.write_text(json.dumps(_nan_to_none(report), indent=2) + "\n")
        return report


def _itl_from_csv(run_dir: Path) -> dict:
    from analysis.itl import itl_summary
    from analysis.rundir import load_run

    return itl_summary(load_run(run_dir).requests)


def _nan_to_none(value):
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _nan_to_none(v) for k, v in value.items()}
    return value


def format_summary(report: dict) -> str:
    """The console table of a report (what the master prints at the end of a run)."""
    lines = [f"LLM requests: {report['requests']}  ok {report['successes']}  failed {report['failures']}"
             + ("  " + " ".join(f"{k}:{v}" for k, v in report["failures_by_kind"].items()) if report["failures"] else "")]
    lines.append(f"{'metric':<14}{'count':>7}{'mean':>10}{'p50':>10}{'p95':>10}{'p99':>10}{'max':>10}")
    for name, s in report["latency_ms"].items():
        if s["count"]:
            figures = "".join(f"{s[k]:>10.1f}" for k in ("mean", "p50", "p95", "p99", "max"))
            lines.append(f"{name + ' ms':<14}{s['count']:>7}{figures}")
    lines.append(f"output tok/s {report['output_tps']:.1f}  achieved concurrency {report['achieved_concurrency']:.2f}"
                 + (f"  ignore_eos violations {report['ignore_eos_violations']}" if report["ignore_eos_violations"] else "")
                 + (f"  resent after a closed keep-alive connection {report['resent_requests']}"
                    if report.get("resent_requests") else ""))  # fmt: skip
    return "\n".join(lines)


def install_cpu_reporting(environment) -> None:
    """On a worker: add its CPU usage to every report it sends the master."""

    def add_cpu(client_id, data) -> None:
        data[CPU_KEY] = getattr(environment.runner, "current_cpu_usage", None)

    environment.events.report_to_master.add_listener(add_cpu)
