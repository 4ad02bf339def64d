"""The report's figures drawn in forked children (llm_locust/analysis/report/figures.py).

The test process imports Locust (``tests/conftest.py``), so gevent has patched it and
:func:`fork_is_safe` is False here: the forked path runs in a fresh interpreter that imports only
the analysis, as ``llm-locust analyze`` and the launcher's end of run do. It runs every scenario
once (a few seconds) and prints what it saw as JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from llm_locust.analysis.report.figures import FigureJob, fork_is_safe, save_figures

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)

REPO = Path(__file__).resolve().parents[3]

SCENARIOS = textwrap.dedent(
    """
    import json, os, signal, sys, threading, time
    from pathlib import Path
    import numpy as np
    from matplotlib.image import imread
    from llm_locust.analysis import pipeline
    from llm_locust.analysis.report import figures
    from llm_locust.analysis.report.figures import FigureJob, fork_is_safe, save_figures
    from tests.analysis_factories import synthetic_ladder

    out, parent, seen = Path(sys.argv[1]), os.getpid(), {}

    def drawing(name, fail=None):
        def draw(ax):
            (out / f"{name}.pid").write_text(str(os.getpid()))
            if fail == "raise":
                raise ValueError(f"no data for {name}")
            if fail == "kill" and os.getpid() != parent:
                os.kill(os.getpid(), signal.SIGKILL)
            ax.plot([1, 2, 4, 8], [3, 5, 6, 6], label=f"{name}: a long label (tokens/s)")
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
            ax.set_title(name)
        return draw

    def jobs(folder, fail=None, failing="a"):
        (out / folder).mkdir(exist_ok=True)
        return [FigureJob(out / folder / f"{n}.png", (3, 2), drawing(n, fail if n == failing else None)) for n in "abc"]

    def pids():
        return {n: int((out / f"{n}.pid").read_text()) - parent for n in "abc"}  # 0: drawn in this process

    def error_of(call):
        try:
            call()
        except Exception as exc:
            return [type(exc).__name__, str(exc)]
        return None

    seen["safe"] = fork_is_safe()
    save_figures(jobs("forked"))
    seen["forked_pids"] = pids()
    save_figures(jobs("serial"), parallel=False)
    seen["serial_pids"] = pids()
    seen["bytes_equal"] = all((out / "forked" / f"{n}.png").read_bytes() == (out / "serial" / f"{n}.png").read_bytes() for n in "abc")
    seen["pixels_equal"] = all(np.array_equal(imread(out / "forked" / f"{n}.png"), imread(out / "serial" / f"{n}.png")) for n in "abc")

    seen["raised_forked"] = error_of(lambda: save_figures(jobs("raise-forked", "raise")))
    seen["raised_serial"] = error_of(lambda: save_figures(jobs("raise-serial", "raise"), parallel=False))
    seen["raise_left"] = sorted(p.name for p in (out / "raise-forked").iterdir())

    save_figures(jobs("killed", "kill"))
    seen["killed_pids"], seen["killed_left"] = pids(), sorted(p.name for p in (out / "killed").iterdir())

    def failing_meanwhile():
        raise OSError("disk full")
    seen["meanwhile_raised"] = error_of(lambda: save_figures(jobs("meanwhile"), meanwhile=failing_meanwhile))
    try:
        os.waitpid(-1, os.WNOHANG)
        seen["children_left"] = True
    except ChildProcessError:
        seen["children_left"] = False
    seen["meanwhile_left"] = [p.name for p in (out / "meanwhile").iterdir() if p.name.endswith(".tmp")]

    done = threading.Event()
    busy = threading.Thread(target=done.wait)
    busy.start()
    seen["safe_with_a_thread"] = fork_is_safe()
    save_figures(jobs("threaded"))
    seen["threaded_pids"] = pids()
    done.set()
    busy.join()
    threading.Thread(target=time.sleep, args=(0.05,), name=figures.PRELOAD_THREAD).start()
    seen["safe_after_a_preload"] = fork_is_safe()

    run = synthetic_ladder(out / "ladder" / "run", users=(1, 2), dwell_s=10.0)
    result = pipeline.analyze_run(run, write=False)
    pipeline.write_report(result, out / "report-forked")
    pipeline.save_figures = lambda jobs, meanwhile=None: save_figures(jobs, meanwhile=meanwhile, parallel=False)
    pipeline.write_report(result, out / "report-serial")
    seen["report_files"] = sorted(p.name for p in (out / "report-forked").iterdir())
    seen["report_equal"] = [
        p.name for p in (out / "report-serial").iterdir()
        if p.read_bytes() == (out / "report-forked" / p.name).read_bytes()
    ]
    print(json.dumps(seen))
    """
)


@pytest.fixture(scope="module")
def seen(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("figures")
    done = subprocess.run(
        [sys.executable, "-c", SCENARIOS, str(out)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_forked_pngs_are_the_serial_ones_byte_for_byte(seen):
    assert seen["safe"] is True
    assert seen["forked_pids"]["a"] != 0  # the first half in a child
    assert seen["forked_pids"]["b"] == seen["forked_pids"]["a"]
    assert seen["forked_pids"]["c"] == 0  # the rest in this process
    assert seen["serial_pids"] == {"a": 0, "b": 0, "c": 0}
    assert seen["bytes_equal"] is True
    assert seen["pixels_equal"] is True


def test_a_whole_report_forked_is_the_serial_one(seen):
    expected = ["errors.png", "index.html", "latency.png", "steps.csv", "summary.md", "throughput.png"]
    expected += ["timeline.png", "verdict.json"]
    assert seen["report_files"] == expected
    assert sorted(seen["report_equal"]) == expected


def test_a_figure_failing_in_a_child_raises_the_serial_error(seen):
    assert seen["raised_forked"] == ["ValueError", "no data for a"]
    assert seen["raised_forked"] == seen["raised_serial"]
    assert seen["raise_left"] == ["c.png"]  # this process's figure; a raised again here; no temporary file


def test_a_killed_child_leaves_its_figure_to_this_process(seen):
    assert seen["killed_pids"] == {"a": 0, "b": 0, "c": 0}  # the child's drawn again here after its SIGKILL
    assert seen["killed_left"] == ["a.png", "b.png", "c.png"]


def test_meanwhile_failing_ends_and_reaps_the_children(seen):
    assert seen["meanwhile_raised"] == ["OSError", "disk full"]
    assert seen["children_left"] is False
    assert seen["meanwhile_left"] == []


def test_another_thread_keeps_the_figures_serial(seen):
    assert seen["safe_with_a_thread"] is False
    assert seen["threaded_pids"] == {"a": 0, "b": 0, "c": 0}
    assert seen["safe_after_a_preload"] is True  # a background import that ends is waited for


def test_a_gevent_patched_process_never_forks(tmp_path):
    # this process: tests/conftest.py imports Locust, which patches it
    assert sys.modules["gevent.monkey"].is_module_patched("threading")
    assert fork_is_safe() is False
    pids = []
    jobs = [FigureJob(tmp_path / f"{n}.png", (3, 2), lambda ax: pids.append(threading.get_native_id())) for n in "ab"]
    save_figures(jobs)
    assert len(pids) == 2 and all((tmp_path / f"{n}.png").exists() for n in "ab")


def test_a_temporary_file_an_earlier_kill_left_is_removed(tmp_path):
    stale = tmp_path / ".a.png.99999.tmp"  # an earlier analysis killed while its child wrote a.png
    stale.write_bytes(b"")
    other = tmp_path / ".notes.txt.99999.tmp"  # not a figure's: left alone
    other.write_bytes(b"")
    save_figures([FigureJob(tmp_path / "a.png", (3, 2), lambda ax: ax.plot([1, 2], [1, 2]))])
    assert sorted(p.name for p in tmp_path.iterdir()) == [".notes.txt.99999.tmp", "a.png"]


DIES_WITH_PARENT = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    from llm_locust.analysis.report.figures import FigureJob, save_figures

    out, parent = Path(sys.argv[1]), os.getpid()

    def in_child(ax):  # the child's figure: it would draw for 30 s
        (out / "child.pid").write_text(str(os.getpid()))
        time.sleep(30)

    def in_parent(ax):  # this process's figure: once the child draws, this process is killed
        while not (out / "child.pid").exists():
            time.sleep(0.01)
        os.kill(parent, signal.SIGKILL)

    save_figures([FigureJob(out / "a.png", (3, 2), in_child), FigureJob(out / "b.png", (3, 2), in_parent)])
    """
)


def test_the_child_dies_with_a_killed_analysis(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", DIES_WITH_PARENT, str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == -9, done.stderr  # killed, as `kill -9` or an OOM kill would
    child = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)  # not drawing on into the report for its 30 s
    assert not (tmp_path / "a.png").exists()


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie not reaped yet counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"
