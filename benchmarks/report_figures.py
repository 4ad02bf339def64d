"""The report's PNGs and the whole ``write_report``: the way before (``savefig``, one after the
other) against the one-pass render, serial and forked (:mod:`llm_locust.analysis.report.figures`).

    .venv/bin/python benchmarks/report_figures.py [RUN_DIR] [--rounds 7] [--cold 7]

Analyses ``RUN_DIR`` once (without it, a 1,2,4,8 ladder made with ``llm-locust demo``, ~40 s),
then in each round, in this process (warm: imports, fonts and caches loaded by a first round that
is not counted), in turn:

- ``savefig serial``: each figure as before, ``Figure(layout="constrained")`` and ``savefig``;
- ``one-pass serial``: :func:`llm_locust.analysis.report.figures.save_figures` with ``parallel=False``;
- ``one-pass forked``: :func:`~llm_locust.analysis.report.figures.save_figures` (all figures but the last
  in forked children);
- ``write_report before`` / ``write_report now``: the whole report, its figures drawn the way
  before (and its other files after them) or the way now.

Prints the median of each over the rounds and its ratio to the same run's way before; also
whether the forked PNGs are byte-identical to the serial ones. With ``--cold N``, also each
``write_report`` way as ``llm-locust analyze`` meets it: once, cold, in a fresh process that has
analysed the run (N rounds, the ways in turn); wall time and CPU time (this process and its
children, ``resource.getrusage``). Why own code: the analysis
benchmarks (``analysis_scale.py``, ``startup.py``) time whole commands, where the figures'
share drowns in import and start-up noise on a shared 2-core machine.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matplotlib
from matplotlib.figure import Figure

from llm_locust.analysis import pipeline
from llm_locust.analysis.pipeline import analyze_run, write_report
from llm_locust.analysis.report import figures
from llm_locust.analysis.report.figures import FigureJob, fork_is_safe, save_figures


def savefig_serial(
    jobs: Sequence[FigureJob], *, meanwhile: Callable[[], None] | None = None, parallel: bool = True
) -> None:
    """The figures as ``write_report`` drew them before: ``savefig`` of a constrained-layout figure."""
    for job in jobs:
        fig = Figure(figsize=job.size_in, layout="constrained")
        job.draw(fig.add_subplot())
        fig.savefig(job.path)
    if meanwhile is not None:
        meanwhile()


def make_run(path: Path) -> Path:
    """A small real run directory from ``llm-locust demo`` (embedded server, ladder 1,2,4,8)."""
    command = [str(Path(sys.executable).parent / "llm-locust"), "demo", "--run-dir", str(path), "--ladder", "1,2,4,8",
               "--dwell-s", "8", "--warmup-s", "2", "--workers", "1"]  # fmt: skip
    subprocess.run(command, check=False, stdout=subprocess.DEVNULL)
    return path


def cold_one(run_dir: Path, way: str, out: Path) -> None:
    """Analyse ``run_dir`` in this fresh process, then time one ``write_report`` the ``way`` given
    (``before``, ``serial``, ``forked``); prints wall and CPU seconds."""
    result = analyze_run(run_dir, write=False)
    if way == "before":
        _use(savefig_serial)
    elif way == "serial":
        _use(serial)
    cpu = _cpu_s()
    started = time.perf_counter()
    write_report(result, out)
    print(time.perf_counter() - started, _cpu_s() - cpu)


def serial(jobs: Sequence[FigureJob], *, meanwhile: Callable[[], None] | None = None) -> None:
    """:func:`save_figures` without forking."""
    save_figures(jobs, meanwhile=meanwhile, parallel=False)


def _use(save: Callable[..., None]) -> None:
    """Make ``write_report`` draw its figures with ``save`` (a stand-in for :func:`save_figures`)."""
    pipeline.save_figures = save  # type: ignore[assignment]


def _cpu_s() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def cold(run_dir: Path, rounds: int, out: Path) -> None:
    """``rounds`` rounds of :func:`cold_one` for each way, each in a fresh process; prints medians."""
    ways = ("before", "serial", "forked")
    wall: dict[str, list[float]] = {way: [] for way in ways}
    cpu: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(rounds):
        for way in ways:
            command = [sys.executable, __file__, str(run_dir), "--cold-one", way, "--out", str(out / f"cold-{way}")]
            line = subprocess.run(command, check=True, capture_output=True, text=True).stdout.split()
            wall[way].append(float(line[-2]))
            cpu[way].append(float(line[-1]))
    print(f"cold write_report, one per fresh process, medians of {rounds} rounds:")
    for way in ways:
        median, base = statistics.median(wall[way]), statistics.median(wall["before"])
        print(f"  {way:<20} {median:6.3f} s  x{median / base:.2f}  CPU {statistics.median(cpu[way]):.3f} s"
              f"  (wall min {min(wall[way]):.3f}, max {max(wall[way]):.3f})")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", nargs="?", type=Path, help="a run directory (default: make one)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cold", type=int, default=0, help="rounds of cold write_report in fresh processes")
    parser.add_argument("--cold-one", choices=("before", "serial", "forked"), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cold_one:
        cold_one(args.run_dir, args.cold_one, args.out)
        return 0
    with tempfile.TemporaryDirectory(prefix="report-figures-") as tmp:
        out = Path(tmp)
        run_dir = args.run_dir or make_run(out / "run")
        if args.cold:
            cold(run_dir, args.cold, out)
        result = analyze_run(run_dir, write=False)
        captured: list[FigureJob] = []

        def capture(jobs: Sequence[FigureJob], *, meanwhile: Callable[[], None] | None = None) -> None:
            captured.extend(jobs)

        _use(capture)
        write_report(result, out / "capture")

        def retarget(name: str) -> list[FigureJob]:
            (out / name).mkdir(exist_ok=True)
            return [FigureJob(out / name / j.path.name, j.size_in, j.draw) for j in captured]

        def report_with(save: Callable[..., None]) -> Callable[[], None]:
            def run() -> None:
                _use(save)
                write_report(result, out / "report")

            return run

        ways: dict[str, Callable[[], None]] = {
            "savefig serial": lambda: savefig_serial(retarget("savefig")),
            "one-pass serial": lambda: save_figures(retarget("serial"), parallel=False),
            "one-pass forked": lambda: save_figures(retarget("forked")),
            "write_report before": report_with(savefig_serial),
            "write_report now": report_with(figures.save_figures),
        }
        times: dict[str, list[float]] = {name: [] for name in ways}
        with matplotlib.rc_context(cast(Any, pipeline.PLOT_STYLE)):
            for round_ in range(args.rounds + 1):
                for name, way in ways.items():
                    started = time.perf_counter()
                    way()
                    if round_:  # the first round warms up
                        times[name].append(time.perf_counter() - started)
        same = all(
            (out / "serial" / j.path.name).read_bytes() == (out / "forked" / j.path.name).read_bytes() for j in captured
        )
    print(f"{len(captured)} figures ({', '.join(j.path.name for j in captured)}); fork safe here: {fork_is_safe()}; "
          f"forked PNGs byte-identical to serial: {same}; medians of {args.rounds} rounds")  # fmt: skip
    for name, values in times.items():
        base = statistics.median(times["write_report before" if name.startswith("write_report") else "savefig serial"])
        median = statistics.median(values)
        print(f"  {name:<20} {median:6.3f} s  x{median / base:.2f}  (min {min(values):.3f}, max {max(values):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
