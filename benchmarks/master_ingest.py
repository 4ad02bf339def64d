"""The master's record ingest: records/s per core, lag and loss at rising offered rates.

    .venv/bin/python benchmarks/master_ingest.py                 # ~2 min: 10k, 25k, 50k, 100k, 200k records/s
    .venv/bin/python benchmarks/master_ingest.py --rates 50000 --workers 2

For each offered rate: a real Locust master (llm-locust's recorder, ``--run-dir``) and
``--workers`` real workers whose users produce fake records at that rate in all
(``benchmarks/ingest_locustfile.py``: each counted in Locust's stats and queued on the worker's
record shipper as a real record is; realistic rows of 64 token times) for ``--produce-s``
seconds, in a test of ``--run-s`` seconds. Figures:

- **taken/s**: records the master wrote before the test began to stop, per second of the test;
- **per core**: records written per CPU second of the master process (``/proc/PID/stat``, from
  the test's start to the log line that ends the ingest: message decoding, Locust's stats, the
  writer; not start-up nor the client report);
- **busy rate**: records per second of the writer's busy time (``run.json`` ``ingest``);
- **lag max**: the longest a record waited from its end to its row (``run.json``);
- **held**: the most records the workers held back (the master's window at work);
- **loss**: Locust's request count minus the rows of ``requests.csv`` (0 expected).

Every process started here is stopped here, by PID; no network beyond 127.0.0.1.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
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


def cpu_s(pid: int) -> float | None:
    """User + system CPU time of ``pid`` so far, s (None once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def run_rate(rate: int, args, work: Path) -> dict:
    port = free_port()
    run_dir = work / f"rate-{rate}"
    per_user = rate / args.workers
    common = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE)]
    master_log = open(work / f"master-{rate}.log", "w")
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
    samples: list[tuple[float, float | None, str]] = []
    try:
        deadline = time.monotonic() + args.run_s + 120
        while master.poll() is None and time.monotonic() < deadline:
            samples.append((time.time(), cpu_s(master.pid), (work / f"master-{rate}.log").read_text()))
            time.sleep(0.2)
    finally:
        stop_process(master, grace_s=30)
        for worker in workers:
            stop_process(worker, grace_s=10)
        master_log.close()
    start = next((cpu for _, cpu, log in samples if "Run time limit set" in log and cpu is not None), None)
    end = next((cpu for _, cpu, log in samples if "records ingested" in log and cpu is not None), None)
    end = end if end is not None else next((cpu for _, cpu, _ in reversed(samples) if cpu is not None), None)
    ingest = json.loads((run_dir / "run.json").read_text()).get("ingest", {})
    with open(run_dir / "requests.csv", newline="") as f:
        rows = sum(1 for _ in csv.reader(f)) - 1
    with open(run_dir / "locust_stats.csv", newline="") as f:
        counted = int(next(r for r in csv.DictReader(f) if r["Name"] == "Aggregated")["Request Count"])
    master_cpu_s = (end - start) if start is not None and end is not None else float("nan")
    return {
        "rate": rate,
        "records": rows,
        "taken_per_s": (ingest.get("records_at_test_stop") or 0) / args.run_s,
        "per_core": rows / master_cpu_s if master_cpu_s > 0 else float("nan"),
        "busy_rate": ingest.get("records_per_busy_s"),
        "lag_max_s": ingest.get("max_lag_s"),
        "held": ingest.get("peak_held_records"),
        "loss": counted - rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="10000,25000,50000,100000,200000", help="offered records/s, in all")
    parser.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--produce-s", type=float, default=4.0, help="seconds the users produce (default 4)")
    parser.add_argument("--run-s", type=int, default=6, help="test length, s (default 6)")
    args = parser.parse_args(argv)
    rates = [int(r) for r in args.rates.split(",")]
    print(f"{'offered/s':>10s} {'records':>8s} {'taken/s':>9s} {'per core':>9s} {'busy rate':>10s} "
          f"{'lag max s':>9s} {'held':>8s} {'loss':>5s}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="llm-locust-ingest-") as tmp:
        for rate in rates:
            r = run_rate(rate, args, Path(tmp))
            print(f"{r['rate']:>10,d} {r['records']:>8,d} {r['taken_per_s']:>9,.0f} {r['per_core']:>9,.0f} "
                  f"{r['busy_rate'] or 0:>10,} {r['lag_max_s'] or 0:>9.2f} {r['held'] or 0:>8,d} {r['loss']:>5d}",
                  flush=True)  # fmt: skip
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
