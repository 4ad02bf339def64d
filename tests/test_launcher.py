"""Launcher progress lines: steps numbered from 0 like the analysis table; users for --shape none."""

from __future__ import annotations

import json
import time

from llm_locust.launcher import _progress


def test_progress_names_the_step_as_the_table_does(tmp_path):
    steps = [{"index": 0, "users": 1}, {"index": 1, "users": 2}]
    (tmp_path / "run.json").write_text(json.dumps({"shape": {"kind": "ladder", "steps": steps}}))
    (tmp_path / "requests.csv").write_text("header\na\nb\n")
    line = _progress(tmp_path, time.monotonic())
    assert "step 1 (2 users)" in line and "2 requests recorded" in line


def test_progress_without_a_shape_shows_locusts_user_count(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"shape": {"kind": "none", "steps": []}}))
    (tmp_path / "locust_stats_history.csv").write_text("Timestamp,User Count,Type\n1,2,\n2,5,\n")
    assert "5 users" in _progress(tmp_path, time.monotonic())
