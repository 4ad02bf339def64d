"""What the console shows of a failed Locust master (:func:`llm_locust.run.postrun.master_failure_lines`)
and which ``--out`` folders ``diagnose`` refuses (:func:`llm_locust.run.preflight.out_dir_problem`)."""

from __future__ import annotations

from llm_locust.run.postrun import master_failure_lines
from llm_locust.run.preflight import MASTER_LOG, out_dir_problem

LOG = """\
[2026-12-07 05:41:06,279] vm/INFO/locust.runners: Shape test updating to 2 users at 1000.00 spawn rate
[2026-12-07 05:41:06,300] vm/ERROR/locust.runners: Unhandled exception in greenlet: <Greenlet at 0x7f: on_start>
Traceback (most recent call last):
  File "/x/rundir.py", line 170, in open
    raise FileExistsError(msg)
FileExistsError: /r/requests.csv exists: use a new --run-dir for each run
[2026-12-07 05:41:07,000] vm/WARNING/locust.runners: a warning, not an error
__main__.py: error: unrecognized arguments: --bogus
[2026-12-07 05:41:08,000] vm/CRITICAL/llm_locust.master: cannot bind the web UI
"""


def test_errors_tracebacks_and_argparse_lines_in_order(tmp_path):
    (tmp_path / MASTER_LOG).write_text(LOG)
    assert master_failure_lines(tmp_path) == [
        "[2026-12-07 05:41:06,300] vm/ERROR/locust.runners: Unhandled exception in greenlet: <Greenlet at 0x7f: on_start>",
        "FileExistsError: /r/requests.csv exists: use a new --run-dir for each run",
        "__main__.py: error: unrecognized arguments: --bogus",
        "[2026-12-07 05:41:08,000] vm/CRITICAL/llm_locust.master: cannot bind the web UI",
    ]
    assert master_failure_lines(tmp_path, limit=1) == [
        "[2026-12-07 05:41:08,000] vm/CRITICAL/llm_locust.master: cannot bind the web UI"
    ]


def test_no_log_no_lines(tmp_path):
    assert master_failure_lines(tmp_path) == []


def test_out_dir_problem(tmp_path):
    assert out_dir_problem(tmp_path / "new") is None
    (tmp_path / "empty").mkdir()
    assert out_dir_problem(tmp_path / "empty") is None
    used = tmp_path / "used"
    (used / "round-a").mkdir(parents=True)
    (used / "notes.txt").write_text("x")
    assert out_dir_problem(used) == (
        f"--out {used} already holds files (notes.txt, round-a/), an earlier run's: give a new folder (nothing was sent)"
    )
    assert out_dir_problem(used / "notes.txt") == f"--out {used / 'notes.txt'} is a file: give a new folder"
