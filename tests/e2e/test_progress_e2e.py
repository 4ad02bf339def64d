"""Progress of a run (issue 26, item 8), in real processes: ``llm-locust run`` prints, every 10 s,
a line in Locust's console style with the step (i of N), the users, the elapsed time and the time
left by the plan; ``--quiet`` prints none and still prints the results."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

LINE = re.compile(
    r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] \S+/INFO/llm_locust\.progress: "
    r"step (?P<i>\d) of 2, (?P<users>\d) users, (?P<elapsed>\d+:\d\d) elapsed, ~(?P<left>\d+:\d\d) left, "
    r"\d+ requests recorded$"
)


def run_cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llm_locust.cli", "run", *argv], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


def seconds(text: str) -> int:
    minutes, secs = text.split(":")
    return int(minutes) * 60 + int(secs)


def test_a_ladder_run_says_where_it_is(sim_host, tmp_path):
    done = run_cli("--host", sim_host, "--ladder", "1,2", "--dwell-s", "7", "--warmup-s", "1", "--max-tokens", "8",
                   "--workers", "1", "--no-analyze", "--out", str(tmp_path / "run"))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [m for m in map(LINE.match, done.stdout.splitlines()) if m]
    assert lines, done.stdout
    for m in lines:
        step = int(m["i"])
        assert int(m["users"]) == step  # the ladder 1,2: step i holds i users
        # time left: the steps after this one and the rest of this one, at most a step each
        assert (2 - step) * 7 <= seconds(m["left"]) <= (2 - step + 1) * 7


def test_quiet_prints_no_progress(sim_host, tmp_path):
    done = run_cli("--host", sim_host, "--shape", "none", "-u", "1", "-r", "1", "-t", "12s", "--max-tokens", "8",
                   "--workers", "1", "--no-analyze", "--quiet", "--out", str(tmp_path / "run"))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "llm_locust.progress" not in done.stdout + done.stderr
    assert "run directory: " in done.stdout
