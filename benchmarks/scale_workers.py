"""One Locust master with N local workers against the embedded server: what the master costs.

Usage::

    .venv/bin/python benchmarks/scale_workers.py --workers 32 [--users 32] [--dwell-s 10] [--max-tokens 16]

Starts the embedded server (max_num_seqs = users), a master and N worker processes (the same
commands ``llm-locust run`` uses), one ladder step of ``--users`` users, and samples the master
process every 0.5 s with psutil: CPU (percent of one core), open file descriptors, RSS. Prints
how long the workers took to connect, the master's load, whether every worker's records reached
``requests.csv`` (rows = Locust's count, requests per worker), each worker's CPU from
``client_report.json``, and any missing spell (run.json ``workers_missing``). Every process it
starts is stopped by PID; the run directory is kept (printed).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import psutil

from llm_locust.run.demo import SIM_MODEL, start_sim_server
from llm_locust.run.launcher import LocustRun, free_port, stop_process

LOCUSTFILE = Path(__file__).resolve().parents[1] / "llm_locust" / "locustfiles" / "ladder.py"


def sample(process: psutil.Process, samples: list[tuple[float, float, int, int]]) -> None:
    """Append (t, cpu seconds, fds, rss bytes) of ``process``, if it still runs."""
    try:
        with process.oneshot():
            times = process.cpu_times()
            samples.append((time.monotonic(), times.user + times.system, process.num_fds(), process.memory_info().rss))
    except psutil.Error:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--users", type=int, default=0, help="users of the one step (default: one per worker)")
    parser.add_argument("--dwell-s", type=float, default=10.0)
    parser.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args()
    users = args.users or args.workers
    run_dir = Path(tempfile.mkdtemp(prefix="scale-")) / "run"
    run_dir.mkdir(parents=True)
    port, master_port = free_port(), free_port()
    server = start_sim_server(port=port, max_num_seqs=users, log_path=run_dir.parent / "server.log")
    run = LocustRun(locustfile=LOCUSTFILE, run_dir=run_dir, workers=args.workers, timeout_s=600, locust_args=[
        "--host", f"http://127.0.0.1:{port}", "--model", SIM_MODEL, "--ladder", str(users),
        "--dwell-s", str(args.dwell_s), "--warmup-s", "2", "--max-tokens", str(args.max_tokens)])  # fmt: skip
    logs = [open(run_dir / "locust_master.log", "w")]
    started = time.monotonic()
    master = subprocess.Popen(run.master_command(master_port), stdout=logs[0], stderr=subprocess.STDOUT)
    workers = []
    for index in range(args.workers):
        logs.append(open(run_dir / f"locust_worker_{index}.log", "w"))
        workers.append(subprocess.Popen(run.worker_command(master_port), stdout=logs[-1], stderr=subprocess.STDOUT))
    samples: list[tuple[float, float, int, int]] = []
    worker_samples: dict[int, list] = {process.pid: [] for process in workers}
    watched = psutil.Process(master.pid)
    watched_workers = [psutil.Process(process.pid) for process in workers]
    load_before = os.getloadavg()[0]
    try:
        while master.poll() is None and time.monotonic() - started < 600:
            sample(watched, samples)
            for process in watched_workers:
                sample(process, worker_samples[process.pid])
            time.sleep(0.5)
    finally:
        for process in [master, *workers]:
            stop_process(process, grace_s=10)
        stop_process(server, grace_s=10)
        for log in logs:
            log.close()
    wall_s = time.monotonic() - started
    report(run_dir, samples, wall_s, args.workers)
    worker_cpu_s = [s[-1][1] for s in worker_samples.values() if s]
    print(f"worker processes: CPU time at their last sample mean {statistics.fmean(worker_cpu_s):.1f} s, "
          f"max {max(worker_cpu_s):.1f} s; RSS max {max(x[3] for s in worker_samples.values() for x in s) / 2**20:.0f} "
          f"MiB each; machine load average (1 min) {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} "
          f"at the end, {os.cpu_count()} CPUs")  # fmt: skip


def report(run_dir: Path, samples: list, wall_s: float, n_workers: int) -> None:
    """Print the measurements (see the module docstring)."""
    meta = json.loads((run_dir / "run.json").read_text())
    client = json.loads((run_dir / "client_report.json").read_text())
    with open(run_dir / "requests.csv", newline="") as f:
        per_worker = Counter(row["worker_id"] for row in csv.DictReader(f))
    with open(run_dir / "locust_stats.csv", newline="") as f:
        locust_count = next(int(r["Request Count"]) for r in csv.DictReader(f) if r["Name"] == "Aggregated")
    log = (run_dir / "locust_master.log").read_text()
    ready = [line for line in log.splitlines() if "reported as ready" in line]
    cpu = [100.0 * (b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(samples, samples[1:]) if b[0] > a[0]]
    step = meta["shape"]["steps"][0]
    step_s = (step["end_s"] or meta["ended_at_s"]) - step["start_s"]
    print(f"run directory: {run_dir}")
    print(f"workers: {n_workers} started, {len(meta['workers'])} connected ({len(ready)} 'ready' lines); "
          f"wall {wall_s:.1f} s, step {step_s:.1f} s at {step['users']} users")  # fmt: skip
    print(f"master: CPU mean {statistics.fmean(cpu):.0f} %, max {max(cpu):.0f} % of one core (0.5 s samples); "
          f"fds max {max(s[2] for s in samples)}; RSS max {max(s[3] for s in samples) / 2**20:.0f} MiB")  # fmt: skip
    print(f"requests.csv {sum(per_worker.values())} rows, Locust counted {locust_count}; "
          f"per worker min {min(per_worker.values(), default=0)} max {max(per_worker.values(), default=0)}, "
          f"{len(per_worker)} workers with requests")  # fmt: skip
    means = [w["cpu_mean_percent"] for w in client.get("workers", []) if w["cpu_mean_percent"] is not None]
    if means:
        print(f"worker CPU mean (client_load.csv): lowest {min(means):.0f} %, highest {max(means):.0f} %")
    spells = meta.get("workers_missing") or []
    noticed = [s["noticed_s"] - meta["started_at_s"] for s in spells]
    print(
        f"missing spells: {len(spells)} ({sum(s['to_s'] is not None for s in spells)} came back)"
        + (f", noticed +{min(noticed):.1f} to +{max(noticed):.1f} s after the start" if noticed else "")
        + f"; 'failed to send heartbeat' lines in the master log: {log.count('failed to send heartbeat')}"
    )


if __name__ == "__main__":
    main()
