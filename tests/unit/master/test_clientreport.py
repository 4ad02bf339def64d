"""The master's end-of-run summary, on rows worked out by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from locust.env import Environment

from llm_locust.analysis.perrequest.itlpool import itl_from_csv
from llm_locust.analysis.perstep.workers import missing_intervals, worker_records, worker_table
from llm_locust.analysis.rundir.reader import load_run
from llm_locust.client.record import CSV_COLUMNS, RequestRecord
from llm_locust.master import clientreport
from llm_locust.master.clientreport import ClientReport, format_summary
from tests.analysis_factories import T0, make_request, write_run_dir
from tests.unit.analysis.test_itlpool import _raw
from tests.unit.analysis.test_itlpool import _requests as _itl_requests


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


def _random_rows(seed: int, n: int) -> list[dict]:
    """``requests.csv`` rows of three workers: test_itlpool's random token times (fractions of
    tokens per event, failures, one-event and unfinished rows, gaps above a second)."""
    rng = np.random.default_rng(seed)
    frame = _itl_requests(seed, n, whole_counts=True)
    rows = []
    for i, r in enumerate(frame.itertuples(index=False)):
        ok = r.error_kind == ""
        rows.append({**make_request(T0 + i * 0.01 + float(rng.random()), e2e_ms=r.e2e_ms, ttft_ms=r.ttft_ms,
                                    output_tokens=r.output_tokens, error_kind=r.error_kind, request_id=f"r{i}"),
                     "worker_id": f"w{int(rng.integers(0, 3))}", "status_code": 200 if ok else 503,
                     "token_times_us": r.token_times_us, "event_tokens": r.event_tokens})  # fmt: skip
    return rows


def _feed(report: ClientReport, rows: list[dict], seed: int) -> list[tuple]:
    """As the master gets them: batches of one worker's rows of any size (1-40), then a batch
    of several workers' rows (some sent twice) and an empty one; returns every row fed."""
    rng = np.random.default_rng(seed)
    fed = []
    for worker in ("w0", "w1", "w2"):
        mine = [tuple(r.get(c, "") for c in CSV_COLUMNS) for r in rows if r["worker_id"] == worker]
        while mine:
            size = int(rng.integers(1, 41))
            batch, mine = mine[:size], mine[size:]
            report.add_rows(batch)
            fed += batch
    mixed = [tuple(r.get(c, "") for c in CSV_COLUMNS) for r in rows[:30]]
    report.add_rows(mixed)
    report.add_rows([])
    return fed + mixed


@pytest.mark.parametrize("seed", range(3))
def test_pooled_itl_accumulated_as_rows_arrive_equals_numpy_on_the_raw_values(tmp_path, monkeypatch, seed):
    monkeypatch.setattr(clientreport, "ITL_BLOCK_ROWS", 37)  # many blocks, cut anywhere
    rows = _random_rows(seed, 600)
    report = ClientReport(Environment())
    fed = _feed(report, rows, seed)
    run_dir = write_run_dir(tmp_path / "run", requests=[dict(zip(CSV_COLUMNS, t)) for t in fed],
                            steps=[(1, T0, T0 + 20.0)], ended_at_s=T0 + 20.0)  # fmt: skip

    summary = report.write(run_dir / "client_report.json", run_dir / "requests.csv")

    values, weights, gaps = _raw(pd.DataFrame([dict(zip(CSV_COLUMNS, t)) for t in fed]))
    itl = summary["itl_ms"]
    for q in (0.50, 0.95, 0.99):
        assert itl[f"itl_p{round(q * 100)}_ms"] == np.quantile(values, q, weights=weights, method="inverted_cdf")
    assert itl["itl_mean_ms"] == pytest.approx(float((values * weights).sum() / weights.sum()), rel=1e-12)
    assert (itl["chunk_gap_p50_ms"], itl["chunk_gap_p99_ms"]) == tuple(np.percentile(gaps, [50, 99]))
    assert itl["chunk_gap_max_ms"] == gaps.max()
    # the same figures as the pass over requests.csv written from the same rows
    from_csv = itl_from_csv(run_dir / "requests.csv")
    assert from_csv.pop("itl_mean_ms") == pytest.approx(itl.pop("itl_mean_ms"), rel=1e-12)
    assert from_csv == itl


