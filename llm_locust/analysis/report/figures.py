"""Draw and save the report's PNGs, on two cores when the machine has them.

The four figures of a report take about three quarters of :func:`llm_locust.analysis.pipeline.write_report`
(0.2-0.45 s each, warm, on a 2-core machine: matplotlib's text and tick layout, no single hot
spot). They do not depend on each other, so :func:`save_figures` draws the first half in one
forked child while this process draws the rest and does the report's other writes. One child,
not one per figure: each child costs ~0.15 s of CPU (the fork's copied pages, fonts opened
again, caches warmed again), three of them ~0.5 s, for no more cores.

Own code, not :mod:`multiprocessing` or :mod:`concurrent.futures`: a pool re-imports the
analysis in each worker (spawn, seconds) or pickles the figures' data (the closures of the plot
calls cannot be); a bare :func:`os.fork` child inherits the drawn data and the rc settings, draws
its figures and leaves with :func:`os._exit`. It is used only when that is safe:

- no other Python thread is alive (the background imports, :func:`llm_locust.preload.preload_modules`
  and the analysis's kneed import, are given a moment to finish; a thread in the middle of
  something could hold a lock the child then waits on for ever);
- the process is not patched by gevent (a Locust master: its hub and its threads are not fork-safe);
- Linux (not macOS: see :func:`fork_is_safe`), two usable cores or more, and two figures or
  more (or one, and other writes to do meanwhile).

Native threads that every such process has are fork-safe: OpenBLAS (numpy) and jemalloc (pyarrow)
register ``pthread_atfork`` handlers, and the children call neither pyarrow nor a thread pool.
matplotlib clears its font cache in a forked child (``font_manager`` registers that at fork), so a
child opens its own font files instead of sharing the parent's file offsets.

A child that fails (an exception, a signal) costs nothing but time: this process then draws the
child's figures itself, so the error raised is the one the serial path raises, with its own
traceback, and a PNG is never silently missing. Each PNG (this process's too) is written under a
temporary name and renamed, so an interrupted or killed analysis leaves no half-written PNG under
its name; the child is killed with this process (``PR_SET_PDEATHSIG``), and the next analysis
removes the temporary file a kill left behind.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from llm_locust.analysis.atomicwrite import temp_path, write_atomic

PRELOAD_THREAD = "llm-locust-preload"
"""Name of the background import threads (:mod:`llm_locust.preload`, the analysis's kneed
import) that :func:`save_figures` waits for before it forks."""

PRELOAD_JOIN_S = 0.2
"""Longest wait, s, for each such thread to end; one still running then keeps the figures serial."""


@dataclass(frozen=True, slots=True)
class FigureJob:
    """One PNG to write: a figure of ``size_in`` (width, height; inches) with one Axes that
    ``draw`` draws on, saved to ``path`` at the ``savefig.dpi`` rc setting (``figure.dpi`` when
    that is ``"figure"``)."""

    path: Path
    size_in: tuple[float, float]
    draw: Callable[[Axes], None]


def save_figure(job: FigureJob) -> None:
    """Draw ``job`` and write its PNG in one rendering pass, under a temporary name then renamed.

    The figure is made at the ``savefig.dpi`` rc setting and printed by its Agg canvas: the
    bytes are those of ``Figure.savefig`` (constrained layout runs inside the draw), without the
    extra layout-only draw that ``savefig`` makes first for any figure with a layout engine
    (~10-20 % of a figure's time).

    Parameters
    ----------
    job : FigureJob

    Raises
    ------
    Exception
        Whatever ``job.draw`` or the PNG writer raises.
    """
    import matplotlib

    dpi = matplotlib.rcParams["savefig.dpi"]  # "figure": the figure's own, as savefig takes it
    fig = Figure(figsize=job.size_in, dpi=None if dpi == "figure" else dpi, layout="constrained")
    job.draw(fig.add_subplot())
    write_atomic(job.path, FigureCanvasAgg(fig).print_png)  # never a half-written PNG under its name


def save_figures(
    jobs: Sequence[FigureJob],
    *,
    meanwhile: Callable[[], None] | None = None,
    parallel: bool = True,
) -> None:
    """Write every job's PNG; with ``parallel`` and :func:`fork_is_safe`, the first half in a
    forked child while this process draws the rest and runs ``meanwhile``.

    Parameters
    ----------
    jobs : sequence of FigureJob
    meanwhile : callable, optional
        Other work of this process (no arguments), run after its own figures and before the
        child is waited for; in the serial path after every figure.
    parallel : bool, default True
        False: draw every figure in this process (what an unsafe process gets anyway).

    Raises
    ------
    Exception
        What drawing a figure raised (a failed child's figures are drawn again here, so it is
        the serial path's exception), or what ``meanwhile`` raised; the child is ended and
        reaped before either propagates.
    """
    jobs = list(jobs)
    for job in jobs:  # what an earlier analysis killed mid-write left (its own pid in the name)
        for stale in job.path.parent.glob(temp_path(job.path, "*").name):
            stale.unlink(missing_ok=True)
    half = (len(jobs) + 1) // 2 if parallel and (len(jobs) >= 2 or meanwhile is not None) and fork_is_safe() else 0
    pid = _fork_drawing(jobs[:half]) if half else None  # None: serial, or the fork failed
    theirs = jobs[:half] if pid is not None else []
    code = None
    try:
        for job in jobs[len(theirs) :]:
            save_figure(job)
        if meanwhile is not None:
            meanwhile()
        code = _wait(pid) if pid is not None else 0
    finally:
        if pid is not None:
            if code is None:  # this process is raising: end the child first
                _end(pid)
            for job in theirs:  # what a failed child left half-written
                temp_path(job.path, pid).unlink(missing_ok=True)
    for job in theirs if code else []:  # again here: the serial path's exception, or the PNGs after all
        save_figure(job)


def fork_is_safe() -> bool:
    """Whether :func:`save_figures` may fork: Linux (on macOS a forked child of a process that
    loaded system frameworks can crash; Python's own multiprocessing spawns there), two usable
    cores or more, no gevent patching, and no other Python thread alive once the background
    imports had :data:`PRELOAD_JOIN_S` to end (the module docstring says why)."""
    if not sys.platform.startswith("linux") or _usable_cores() < 2:  # macOS: system libraries forbid it
        return False
    monkey = sys.modules.get("gevent.monkey")
    if monkey is not None and any(monkey.is_module_patched(name) for name in ("threading", "os", "socket")):
        return False
    me = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not me and thread.name == PRELOAD_THREAD:
            thread.join(PRELOAD_JOIN_S)
    return me is threading.main_thread() and threading.active_count() == 1


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _fork_drawing(group: list[FigureJob]) -> int | None:
    """Fork a child that writes each job's PNG of ``group`` in turn (to a temporary name, then
    renamed) and exits 0, or 1 at the first failure; its pid, or None when ``fork`` failed.

    Signals that would reach the child through this process's handlers are blocked across the
    fork: the child ignores SIGINT (a terminal's Ctrl-C reaches the whole process group; this
    process decides) and dies of SIGTERM, SIGHUP and SIGQUIT, leaving its figures to this one."""
    stop = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT}
    parent_pid = os.getpid()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    try:
        with warnings.catch_warnings():  # Python >= 3.12 warns of native threads: see the module docstring
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except OSError:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        return None
    if pid:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        return pid
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for signum in stop - {signal.SIGINT}:
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        _die_with_parent(parent_pid)
        for job in group:
            save_figure(job)
        code = 0
    finally:
        os._exit(code)  # never back into the parent's code (or a test runner's)


PR_SET_PDEATHSIG = 1
"""``prctl`` option (``linux/prctl.h``): the signal a process gets when the thread that forked it ends."""


def _die_with_parent(parent_pid: int) -> None:
    """In the child: be killed (SIGKILL) when this process's parent dies, so a parent killed by a
    signal it does not handle (SIGTERM, SIGKILL) leaves no child drawing on into its report;
    the next analysis removes the temporary file the child leaves (:func:`save_figures`)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # no prctl: the child finishes its figures on its own
        pass
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)


def _wait(pid: int) -> int:
    """Reap the child ``pid``; its exit code (negative: the signal that ended it)."""
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _end(pid: int) -> None:
    """Kill and reap the child ``pid`` (this process is raising)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:  # exited already; not reaped yet, so the pid is still ours
        pass
    _wait(pid)
