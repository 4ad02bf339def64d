"""The heartbeat of long analysis work (issue 26, item 8): silent for work shorter than its first
delay, then one line per interval naming the current stage, nothing with ``quiet``."""

from __future__ import annotations

import io
import re
import time

from llm_locust.analysis.console import Heartbeat


def test_a_short_stage_prints_nothing():
    out = io.StringIO()
    with Heartbeat("analyze", after_s=5.0, stream=out):
        pass
    assert out.getvalue() == ""


def test_a_long_stage_is_named_every_interval():
    out = io.StringIO()
    with Heartbeat("analyze", after_s=0.1, every_s=0.1, stream=out) as beat:
        beat.stage = "loading the run directory"
        time.sleep(0.35)
    lines = out.getvalue().splitlines()
    assert 2 <= len(lines) <= 4
    assert all(
        re.fullmatch(r"\[.+\] \S+/INFO/llm_locust\.progress: analyze: loading the run directory, 0:00 elapsed", x)
        for x in lines
    ), lines


def test_quiet_prints_nothing():
    out = io.StringIO()
    with Heartbeat("analyze", after_s=0.05, every_s=0.05, quiet=True, stream=out):
        time.sleep(0.2)
    assert out.getvalue() == ""
