"""Analysis and the master's end-of-run client report at a million requests, beside a 100-row run.

    python benchmarks/analysis_scale.py [--from RUN_DIR] [--rows 1000000] [--hours 24] [--keep DIR]
                                        [--only analyze|report] [--repeat 3]

Builds two synthetic run directories from one real small run (``--from``; without it, one is made
with ``llm-locust demo``: the embedded server, a 1,2,4,8,16 ladder, ~45 s): the big one holds
``--rows`` requests over ``--hours`` hours and a vLLM-format server log of the same span
(``benchmarks/serverlog_parse.py``'s writer), the small one ``--small-rows`` requests and a
six-minute log (``--keep DIR`` keeps them, and a later run with the same ``--keep`` reuses what
is built there instead of building it again). Every request row is a real row of the source run (each step's rows repeated
in turn, evenly spread over the step, the ladder stretched to the whole span), with its own
``request_id`` and ``t_start_s``.

Then, each in a process of its own (time and peak RSS from ``os.wait4``):

- ``llm-locust analyze`` of each run directory, the median of ``--repeat`` runs (targets: 10 s, 1 GiB);
- the master's end of run (:class:`llm_locust.master.clientreport.ClientReport`): every row fed
  as the master gets them (``add_rows``, batches of 500), then ``client_report.json`` written,
  pooled ITL included; the time and peak RSS of that end-of-run step alone are printed by the
  child (targets: 5 s, 1 GiB).

Prints a table with the ratios big / small. Exit status 0 when every target was met.
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

ANALYZE_TARGET_S, REPORT_TARGET_S, TARGET_RSS_MB = 10.0, 5.0, 1024.0
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--from", dest="source", type=Path, help="a small real run directory (default: make one)")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--small-rows", type=int, default=100)
    parser.add_argument("--keep", type=Path, help="build the run directories here and keep them (reused when built)")
    parser.add_argument("--only", choices=("analyze", "report"), help="measure only analyze, or only the client report")
    parser.add_argument(
        "--repeat", type=int, default=3, help="analyze runs per directory; medians reported (default 3)"
    )
    parser.add_argument("--client-report-child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client_report_child:
        client_report_child(args.client_report_child)
        return 0
    work = args.keep or Path(tempfile.mkdtemp(prefix="analysis-scale-"))
    try:
        t = time.perf_counter()
        built = [work / name for name in ("big", "small")]
        if all((path / "server.log").is_file() for path in built):  # the last file build_run writes
            big, small = built
            print(f"reusing the run directories in {work}")
        else:
            source = args.source or make_source(work / "source")
            big = build_run(source, work / "big", rows=args.rows, hours=args.hours)
            small = build_run(source, work / "small", rows=args.small_rows, hours=0.1)
        size_mb = (big / "requests.csv").stat().st_size / 1e6
        log_mb = (big / "server.log").stat().st_size / 1e6
        print(f"built in {time.perf_counter() - t:.0f} s: {args.rows:,} requests ({size_mb:.0f} MB requests.csv), "
              f"{args.hours:g} h server log ({log_mb:.0f} MB); small: {args.small_rows} requests, 6 min log")  # fmt: skip
        analyze = [str(Path(sys.executable).parent / "llm-locust"), "analyze"]
        child = [sys.executable, __file__, "--client-report-child"]
        results = {}
        for name, run in (("small", small), ("big", big)):
            if args.only != "report":  # medians of --repeat runs: one run moves by 1-2 s here
                runs = [measure([*analyze, str(run)])[:3] for _ in range(args.repeat)]
                results["analyze", name] = tuple(statistics.median(r[k] for r in runs) for k in range(3))
            if args.only != "analyze":
                _, _, rss_mb, out = measure([*child, str(run)])
                results["client report (end of run)", name] = (
                    _field(out, "end_s"), _field(out, "end_cpu_s"), _field(out, "end_peak_rss_mb"))  # fmt: skip
                results["client report (rows fed)", name] = (_field(out, "feed_s"), _field(out, "feed_cpu_s"), rss_mb)
                add_cpu_s = _field(out, "add_cpu_s")  # what the master pays while the run goes on
                results["  of which add_rows", name] = (add_cpu_s, add_cpu_s, float("nan"))
        print(f"{'':28}{'small s':>9}{'big s':>9}{'ratio':>7}{'small cpu':>11}{'big cpu':>9}{'ratio':>7}"
              f"{'small MiB':>11}{'big MiB':>9}{'ratio':>7}")  # fmt: skip
        ok = True
        for what in ("analyze", "client report (end of run)", "client report (rows fed)", "  of which add_rows"):
            if (what, "big") not in results:
                continue
            (s_s, s_cpu, s_mb), (b_s, b_cpu, b_mb) = results[what, "small"], results[what, "big"]
            print(f"{what:28}{s_s:9.2f}{b_s:9.2f}{_ratio(b_s, s_s):7.1f}{s_cpu:11.2f}{b_cpu:9.2f}"
                  f"{_ratio(b_cpu, s_cpu):7.1f}{s_mb:11.0f}{b_mb:9.0f}{_ratio(b_mb, s_mb):7.1f}")  # fmt: skip
        print(
            "(s: wall time; cpu: user + system time, s; MiB: peak RSS; rows fed: the child's read of requests.csv"
            " and ClientReport.add_rows, the latter's CPU alone on the next line)"
        )
        for what, target_s in (("analyze", ANALYZE_TARGET_S), ("client report (end of run)", REPORT_TARGET_S)):
            if (what, "big") not in results:
                continue
            b_s, _, b_mb = results[what, "big"]
            met = b_s <= target_s and b_mb <= TARGET_RSS_MB
            ok &= met
            print(f"{what}: {b_s:.1f} s, {b_mb:.0f} MiB; target <= {target_s:g} s and <= {TARGET_RSS_MB:g} MiB: "
                  f"{'met' if met else 'NOT met'}")  # fmt: skip
        return 0 if ok else 1
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
