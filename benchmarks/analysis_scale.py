"""Analysis and the master's end-of-run client report at a million (and ten million) requests, beside a 100-row run.

    python benchmarks/analysis_scale.py [--from RUN_DIR] [--rows 1000000] [--ten-million] [--hours 24]
                                        [--keep DIR] [--only analyze|report] [--repeat 3] [--no-csv]

Builds synthetic run directories from one real small run (``--from``; without it, one is made
with ``llm-locust demo``: the embedded server, a 1,2,4,8,16 ladder, ~45 s): the big one holds
``--rows`` requests over ``--hours`` hours and a vLLM-format server log of the same span
(``benchmarks/serverlog_parse.py``'s writer), ``--ten-million`` adds one of 10,000,000 requests
(a 7 GB ``requests.csv``: about 2 minutes to build, 1-2 minutes to measure), the small one
``--small-rows`` requests and a six-minute log (``--keep DIR`` keeps them, and a later run with the
same ``--keep`` reuses what is built there instead of building it again). Every request row is a
real row of the source run (each step's rows repeated in turn, evenly spread over the step, the
ladder stretched to the whole span), with its own ``request_id`` and ``t_start_s``. Each run
directory then gets ``requests.arrow`` as the master writes it at the end of a run
(``RunDirectory.close``; timed in a child: "requests.arrow (end of run)").

Then, each in a process of its own (time and peak RSS from ``os.wait4``):

- ``llm-locust analyze`` of each run directory, the median of ``--repeat`` runs; for each big one
  also of the same files without ``requests.arrow`` ("CSV only": a run directory written before
  the Arrow file existed, the baseline measured in the same run; ``--no-csv`` skips it). Targets
  (issue 29): 1M requests <= 5 s and <= 512 MiB, 10M <= 60 s and <= 2 GiB;
- the master's end of run (:class:`llm_locust.master.clientreport.ClientReport`): every row fed
  as the master gets them (``add_rows``, batches of 500), then ``client_report.json`` written,
  pooled ITL included; the time and peak RSS of that end-of-run step alone are printed by the
  child (target: 5 s, 1 GiB), for the small run and the first big one.

Prints a table with the ratios big / small and columnar / CSV only. Exit status 0 when every
target was met.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from serverlog_parse import START_S, write_log

_CHUNK_ROWS = 50_000


def make_source(path: Path) -> Path:
    """A small real run directory: ``llm-locust demo`` (embedded server, ladder 1,2,4,8,16: past its
    8 slots, so the demo finds what it expects and exits 0)."""
    command = [str(Path(sys.executable).parent / "llm-locust"), "demo", "--run-dir", str(path), "--ladder", "1,2,4,8,16",
               "--dwell-s", "8", "--warmup-s", "2", "--workers", "1"]  # fmt: skip
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return path


def build_run(source: Path, target: Path, *, rows: int, hours: float) -> Path:
    """Write a synthetic run directory of ``rows`` requests over ``hours`` from ``source``."""
    meta = json.loads((source / "run.json").read_text())
    requests = pd.read_csv(source / "requests.csv", dtype=str, keep_default_na=False)
    starts = requests["t_start_s"].astype(float)
    steps = sorted(meta["shape"]["steps"], key=lambda s: s["start_s"])
    step_of = np.searchsorted([s["start_s"] for s in steps], starts.to_numpy(), side="right") - 1
    per_step = [requests[step_of == k] for k in range(len(steps))]
    span_s, n_source = hours * 3600.0, sum(len(p) for p in per_step)
    step_s = span_s / len(steps)
    source_step_s = float(np.median([(s["end_s"] or meta["ended_at_s"]) - s["start_s"] for s in steps]))
    target.mkdir(parents=True)
    columns = list(requests.columns)
    assert columns[0] == "request_id" and columns[3] == "t_start_s", columns  # the writer's order
    written = 0
    with open(target / "requests.csv", "w", newline="", encoding="utf-8") as out:
        out.write(_render(columns))
        for k, part in enumerate(per_step):
            count = round(rows * len(part) / n_source) if k < len(steps) - 1 else rows - written
            # each source row rendered once as the writer renders it (csv, minimal quoting): the
            # cells around request_id and t_start_s
            middles = [_render(list(r[1:3]))[:-2] for r in part.itertuples(index=False)]
            tails = [_render(list(r[4:])) for r in part.itertuples(index=False)]
            n = len(part)
            step_start = START_S + k * step_s
            for first in range(0, count, _CHUNK_ROWS):
                out.write("".join(
                    f"{k}-{i},{middles[i % n]},{step_start + step_s * (i + 0.5) / count!r},{tails[i % n]}"
                    for i in range(first, min(count, first + _CHUNK_ROWS))
                ))  # fmt: skip
            written += count
    meta["started_at_s"], meta["ended_at_s"], meta["utc_offset_s"] = START_S, START_S + span_s, 0
    meta["shape"]["warmup_s"] = float(meta["shape"].get("warmup_s") or 0.0) * step_s / source_step_s
    meta["shape"]["dwell_s"] = step_s
    meta["shape"]["steps"] = [
        {**s, "start_s": START_S + k * step_s, "end_s": START_S + (k + 1) * step_s} for k, s in enumerate(steps)
    ]
    for key in ("server_log", "server_log_cmd", "workers_lost"):
        meta.pop(key, None)
    (target / "run.json").write_text(json.dumps(meta, indent=2))
    write_log(target / "server.log", hours=hours, stats_interval_s=2.0, requests_per_s=rows / span_s)
    return target


def _render(cells: list[str]) -> str:
    """One CSV row as ``llm_locust/master/runwriter.py``'s writer writes it (``csv``, ``\\r\\n``)."""
    buffer = io.StringIO()
    csv.writer(buffer).writerow(cells)
    return buffer.getvalue()


