"""Following the server log during a run (llm_locust/master/logfollow.py) and reading it back
(llm_locust/analysis/server/files.py): every line copied once, stamped on arrival, backlog marked."""

import math

import gevent
import numpy as np
import pytest

from llm_locust.analysis.server.files import read_server_files
from llm_locust.master.logfollow import LogFollower
from llm_locust.wallclock import local_wall_s


def follower(tmp_path, source):
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    return LogFollower(source, run_dir, poll_s=0.02), run_dir


def test_lines_are_copied_and_stamped_on_arrival(tmp_path):
    source = tmp_path / "server.out"
    source.write_text("startup line 1\nstartup line 2\n")
    follow, run_dir = follower(tmp_path, source)
    follow.start()
    gevent.sleep(0.1)
    with open(source, "a") as f:
        before = local_wall_s()
        f.write("stats A\nstats B (half")
        f.flush()
        gevent.sleep(0.1)
        f.write(" and the rest)\nstats C\nunfinished")
        f.flush()
        after = local_wall_s()
    gevent.sleep(0.1)
    follow.stop()

    assert (run_dir / "server.log").read_text() == source.read_text() + "\n"
    files = read_server_files(run_dir)
    assert files.log_text.splitlines()[3] == "stats B (half and the rest)"
    arrival = files.arrival_s
    assert len(arrival) == 6 and follow.lines == 6
    assert math.isnan(arrival[0]) and math.isnan(arrival[1])  # backlog: not dated by arrival
    assert all(before <= t <= after + 0.2 for t in arrival[2:5])
    assert arrival[3] > arrival[2]  # the completed half line arrived with its second half


def test_a_rotated_log_is_followed_from_its_start(tmp_path):
    source = tmp_path / "server.out"
    source.write_text("old 1\nold 2\nold 3\n")
    follow, run_dir = follower(tmp_path, source)
    follow.start()
    gevent.sleep(0.1)
    source.write_text("new 1\n")  # truncated and rewritten
    gevent.sleep(0.1)
    follow.stop()
    assert (run_dir / "server.log").read_text() == "old 1\nold 2\nold 3\nnew 1\n"
    assert np.isfinite(read_server_files(run_dir).arrival_s[3])


def test_a_log_created_after_the_start_has_no_backlog(tmp_path):
    source = tmp_path / "later.out"
    follow, run_dir = follower(tmp_path, source)
    follow.start()
    gevent.sleep(0.1)
    source.write_text("first line\n")
    gevent.sleep(0.1)
    follow.stop()
    assert np.isfinite(read_server_files(run_dir).arrival_s).all()


def test_the_run_directory_log_cannot_follow_itself(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with pytest.raises(ValueError, match="own server.log"):
        LogFollower(run_dir / "server.log", run_dir)


def test_stamps_for_more_lines_than_the_log_are_refused(tmp_path):
    (tmp_path / "server.log").write_text("one\n")
    (tmp_path / "server_log_stamps.csv").write_text("first_line,n_lines,t_s,backlog\n0,2,1.0,0\n")
    with pytest.raises(ValueError, match="the log has 1 lines"):
        read_server_files(tmp_path)
