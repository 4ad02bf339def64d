"""Per-worker figures (llm_locust/analysis/perstep/workers.py) and summary.md's per-worker section, on run
directories whose numbers are worked out by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from llm_locust.analysis.perstep.workers import (
    UNTIL_BACK,
    UNTIL_RUN_END,
    missing_intervals,
    worker_records,
    worker_table,
)
from llm_locust.analysis.report.workers import workers_markdown
from llm_locust.analysis.rundir.reader import RunDirError, load_run
from tests.analysis_factories import T0, client_load_row, make_request, write_client_load, write_run_dir

LOCUST_ID = "loadbox-7_" + "ab" * 16
"""A worker id as Locust makes them: host name, "_", 32 hex digits."""


def request(worker: str, t_start_s: float, *, e2e_ms: float = 1000.0, error_kind: str = "") -> dict:
    row = make_request(t_start_s, e2e_ms=e2e_ms, error_kind=error_kind, request_id=f"{worker}-{t_start_s}")
    return {**row, "worker_id": worker}


def three_worker_run(path):
    """Worker a: 3 requests (one http_5xx), CPU 0.1 / 0.3 cores; b: one request that never ended
    (NaN e2e), CPU 0.5, missing 4 s and back; LOCUST_ID: no request, no load, missing from +5 s
    to the run's end (+10 s)."""
    requests = [
        request("a", T0 + 1.0, e2e_ms=2000.0),
        request("a", T0 + 2.0, e2e_ms=500.0, error_kind="http_5xx"),
        request("a", T0 + 4.0, e2e_ms=3500.0),
        request("b", T0 + 3.0, e2e_ms=math.nan),
    ]
    path = write_run_dir(
        path,
        requests=requests,
        steps=[(3, T0, T0 + 10.0)],
        ended_at_s=T0 + 10.0,
        workers=["a", "b", LOCUST_ID],
        worker_processes=[{"worker": "a", "host": "h1", "pid": 11}],
        workers_missing=[
            {"worker": "b", "from_s": T0 + 3.5, "noticed_s": T0 + 7.0, "to_s": T0 + 7.5},
            {"worker": LOCUST_ID, "from_s": T0 + 5.0, "noticed_s": T0 + 9.0, "to_s": None},
        ],
    )
    write_client_load(path, [client_load_row(T0 + 1, worker="a", cpu_cores=0.1, loop_lag_ms_mean=2.0),
                             client_load_row(T0 + 2, worker="a", cpu_cores=0.3, loop_lag_ms_mean=4.0),
                             client_load_row(T0 + 1, worker="b", cpu_cores=0.5)])  # fmt: skip
    return path


def test_worker_table_by_hand(tmp_path):
    run = load_run(three_worker_run(tmp_path / "run"))
    table = worker_table(run.requests, run.client_load, run.meta, run.ended_at_s).set_index("worker")

    assert list(table.index) == ["a", "b", LOCUST_ID]  # the idle worker is listed too
    assert table.loc["a", ["requests", "ok", "failed"]].tolist() == [3, 2, 1]
    assert table.loc["b", ["requests", "ok", "failed"]].tolist() == [1, 1, 0]
    assert table.loc[LOCUST_ID, ["requests", "ok", "failed"]].tolist() == [0, 0, 0]
    assert table.loc["a", "cpu_mean_percent"] == pytest.approx(20.0)  # (0.1 + 0.3) / 2 cores
    assert table.loc["a", "cpu_max_percent"] == pytest.approx(30.0)
    assert table.loc["a", "loop_lag_ms_mean"] == pytest.approx(3.0)
    assert table.loc["b", ["cpu_mean_percent", "cpu_max_percent"]].tolist() == pytest.approx([50.0, 50.0])
    assert math.isnan(table.loc[LOCUST_ID, "cpu_mean_percent"]) and table.loc[LOCUST_ID, "load_samples"] == 0
    # a: first start +1 s, last end max(1 + 2, 2 + 0.5, 4 + 3.5) = +7.5 s; b never ended: its start
    assert table.loc["a", ["first_record_s", "last_record_s"]].tolist() == [T0 + 1.0, T0 + 7.5]
    assert table.loc["b", ["first_record_s", "last_record_s"]].tolist() == [T0 + 3.0, T0 + 3.0]
    assert math.isnan(table.loc[LOCUST_ID, "first_record_s"])
    # host: run.json's, else the Locust id's; pid only where reported
    assert table["host"].tolist() == ["h1", "", "loadbox-7"]
    assert table.loc["a", "pid"] == 11 and pd.isna(table.loc["b", "pid"])
    assert table["missing_s"].tolist() == pytest.approx([0.0, 4.0, 5.0])  # 7.5 - 3.5; 10 - 5


