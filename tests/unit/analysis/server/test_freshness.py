"""A scraped value is data only while it is fresh (llm_locust/analysis/server/freshness.py and its use in
the step table): held until the next scrape of its source, at most 3 scrape intervals (run.json),
never past a failed scrape (server_scrapes.csv); a step without fresh data shows none, not 0."""

from __future__ import annotations

import csv
import math

import numpy as np
import pandas as pd
import pytest

from llm_locust.analysis.perstep.table import step_server_means, step_windows
from llm_locust.analysis.pipeline import analyze_run, format_table
from llm_locust.analysis.rundir.reader import RunDirError, load_run
from llm_locust.analysis.server.series import series_from_breakpoints
from llm_locust.analysis.server.sources import (
    ServerSource,
    choose_step_means,
    step_server_seconds,
)
from tests.analysis_factories import SOURCE, T0, make_request, server_row, write_run_dir

STEPS = [(1, T0, T0 + 10.0), (2, T0 + 10.0, T0 + 20.0), (4, T0 + 20.0, T0 + 30.0)]
COLUMNS = ("t_s", "source", "ok", "error_kind", "status_code", "duration_ms", "bytes", "samples")


def requests_every_second():
    return [make_request(T0 + t, e2e_ms=500.0) for t in np.arange(0.0, 29.0, 1.0)]


def gauges(t_s, running, waiting, source=SOURCE):
    return [
        server_row(t_s, "vllm:num_requests_running", running, source=source),
        server_row(t_s, "vllm:num_requests_waiting", waiting, source=source),
    ]


def write_scrapes(path, rows):
    with open(path / "server_scrapes.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for t_s, ok, kind in rows:
            writer.writerow([t_s, SOURCE, int(ok), kind, 200 if ok else "", 3.0, 100 if ok else 0, 2 if ok else 0])


def test_one_scrape_then_a_hang_is_data_only_until_the_first_failed_scrape(tmp_path):
    run_dir = write_run_dir(
        tmp_path / "run", requests=requests_every_second(), steps=STEPS, server=gauges(T0 + 0.5, 0.0, 0.0)
    )
    # the next attempts hung: each timed out (stamped with its start), 3 s apart
    write_scrapes(run_dir, [(T0 + 0.5, True, "")] + [(T0 + 1.5 + 3 * k, False, "timeout") for k in range(9)])
    result = analyze_run(run_dir, write=False)
    table = result.table
    # step 0: 0 running / 0 waiting, as served, over [0.5, 1.5) only
    assert table.loc[0, ["server_running", "server_waiting"]].tolist() == [0.0, 0.0]
    assert table["server_data_s"].tolist() == [1.0, 0.0, 0.0]
    assert table.loc[1:, ["server_running", "server_waiting"]].isna().all().all()
    printed = format_table(table).splitlines()
    header = printed[0].split()
    assert "data" in header  # the "server data s" column is shown: steps are short of data
    assert printed[1].split()[3:7] == ["0.00", "0.00", "1", "of"]
    assert printed[2].split()[3:7] == ["-", "-", "0", "of"]
    assert "scrapes: 1 ok, 9 failed (timeout 9)" in result.server_source_line


def test_without_a_scrapes_file_one_scrape_holds_three_intervals_of_run_json(tmp_path):
    run_dir = write_run_dir(
        tmp_path / "run",
        requests=requests_every_second(),
        steps=STEPS,
        server=gauges(T0 + 0.5, 2.0, 4.0),
        scrape_interval_s=1.0,
    )
    table = analyze_run(run_dir, write=False).table
    assert table["server_data_s"].tolist() == [3.0, 0.0, 0.0]  # [0.5, 3.5)
    assert table.loc[0, ["server_running", "server_waiting"]].tolist() == [2.0, 4.0]
    assert math.isnan(table.loc[1, "server_running"])


def test_the_hold_limit_comes_from_the_run_interval(tmp_path):
    server = [row for t in range(0, 10, 2) for row in gauges(T0 + t, 1.0, 0.0)]
    run_dir = write_run_dir(
        tmp_path / "run", requests=requests_every_second(), steps=STEPS, server=server, scrape_interval_s=2.0
    )
    table = analyze_run(run_dir, write=False).table
    # the last scrape, at 8 s, holds 3 x 2 s: until 14 s
    assert table["server_data_s"].tolist() == [10.0, 4.0, 0.0]


def test_two_sources_sum_only_where_both_are_fresh(tmp_path):
    other = "http://127.0.0.1:8001/metrics"
    server = [row for t in range(30) for row in gauges(T0 + t, 1.0, 0.0)]
    server += [row for t in range(10) for row in gauges(T0 + t, 2.0, 1.0, source=other)]
    run_dir = write_run_dir(tmp_path / "run", requests=requests_every_second(), steps=STEPS, server=server)
    table = analyze_run(run_dir, write=False).table
    assert table.loc[0, ["server_running", "server_waiting"]].tolist() == [3.0, 1.0]
    # the other engine's last scrape (9 s) holds until 12 s; after it the sum is unknown
    assert table["server_data_s"].tolist() == [10.0, 2.0, 0.0]
    assert table.loc[1, "server_running"] == 3.0 and math.isnan(table.loc[2, "server_running"])


def test_the_log_fills_steps_where_metrics_went_stale():
    steps = pd.DataFrame(
        {"step": [0, 1], "target_users": [1.0, 2.0], "start_s": [T0, T0 + 10], "end_s": [T0 + 10, T0 + 20]}
    )
    windows = step_windows(steps, 0.0)
    metrics = series_from_breakpoints(
        {"running": (np.array([T0, T0 + 3.0]), np.array([1.0, np.nan]))}, source="metrics"
    )
    log = series_from_breakpoints({"running": (np.array([T0, T0 + 10.0]), np.array([5.0, 2.0]))}, source="log")
    metric_means = step_server_means(windows, metrics)
    means, labels = choose_step_means(metric_means, step_server_means(windows, log), ServerSource.BOTH)
    assert means["server_running"].tolist() == [1.0, 2.0] and labels == ["metrics", "log"]
    seconds = step_server_seconds(windows, metrics, log, metric_means, ServerSource.BOTH)
    assert seconds.tolist() == [3.0, 10.0]


def test_a_scrapes_file_with_a_bad_row_is_a_clear_error(tmp_path):
    run_dir = write_run_dir(
        tmp_path / "run", requests=requests_every_second(), steps=STEPS, server=gauges(T0, 1.0, 0.0)
    )
    (run_dir / "server_scrapes.csv").write_text("t_s,source,ok,error_kind\n1.0,u,yes,\n")
    with pytest.raises(RunDirError, match="server_scrapes.csv: data row 1"):
        load_run(run_dir)
    (run_dir / "server_scrapes.csv").write_text("t_s,source\n1.0,u\n")
    with pytest.raises(RunDirError, match="missing columns"):
        load_run(run_dir)
