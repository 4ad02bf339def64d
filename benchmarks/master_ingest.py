"""The master's record intake: what one core takes, lag and loss at rising offered rates.

    .venv/bin/python benchmarks/master_ingest.py                 # ~3 min: 0, 10k, 25k, 50k, 100k, 200k records/s
    .venv/bin/python benchmarks/master_ingest.py --rates 50000 --workers 2 --rounds 3

For each offered rate: a real Locust master (llm-locust's recorder, ``--run-dir``) and
``--workers`` real workers whose users produce fake records at that rate in all
(``benchmarks/ingest_locustfile.py``: each counted in Locust's stats and queued on the worker's
record shipper as a real record is; realistic rows of 64 token times) for ``--produce-s``
seconds, in a test of ``--run-s`` seconds. Every round first runs the same test with 0 records
offered: the baseline, whose master CPU is what the run costs without records (Locust's stats,
heartbeats, clock pings, the background import of pandas and the analysis for the client report,
``llm_locust/preload.py``, the run directory's files). Figures (medians over ``--rounds``):

- **taken/s**: records the master wrote before the test began to stop, per second of the test
  (bounded by the workers' 3 s report interval, not by the master);
- **CPU s**: the master's CPU time (user + system, ``/proc/PID/stat``) from the test's start to
  the log line that ends the intake (its last records written; not start-up nor the client
  report); the baseline's is the ``0`` row;
- **per CPU s**: records / CPU s, the run's fixed costs included (they dominate at low rates);
- **marginal**: records / (CPU s - the baseline's CPU s): records per CPU second spent on
  records alone - message decoding, Locust's stats, the writer, the client report's
  accumulation. This is what "records per second a core can take" means: the baseline is a
  cost per run, not per second (mostly the background import: a baseline of ``-t 16`` costs
  what one of ``-t 6`` does, to the noise), so a loaded run's longer window adds nothing to it,
  and it comes on top once per run;
- **core**: CPU s / wall s of that window: how much of a core the master used (near 1: the core
  was the limit, as at 200,000 offered with one worker; the per-CPU-s figures are then what a
  saturated core takes);
- **busy rate**: records per second of the writer's busy time (``run.json`` ``ingest``: writing
  and the client report's accumulation, not the decoding);
- **lag max**: the longest a record waited from its end to its row (``run.json``);
- **held**: the most records the workers held back (the master's window at work);
- **loss**: Locust's request count minus the rows of ``requests.csv`` (0 expected).

Every process started here is stopped here, by PID; no network beyond 127.0.0.1.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from llm_locust.run.launcher import free_port, stop_process  # noqa: E402

LOCUSTFILE = REPO / "benchmarks" / "ingest_locustfile.py"
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
SAMPLE_S = 0.2


def cpu_s(pid: int) -> float | None:
    """User + system CPU time of ``pid`` so far, s (None once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def run_rate(rate: int, args, work: Path) -> dict:
    """One test at ``rate`` offered records/s (0: the baseline), its figures (see the module docstring)."""
    port = free_port()
    run_dir = work / f"rate-{rate}-{time.monotonic_ns()}"
    per_user = rate / args.workers
    common = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE)]
    log_path = work / f"master-{rate}.log"
    master_log = open(log_path, "w")
    master = subprocess.Popen(
        [*common, "--master", "--headless", "--expect-workers", str(args.workers), "--master-bind-host", "127.0.0.1",
         "--master-bind-port", str(port), "-u", str(args.workers), "-r", str(args.workers), "-t", f"{args.run_s}s",
         "--run-dir", str(run_dir), "--csv", str(run_dir / "locust"), "--only-summary",
         "--fake-records-per-s", str(per_user), "--fake-records", str(int(per_user * args.produce_s))],
        stdout=master_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO,
    )  # fmt: skip
    workers = [
        subprocess.Popen([*common, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, cwd=REPO)
        for _ in range(args.workers)
    ]  # fmt: skip
    requests_csv = run_dir / "requests.csv"
    samples: list[tuple[float, float | None]] = []
    start_i = end_i = None
    try:
        deadline = time.monotonic() + args.run_s + 120
        while master.poll() is None and time.monotonic() < deadline:
            samples.append((time.monotonic(), cpu_s(master.pid)))
            if start_i is None or end_i is None:
                log = log_path.read_text()
                if start_i is None and "Run time limit set" in log:
                    start_i = len(samples) - 1
                if end_i is None and "records ingested" in log:
                    end_i = len(samples) - 1
            time.sleep(SAMPLE_S)
    finally:
        stop_process(master, grace_s=30)
        for worker in workers:
            stop_process(worker, grace_s=10)
        master_log.close()
    window = samples[start_i if start_i is not None else 0 : (end_i if end_i is not None else len(samples) - 1) + 1]
    measured = [(wall_s, cpu) for wall_s, cpu in window if cpu is not None]
    cpu_used_s = measured[-1][1] - measured[0][1] if len(measured) > 1 else math.nan
    wall_used_s = measured[-1][0] - measured[0][0] if len(measured) > 1 else math.nan
    ingest = json.loads((run_dir / "run.json").read_text()).get("ingest", {})
    with open(requests_csv, newline="") as f:
        rows = sum(1 for _ in csv.reader(f)) - 1
    with open(run_dir / "locust_stats.csv", newline="") as f:
        counted = int(next(r for r in csv.DictReader(f) if r["Name"] == "Aggregated")["Request Count"])
    return {
        "rate": rate,
        "records": rows,
        "taken_per_s": (ingest.get("records_at_test_stop") or 0) / args.run_s,
        "cpu_s": cpu_used_s,
        "core_ratio": cpu_used_s / wall_used_s if wall_used_s > 0 else math.nan,
        "busy_rate": ingest.get("records_per_busy_s") or math.nan,
        "lag_max_s": ingest.get("max_lag_s") or 0.0,
        "held": ingest.get("peak_held_records") or 0,
        "loss": counted - rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="10000,25000,50000,100000,200000", help="offered records/s, in all")
    parser.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--produce-s", type=float, default=4.0, help="seconds the users produce (default 4)")
    parser.add_argument("--run-s", type=int, default=6, help="test length, s (default 6)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds, each with its own baseline (medians shown)")
    args = parser.parse_args(argv)
    rates = [0, *(int(r) for r in args.rates.split(",") if int(r) > 0)]
    results: dict[int, list[dict]] = {rate: [] for rate in rates}
    with tempfile.TemporaryDirectory(prefix="llm-locust-ingest-") as tmp:
        for _ in range(args.rounds):
            baseline_cpu_s = math.nan
            for rate in rates:
                r = run_rate(rate, args, Path(tmp))
                if rate == 0:
                    baseline_cpu_s = r["cpu_s"]
                r["per_cpu_s"] = r["records"] / r["cpu_s"] if r["cpu_s"] > 0 else math.nan
                extra_cpu_s = r["cpu_s"] - baseline_cpu_s
                r["marginal_per_cpu_s"] = r["records"] / extra_cpu_s if rate and extra_cpu_s > 0 else math.nan
                results[rate].append(r)
    print(f"{'offered/s':>10s} {'records':>8s} {'taken/s':>8s} {'CPU s':>6s} {'per CPU s':>9s} {'marginal':>9s} "
          f"{'core':>5s} {'busy rate':>9s} {'lag max s':>9s} {'held':>8s} {'loss':>5s}")  # fmt: skip
    for rate in rates:
        med = {key: statistics.median(r[key] for r in results[rate]) for key in results[rate][0]}
        print(f"{rate:>10,d} {med['records']:>8,.0f} {med['taken_per_s']:>8,.0f} {med['cpu_s']:>6.2f} "
              f"{med['per_cpu_s']:>9,.0f} {med['marginal_per_cpu_s']:>9,.0f} {med['core_ratio']:>5.2f} "
              f"{med['busy_rate']:>9,.0f} {med['lag_max_s']:>9.2f} {med['held']:>8,.0f} "
              f"{max(r['loss'] for r in results[rate]):>5d}", flush=True)  # fmt: skip
    print(f"{args.rounds} round(s), medians; loss: the largest. Load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
