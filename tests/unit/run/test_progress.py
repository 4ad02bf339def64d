"""The launcher's progress line: steps numbered from 0 like the analysis table, users for --shape none,
requests counted from the bytes appended since the previous line."""

from __future__ import annotations

import json
import re
import time

from llm_locust.analysis.console import HOSTNAME
from llm_locust.run.progress import LineCounter, RunProgress, last_csv_row, plan_of


def test_progress_says_step_i_of_n_elapsed_and_time_left_in_locusts_console_style(tmp_path):
    now = time.time()
    steps = [{"index": 0, "users": 1, "start_s": now - 13}, {"index": 1, "users": 2, "start_s": now - 3}]
    (tmp_path / "run.json").write_text(json.dumps({"shape": {"kind": "ladder", "steps": steps}}))
    (tmp_path / "requests.csv").write_text("header\na\nb\n")
    plan = plan_of("llm_locust/locustfiles/ladder.py", ["--ladder", "1,2,4,8", "--dwell-s", "10"])
    line = RunProgress(tmp_path, time.monotonic() - 75, plan).line()
    # the second of four 10 s steps, 3 s into it: 7 s of it and two steps more left
    assert re.fullmatch(
        rf"\[\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d,\d{{3}}\] {HOSTNAME}/INFO/llm_locust\.progress: "
        r"step 2 of 4, 2 users, 1:15 elapsed, ~0:27 left, 2 requests recorded",
        line,
    ), line


def test_progress_of_a_baseline_counts_its_requests(tmp_path):
    (tmp_path / "requests.csv").write_text("header\na\nb\nc\n")
    plan = plan_of("baseline.py", ["--baseline-requests", "10"])
    assert "3 of 10 requests recorded" in RunProgress(tmp_path, time.monotonic(), plan).line()


def test_progress_of_a_timed_run_counts_down_its_run_time(tmp_path):
    plan = plan_of("chat_stream.py", ["-u", "2", "-t", "1m30s"])
    assert plan.run_time_s == 90
    assert "0:30 elapsed, ~1:00 left" in RunProgress(tmp_path, time.monotonic() - 30, plan).line()


def test_progress_without_a_shape_shows_locusts_user_count(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"shape": {"kind": "none", "steps": []}}))
    (tmp_path / "locust_stats_history.csv").write_text("Timestamp,User Count,Type\n1,2,\n2,5,\n")
    assert "5 users" in RunProgress(tmp_path, time.monotonic()).line()


def test_requests_are_counted_from_the_appended_bytes_only(tmp_path):
    path = tmp_path / "requests.csv"
    progress = RunProgress(tmp_path, time.monotonic())
    assert progress.requests() == 0  # no file yet
    path.write_text("header\n" + "row\n" * 3 + "half-written")
    assert progress.requests() == 3
    offset = path.stat().st_size
    with open(path, "a") as f:
        f.write(" row\n" + "row\n" * 4)
    assert progress.requests() == 8
    # the counter read only what came after its last offset: rewriting the start changes nothing
    with open(path, "r+b") as f:
        f.write(b"h\ne\na\nd\n")
    assert progress.requests() == 8
    assert progress._requests._offset == path.stat().st_size > offset


def test_line_counter_reads_the_file_once_in_total(tmp_path, monkeypatch):
    path = tmp_path / "big.csv"
    path.write_bytes(b"x\n" * 100_000)
    counter = LineCounter(path)
    assert counter.count() == 100_000
    read = []
    real_open = open

    def counting_open(*args, **kwargs):
        f = real_open(*args, **kwargs)
        original = f.read

        def read_and_count(n=-1):
            data = original(n)
            read.append(len(data))
            return data

        f.read = read_and_count
        return f

    monkeypatch.setattr("builtins.open", counting_open)
    with real_open(path, "ab") as f:
        f.write(b"y\n" * 10)
    assert counter.count() == 100_010
    assert sum(read) == 20  # only the 10 new lines


def test_last_csv_row_reads_the_tail_of_a_long_history(tmp_path):
    path = tmp_path / "h.csv"
    rows = "".join(f"{i},{i * 2},\n" for i in range(50_000))
    path.write_text("Timestamp,User Count,Type\n" + rows + "50000,7")  # the last row still being written
    assert last_csv_row(path, tail_bytes=100) == {"Timestamp": "49999", "User Count": "99998", "Type": ""}
    assert last_csv_row(tmp_path / "missing.csv") is None
    (tmp_path / "only-header.csv").write_text("a,b\n")
    assert last_csv_row(tmp_path / "only-header.csv") is None
