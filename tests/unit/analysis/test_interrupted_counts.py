"""Requests the test's stop cut (``interrupted``) are counted on their own, never as failures:
in the step table, the per-worker table, summary.md's request line and the no-verdict line."""

from __future__ import annotations

import pandas as pd

from llm_locust.analysis.perrequest.outcome import RunOutcome, outcome_line, request_counts
from llm_locust.analysis.perstep.table import step_table
from llm_locust.analysis.perstep.workers import worker_table
from llm_locust.analysis.pipeline import analyze_run
from tests.analysis_factories import T0, make_request, write_run_dir

KINDS = ["", "", "", "http_429", "interrupted", "interrupted"]
"""Six requests ending in one window: 3 answered, 1 refused, 2 cut by the stop."""


def requests() -> pd.DataFrame:
    rows = [make_request(T0 + i, e2e_ms=500.0, error_kind=k, request_id=f"r{i}") for i, k in enumerate(KINDS)]
    frame = pd.DataFrame(rows)
    return frame.assign(error_kind=frame["error_kind"].fillna(""))


def test_the_step_table_counts_only_real_failures_as_errors():
    windows = pd.DataFrame({"step": [0], "target_users": [2.0], "window_start_s": [T0], "window_end_s": [T0 + 10]})
    table = step_table(requests(), windows)
    assert table.loc[0, "completed"] == 3 and table.loc[0, "errors"] == 1  # by hand: the one 429
    assert table.loc[0, "error_kinds"] == "http_429:1 interrupted:2"  # shown by kind, apart


def test_the_worker_table_counts_only_real_failures():
    table = worker_table(requests(), None, {}, T0 + 10)
    [w0] = table.to_dict("records")
    assert (w0["worker"], w0["requests"], w0["ok"], w0["failed"]) == ("w0", 6, 3, 1)


def test_request_counts_and_the_no_verdict_line_name_the_interrupted_apart():
    assert request_counts(requests()) == "6 (ok 3, failed 1, interrupted 2: cut by the test's stop, not failures)"
    line = outcome_line(RunOutcome.NO_SUCCESS, 3, interrupted=2)
    assert line.endswith("(3 requests: 1 failed, 2 interrupted by the test's stop)")
    assert outcome_line(RunOutcome.NO_SUCCESS, 3).endswith("(all 3 requests failed)")


def test_summary_md_gives_the_request_counts(tmp_path):
    run = write_run_dir(tmp_path / "run", requests=requests().to_dict("records"), steps=[(2, T0, T0 + 10)])
    analyze_run(run)
    summary = (run / "report" / "summary.md").read_text()
    assert "- Requests: 6 (ok 3, failed 1, interrupted 2: cut by the test's stop, not failures);" in summary