def measure(command: list[str]) -> tuple[float, float, float, str]:
    """Run ``command``; its wall time (s), CPU time (user + system, s), peak RSS (MiB, from
    ``os.wait4``) and stdout."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(process.pid, 0)
        elapsed = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if process.returncode:
            raise SystemExit(f"{command} failed ({process.returncode}):\n{err.read()[-3000:]}")
        return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out.read()


def client_report_child(run_dir: Path) -> None:
    """In a child process: feed every row of ``requests.csv`` to a :class:`ClientReport` in
    batches of 500 (as the master gets them), then write ``client_report.json``; print the feed
    time, the end-of-run time and the end-of-run peak RSS (the peak reset first, ``clear_refs``)."""
    from locust.env import Environment

    from llm_locust.client.record import CSV_COLUMNS
    from llm_locust.master.clientreport import ClientReport

    report = ClientReport(Environment())
    start, cpu, add_cpu_s = time.perf_counter(), time.process_time(), 0.0
    options = pacsv.ConvertOptions(strings_can_be_null=False, column_types=None)
    reader = pacsv.open_csv(run_dir / "requests.csv", convert_options=options,
                            read_options=pacsv.ReadOptions(block_size=1 << 22),
                            parse_options=pacsv.ParseOptions(newlines_in_values=True))  # fmt: skip
    for batch in reader:
        # in the order of the writer's current columns (a run written before a column was added: "")
        cells = {name: column.cast(pa.string()).to_pylist() for name, column in zip(batch.schema.names, batch.columns)}
        empty = [""] * batch.num_rows
        rows = list(zip(*(cells.get(name, empty) for name in CSV_COLUMNS)))
        for first in range(0, len(rows), 500):
            added = time.process_time()
            report.add_rows(rows[first : first + 500])
            add_cpu_s += time.process_time() - added
    feed_s, feed_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    Path("/proc/self/clear_refs").write_text("5")
    start, cpu = time.perf_counter(), time.process_time()
    written = report.write(run_dir / "client_report.json", run_dir / "requests.csv")
    end_s, end_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    peak_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    print(f"feed_s={feed_s:.3f} feed_cpu_s={feed_cpu_s:.3f} add_cpu_s={add_cpu_s:.3f} end_s={end_s:.3f} end_cpu_s={end_cpu_s:.3f} end_peak_rss_mb={peak_kb / 1024:.1f} "
          f"requests={written['requests']}")  # fmt: skip
    print(json.dumps(written["itl_ms"]))


def _ratio(big: float, small: float) -> float:
    return big / small if small else float("nan")


def _field(out: str, name: str) -> float:
    return next(float(t.split("=", 1)[1]) for t in out.split() if t.startswith(name + "="))


def arrow_child(run_dir: Path) -> None:
    """In a child process: what the master does at the end of a run after ``requests.csv``'s last
    row, ``requests.arrow`` written from it (``RunDirectory.close``)."""
    from llm_locust.analysis.rundir.columnar import write_requests_arrow

    written = write_requests_arrow(run_dir / "requests.csv")
    if written is None:
        raise SystemExit(f"{run_dir}: no requests.arrow written (the typed reader refused requests.csv)")


def csv_twin(run: Path, target: Path) -> Path:
    """A run directory with ``run``'s files but no ``requests.arrow`` (hard links, no copy): as a
    run directory written before the Arrow file existed, the baseline the analysis measures
    against in the same run."""
    target.mkdir(parents=True, exist_ok=True)
    for name in ("run.json", "requests.csv", "server.log"):
        if not (target / name).exists():
            os.link(run / name, target / name)
    return target


TARGETS: dict[int, tuple[float, float]] = {1_000_000: (5.0, 512.0), 10_000_000: (60.0, 2048.0)}
"""Requests -> (seconds, MiB) goals of ``llm-locust analyze`` (issue 29)."""

REPORT_TARGET: tuple[float, float] = (5.0, 1024.0)
"""(seconds, MiB) goal of the master's end-of-run client report (issue 15)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--from", dest="source", type=Path, help="a small real run directory (default: make one)")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--ten-million", action="store_true",
                        help="also 10,000,000 requests (7 GB requests.csv; builds for a few minutes)")  # fmt: skip
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--small-rows", type=int, default=100)
    parser.add_argument("--keep", type=Path, help="build the run directories here and keep them (reused when built)")
    parser.add_argument("--only", choices=("analyze", "report"), help="measure only analyze, or only the client report")
    parser.add_argument("--no-csv", action="store_true", help="skip the CSV-only baseline of the big runs")
    parser.add_argument(
        "--repeat", type=int, default=3, help="analyze runs per directory; medians reported (default 3)"
    )
    parser.add_argument("--client-report-child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--arrow-child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client_report_child:
        client_report_child(args.client_report_child)
        return 0
    if args.arrow_child:
        arrow_child(args.arrow_child)
        return 0
    work = args.keep or Path(tempfile.mkdtemp(prefix="analysis-scale-"))
    sizes = [args.rows] + ([10_000_000] if args.ten_million and args.rows != 10_000_000 else [])
    try:
        source = None
        child = [sys.executable, __file__]
        results: dict[tuple[str, str], tuple[float, float, float]] = {}
        runs: dict[str, Path] = {}
        for name, rows, hours in [("small", args.small_rows, 0.1)] + [(f"{n:,}", n, args.hours) for n in sizes]:
            path = work / ("small" if name == "small" else f"big-{rows}")
            t = time.perf_counter()
            if (path / "requests.arrow").is_file():  # the last file written
                print(f"{name}: reusing {path}")
            else:
                shutil.rmtree(path, ignore_errors=True)
                source = source or args.source or make_source(work / "source")
                build_run(source, path, rows=rows, hours=hours)
                built_s = time.perf_counter() - t
                # requests.arrow as the master writes it at the end of a run, timed in a child
                results["requests.arrow (end of run)", name] = measure([*child, "--arrow-child", str(path)])[:3]
                size_mb = (path / "requests.csv").stat().st_size / 1e6
                arrow_mb = (path / "requests.arrow").stat().st_size / 1e6
                log_mb = (path / "server.log").stat().st_size / 1e6
                print(f"{name}: built in {built_s:.0f} s: {rows:,} requests ({size_mb:,.0f} MB requests.csv, "
                      f"{arrow_mb:,.0f} MB requests.arrow), {hours:g} h server log ({log_mb:.0f} MB)")  # fmt: skip
            runs[name] = path
        analyze = [str(Path(sys.executable).parent / "llm-locust"), "analyze"]
        measured: list[tuple[str, Path]] = [("analyze", runs["small"])]
        for n in sizes:
            measured.append(("analyze", runs[f"{n:,}"]))
            if not args.no_csv:
                measured.append(("analyze, CSV only", csv_twin(runs[f"{n:,}"], work / f"big-{n}-csv")))
        if args.only != "report":
            for what, run in measured:
                name = "small" if run == runs["small"] else f"{int(run.name.split('-')[1]):,}"
                # medians of --repeat runs: one run moves by 1-2 s here
                timings = [measure([*analyze, str(run)])[:3] for _ in range(args.repeat)]
                wall, cpu, mb = (statistics.median(r[k] for r in timings) for k in range(3))
                results[what, name] = (wall, cpu, mb)
        if args.only != "analyze":
            for name in ("small", f"{sizes[0]:,}"):
                _, _, rss_mb, out = measure([*child, "--client-report-child", str(runs[name])])
                results["client report (end of run)", name] = (
                    _field(out, "end_s"), _field(out, "end_cpu_s"), _field(out, "end_peak_rss_mb"))  # fmt: skip
                results["client report (rows fed)", name] = (_field(out, "feed_s"), _field(out, "feed_cpu_s"), rss_mb)
                add_cpu_s = _field(out, "add_cpu_s")  # what the master pays while the run goes on
                results["  of which add_rows", name] = (add_cpu_s, add_cpu_s, float("nan"))
        return report(results, sizes)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


def report(results: dict[tuple[str, str], tuple[float, float, float]], sizes: list[int]) -> int:
    """Print the table (and the ratios: to the small run, and columnar / CSV only); 0 when every
    target of :data:`TARGETS` was met."""
    print(f"{'':30}{'requests':>12}{'wall s':>9}{'cpu s':>9}{'peak MiB':>10}"
          f"{'/ small (wall, MiB)':>21}{'/ CSV only (wall, MiB)':>24}")  # fmt: skip
    whats = ("analyze", "analyze, CSV only", "requests.arrow (end of run)", "client report (end of run)",
             "client report (rows fed)", "  of which add_rows")  # fmt: skip
    for what in whats:
        for name in ["small"] + [f"{n:,}" for n in sizes]:
            if (what, name) not in results:
                continue
            wall, cpu, mb = results[what, name]
            small = results.get((what if what != "analyze, CSV only" else "analyze", "small"))
            to_small = f"{_ratio(wall, small[0]):.1f}, {_ratio(mb, small[2]):.1f}" if small and name != "small" else ""
            csv_only = results.get(("analyze, CSV only", name)) if what == "analyze" else None
            to_csv = f"{_ratio(wall, csv_only[0]):.2f}, {_ratio(mb, csv_only[2]):.2f}" if csv_only else ""
            print(f"{what:30}{name:>12}{wall:9.2f}{cpu:9.2f}{mb:10.0f}{to_small:>21}{to_csv:>24}")
    print("(wall: seconds; cpu: user + system, s; peak MiB: peak RSS (os.wait4; for the client report's end of run"
          " the child's own peak after the feed); CSV only: the same run directory without requests.arrow)")  # fmt: skip
    ok = True
    for n in sizes:
        if (("analyze", f"{n:,}") not in results) or n not in TARGETS:
            continue
        wall, _, mb = results["analyze", f"{n:,}"]
        target_s, target_mb = TARGETS[n]
        met = wall <= target_s and mb <= target_mb
        ok &= met
        print(f"analyze, {n:,} requests: {wall:.1f} s, {mb:.0f} MiB; target <= {target_s:g} s and <= {target_mb:g} MiB: "
              f"{'met' if met else 'NOT met'}")  # fmt: skip
    if ("client report (end of run)", f"{sizes[0]:,}") in results:
        wall, _, mb = results["client report (end of run)", f"{sizes[0]:,}"]
        met = wall <= REPORT_TARGET[0] and mb <= REPORT_TARGET[1]
        ok &= met
        print(f"client report (end of run), {sizes[0]:,} requests: {wall:.1f} s, {mb:.0f} MiB; target <= "
              f"{REPORT_TARGET[0]:g} s and <= {REPORT_TARGET[1]:g} MiB: {'met' if met else 'NOT met'}")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
