"""The master's end-of-run summary, on rows worked out by hand."""

from __future__ import annotations

import json
import math

import pytest
from locust.env import Environment

from llm_locust.clientreport import ClientReport, format_summary
from llm_locust.record import RequestRecord


def row(i, *, ttft, e2e, tokens, kind="", status=200, violated=0, start=1000.0):
    return RequestRecord(request_id=f"r{i}", worker_id="w", name="chat", t_start_s=start, ttft_ms=ttft, e2e_ms=e2e,
                         output_tokens=tokens, error_kind=kind, status_code=status,
                         ignore_eos_violated=violated).to_row()  # fmt: skip


def test_summary_by_hand(tmp_path):
    report = ClientReport(Environment())
    # two successes: TTFT 100 and 300 ms; TPOT (1100-100)/10 = 100 and (2300-300)/20 = 100 ms
    report.add_rows([row(0, ttft=100.0, e2e=1100.0, tokens=11, start=1000.0),
                     row(1, ttft=300.0, e2e=2300.0, tokens=21, start=1000.5, violated=1)])  # fmt: skip
    report.add_rows([row(2, ttft=math.nan, e2e=500.0, tokens=0, kind="http_503", status=503, start=1001.0)])
    report._on_worker_report("w1", {"llm_cpu_percent": 40.0})
    report._on_worker_report("w1", {"llm_cpu_percent": 75.0})
    report._on_worker_report("w1", {"llm_cpu_percent": 20.0})

    summary = report.write(tmp_path / "client_report.json")

    assert (summary["requests"], summary["successes"], summary["failures"]) == (3, 2, 1)
    assert summary["failures_by_kind"] == {"http_503": 1} and summary["failures_by_status"] == {"503": 1}
    assert summary["ignore_eos_violations"] == 1
    assert summary["latency_ms"]["ttft"]["p50"] == 200.0 and summary["latency_ms"]["ttft"]["mean"] == 200.0
    assert summary["latency_ms"]["tpot"]["p95"] == pytest.approx(100.0)
    assert summary["latency_ms"]["e2e"]["p95"] == pytest.approx(1100 + 0.95 * 1200)
    # window: first start 1000.0 s -> last end 1000.5 + 2.3 = 1002.8 s; in flight 1.1 + 2.3 + 0.5 = 3.9 s
    assert summary["window_s"] == pytest.approx(2.8)
    assert summary["achieved_concurrency"] == pytest.approx(3.9 / 2.8)
    assert summary["output_tps"] == pytest.approx(32 / 2.8)
    assert summary["worker_cpu_peak_percent"] == {"w1": 75.0}
    written = json.loads((tmp_path / "client_report.json").read_text())
    assert written["latency_ms"]["first_answer"]["p50"] is None  # NaN is written as null
    assert "ttft ms" in format_summary(summary) and "http_503:1" in format_summary(summary)