def test_per_worker_counts_accumulated_equal_the_table_of_requests_csv(tmp_path):
    rows = _random_rows(5, 400)
    rows[3]["e2e_ms"] = math.nan  # never ended: its last record is its start
    for i in (5, 6, 40):
        rows[i]["error_kind"] = "interrupted"  # cut by the stop: neither ok nor failed
    report = ClientReport(Environment())
    fed = _feed(report, rows, 5)
    run_dir = write_run_dir(tmp_path / "run", requests=[dict(zip(CSV_COLUMNS, t)) for t in fed],
                            steps=[(1, T0, T0 + 20.0)], ended_at_s=T0 + 20.0, workers=["w0", "w1", "w2", "idle"])  # fmt: skip

    summary = report.write(run_dir / "client_report.json", run_dir / "requests.csv")

    run = load_run(run_dir)
    expected = worker_records(worker_table(run.requests, run.client_load, run.meta, run.ended_at_s),
                              missing_intervals(run.meta, run.ended_at_s))  # fmt: skip
    assert summary["workers"] == expected
    frame = pd.DataFrame([dict(zip(CSV_COLUMNS, t)) for t in fed])
    for worker in summary["workers"]:  # and by hand, with plain Python over the rows
        mine = frame[frame["worker_id"] == worker["worker"]]
        assert worker["requests"] == len(mine)
        assert worker["failed"] == int(((mine["error_kind"] != "") & (mine["error_kind"] != "interrupted")).sum())
        assert worker["ok"] == int((mine["error_kind"] == "").sum())
        ends = [s + (0.0 if math.isnan(e) else e / 1000.0) for s, e in zip(mine["t_start_s"], mine["e2e_ms"])]
        assert worker["first_record_s"] == (min(mine["t_start_s"]) if len(mine) else None)
        assert worker["last_record_s"] == (max(ends) if ends else None)


def test_a_token_time_that_is_no_number_leaves_the_itl_out_and_says_why(tmp_path):
    rows = _random_rows(2, 50)
    good = next(r for r in rows if r["error_kind"] == "")
    bad = {**good, "request_id": "bad", "token_times_us": "1000 x 3000"}
    report = ClientReport(Environment())
    report.add_rows([tuple(r.get(c, "") for c in CSV_COLUMNS) for r in [*rows, bad]])  # no exception at ingest
    run_dir = write_run_dir(tmp_path / "run", requests=[*rows, bad], steps=[(1, T0, T0 + 20.0)])

    summary = report.write(run_dir / "client_report.json", run_dir / "requests.csv")

    assert "itl_ms" not in summary and "itl_ms: ValueError" in summary["files_error"]
    assert sum(w["requests"] for w in summary["workers"]) == 51 and summary["requests"] == 51


def test_interrupted_requests_are_counted_on_their_own_never_as_failures():
    report = ClientReport(Environment())
    kinds = ["", "", "http_429", "interrupted", "interrupted", "interrupted"]
    report.add_rows([row(i, ttft=100.0, e2e=1100.0, tokens=11, kind=k, status=429 if k == "http_429" else 200)
                     for i, k in enumerate(kinds)])  # fmt: skip
    summary = report.summary()
    # by hand: 6 requests = 2 ok + 1 failed (the 429) + 3 cut by the stop
    assert (summary["requests"], summary["successes"], summary["failures"], summary["interrupted"]) == (6, 2, 1, 3)
    assert summary["failures_by_kind"] == {"http_429": 1} and summary["failures_by_status"] == {"429": 1}
    lines = format_summary(summary).splitlines()
    assert lines[0] == "LLM requests: 6  ok 2  failed 1  http_429:1"
    [own] = [line for line in lines if line.startswith("interrupted: ")]
    assert own.startswith("interrupted: 3 requests were in flight when the test stopped") and "not failures" in own


def test_a_run_of_only_interrupted_requests_has_no_failure():
    report = ClientReport(Environment())
    report.add_rows([row(0, ttft=100.0, e2e=500.0, tokens=3, kind="interrupted")])
    summary = report.summary()
    assert (summary["failures"], summary["interrupted"], summary["failures_by_kind"]) == (0, 1, {})
    assert format_summary(summary).splitlines()[0] == "LLM requests: 1  ok 0  failed 0"