def test_records_carry_each_workers_spells(tmp_path):
    run = load_run(three_worker_run(tmp_path / "run"))
    missing = missing_intervals(run.meta, run.ended_at_s)
    records = {r["worker"]: r for r in worker_records(worker_table(run.requests, run.client_load, run.meta,
                                                                   run.ended_at_s), missing)}  # fmt: skip

    assert records["a"]["missing"] == [] and records["a"]["pid"] == 11
    assert records["b"]["pid"] is None and records["b"]["cpu_mean_percent"] == pytest.approx(50.0)
    assert records["b"]["missing"] == [
        {"from_s": T0 + 3.5, "to_s": T0 + 7.5, "until": UNTIL_BACK, "missing_s": pytest.approx(4.0)}
    ]
    assert records[LOCUST_ID]["missing"] == [
        {"from_s": T0 + 5.0, "to_s": T0 + 10.0, "until": UNTIL_RUN_END, "missing_s": pytest.approx(5.0)}
    ]
    assert records[LOCUST_ID]["first_record_s"] is None  # NaN -> None for JSON


def test_missing_intervals_fall_back_on_workers_lost_and_never_run_backwards():
    older = {"workers_lost": [{"worker": "w", "lost_at_s": 20.0, "last_record_s": 19.0}]}
    assert missing_intervals(older, end_s=50.0).to_dict("records") == [
        {"worker": "w", "from_s": 20.0, "to_s": 50.0, "until": UNTIL_RUN_END, "missing_s": 30.0}
    ]
    # the run's end (e.g. taken from the last record) before the worker's last word: empty, not negative
    late = {"workers_missing": [{"worker": "w", "from_s": 60.0, "noticed_s": 64.0, "to_s": None}]}
    assert missing_intervals(late, end_s=50.0)["missing_s"].tolist() == [0.0]
    assert missing_intervals({}, end_s=50.0).empty


def test_summary_md_lists_every_worker_and_names_the_idle_and_missing_ones(tmp_path):
    lines = workers_markdown(load_run(three_worker_run(tmp_path / "run")))
    text = "\n".join(lines)

    assert lines[0] == "## Load workers"
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| worker")]
    assert rows[0] == "| a | h1 | 11 | 3 | 2 | 1 | 20 | 30 | +1.0 s | +7.5 s | - |"
    assert rows[1].startswith("| b | - | - | 1 | 1 | 0 | 50 | 50 |") and rows[1].endswith("| +3.5-+7.5 s (back) |")
    assert rows[2].startswith("| loadbox-7_abababab | loadbox-7 | - | 0 |")
    assert rows[2].endswith("| +5.0-+10.0 s (to the end) |")
    assert f"1 worker(s) sent no request**: {LOCUST_ID}" in text
    assert "worker b was missing 4.0 s" in text and f"worker {LOCUST_ID} was missing 5.0 s" in text


def test_one_worker_gets_no_section(tmp_path):
    path = write_run_dir(tmp_path / "run", requests=[request("a", T0 + 1.0)], steps=[(1, T0, T0 + 10.0)],
                         workers=["a"])  # fmt: skip
    assert workers_markdown(load_run(path)) == []


def test_a_malformed_missing_spell_is_refused(tmp_path):
    path = write_run_dir(tmp_path / "run", requests=[request("a", T0 + 1.0)], steps=[(1, T0, T0 + 10.0)],
                         workers_missing=[{"worker": "a", "from_s": "soon", "to_s": None}])  # fmt: skip
    with pytest.raises(RunDirError, match="workers_missing"):
        load_run(path)
