"""Soak: one long run of many open streams per worker against the embedded server, watching for
slow leaks — memory, file descriptors, CPU per event — and for lost records.

    .venv/bin/python benchmarks/soak.py                    # 30 minutes (--duration-s 1800)
    .venv/bin/python benchmarks/soak.py --duration-s 150   # a short check

What runs (every process started here is stopped here, by PID; traffic only to 127.0.0.1):

1. The embedded server (``python -m llm_locust.simserver``) sized so nothing queues: a batch
   ceiling of ``--streams`` x ``--workers``, a flat decode step of ``--step-ms`` (so each stream
   gets ``1000 / step-ms`` tokens/s whatever the batch), KV and token budget large enough.
2. A Locust master and ``--workers`` worker processes with ``benchmarks/soak_locustfile.py``
   (``llm_locust/locustfiles/chat_stream.py``'s user; Locust's liveness checks widened, see there):
   ``--streams`` users per worker in a closed loop for ``--duration-s``, full accounting, records
   shipped to the master and appended to ``requests.csv``; ``--stop-timeout`` lets the requests in
   flight at the end finish, so every request Locust counts should have its row.

Every ``--sample-s`` seconds the master, each worker and the server are sampled with ``psutil``:
resident memory (RSS), open file descriptors, CPU seconds (user + system). Written to
``soak_samples.csv`` in the run directory (``t_s`` Unix s, ``process``, ``rss_mb``, ``fds``,
``cpu_s``); the summary to ``soak_summary.json`` and printed as a table:

- RSS growth per process: the median RSS over the last ``--window-s`` of the full load (up to the
  last second Locust's ``locust_stats_history.csv`` shows every user running; the drain after it
  is left out) against the median over the ``--window-s`` right after ``--warmup-s`` (warm-up: streams opened, buffers and
  caches grown to their working size). Goal: < 5 %.
- open file descriptors at the start window and at the end (a leaked socket or file shows here).
- CPU per token event of each worker in the same two windows: its CPU seconds over the window /
  SSE content events of the requests that *ended* in the window (``requests.csv``: ``t_start_s +
  e2e_ms / 1000``, ``content_events``), in microseconds. A per-request structure that grows makes
  this rise.
- records lost: Locust's own count (``locust_stats.csv``, row ``Aggregated``, ``Request Count``)
  minus the rows in ``requests.csv``. Goal: 0.
- open streams: the median of ``client_load.csv``'s ``open_streams`` per worker over the run,
  to show the load really held ``--streams`` open.

The measurement and the join are this file's own (psutil for the samples, pandas for the files):
no library measures a multi-process Locust run's growth over time.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from llm_locust.run.demo import SIM_MODEL, start_sim_server  # noqa: E402
from llm_locust.run.launcher import LocustRun, SigtermAsInterrupt, free_port, stop_process  # noqa: E402

RSS_GOAL_PCT = 5.0


def sample(processes: dict[str, subprocess.Popen]) -> list[dict]:
    """One row per live process: wall time, RSS (MB), open fds, CPU seconds."""
    t_s = time.time()
    rows = []
    for name, popen in processes.items():
        if popen.poll() is not None:
            continue
        try:
            proc = psutil.Process(popen.pid)
            with proc.oneshot():
                cpu = proc.cpu_times()
                rows.append(
                    {
                        "t_s": t_s,
                        "process": name,
                        "rss_mb": proc.memory_info().rss / 2**20,
                        "fds": proc.num_fds(),
                        "cpu_s": cpu.user + cpu.system,
                    }
                )
        except psutil.Error:
            pass
    return rows


def window_stats(samples: pd.DataFrame, ends: pd.DataFrame, t0: float, t1: float) -> dict[str, dict]:
    """Per process over [t0, t1]: median RSS, last fds, CPU seconds; and under ``"workers"`` the
    workers' CPU µs per content event (their CPU seconds in the window / content events of the
    requests that ended in it, every worker together)."""
    inside = samples[(samples["t_s"] >= t0) & (samples["t_s"] <= t1)]
    result: dict[str, dict[str, Any]] = {}
    for name, group in inside.groupby("process"):
        group = group.sort_values("t_s")
        entry: dict[str, Any] = {"rss_mb": float(group["rss_mb"].median()), "fds": int(group["fds"].iloc[-1])}
        entry["cpu_s"] = float(group["cpu_s"].iloc[-1] - group["cpu_s"].iloc[0])
        entry["span"] = (float(group["t_s"].iloc[0]), float(group["t_s"].iloc[-1]))
        result[str(name)] = entry
    workers = [entry for name, entry in result.items() if name.startswith("worker")]
    if workers:
        a, b = workers[0]["span"]
        ended = ends[(ends["t_end_s"] > a) & (ends["t_end_s"] <= b)]
        events = float(ended["content_events"].sum())
        cpu_s = sum(entry["cpu_s"] for entry in workers)
        result["workers"] = {"events": events, "cpu_us_per_event": cpu_s / events * 1e6 if events else float("nan")}
    return result


def locust_count(run_dir: Path) -> int | None:
    """``Request Count`` of the ``Aggregated`` row of Locust's ``locust_stats.csv``."""
    try:
        stats = pd.read_csv(run_dir / "locust_stats.csv")
    except (OSError, ValueError):
        return None
    total = stats[stats["Name"] == "Aggregated"]
    return int(total["Request Count"].iloc[0]) if len(total) else None


def load_end_s(run_dir: Path, users: int) -> float | None:
    """The last second (Unix s) at which Locust ran all ``users``: the last ``Timestamp`` of
    ``locust_stats_history.csv`` whose ``User Count`` is ``users`` (its rows stop when the test
    stops; the drain of the requests in flight comes after)."""
    try:
        history = pd.read_csv(run_dir / "locust_stats_history.csv", usecols=["Timestamp", "User Count"])
    except (OSError, ValueError):
        return None
    full = history[history["User Count"] == users]
    return float(full["Timestamp"].max()) if len(full) else None


def server_finished(run_dir: Path) -> int | None:
    """Requests the server finished whole, by its last scrape: the last ``vllm:request_success_total``
    samples (``server_metrics.csv``) summed over ``finished_reason`` other than ``abort`` and
    ``error``; None without one. A count independent of the client's files (requests finished
    after the last scrape are not in it)."""
    try:
        samples = pd.read_csv(run_dir / "server_metrics.csv", usecols=["t_s", "metric", "labels", "value"])
    except (OSError, ValueError):
        return None
    done = samples[
        (samples["metric"] == "vllm:request_success_total")
        & ~samples["labels"].str.contains('"finished_reason": "(?:abort|error)"', regex=True)
    ]
    if done.empty:
        return None
    return int(done[done["t_s"] == done["t_s"].max()]["value"].sum())


def request_ends(run_dir: Path) -> pd.DataFrame:
    """``requests.csv`` reduced to what the summary needs: end wall time (Unix s), content events."""
    frame = pd.read_csv(
        run_dir / "requests.csv",
        usecols=["worker_id", "t_start_s", "e2e_ms", "content_events", "error_kind"],
        dtype={"worker_id": str, "error_kind": str},
    )
    frame["t_end_s"] = frame["t_start_s"] + frame["e2e_ms"].fillna(0) / 1000.0
    frame["content_events"] = frame["content_events"].fillna(0)
    return frame


def summarize(run_dir: Path, samples: pd.DataFrame, started: float, args) -> dict:
    """The figures of the soak (see the module docstring)."""
    ends = request_ends(run_dir)
    start_window = (started + args.warmup_s, started + args.warmup_s + args.window_s)
    last_t = load_end_s(run_dir, args.streams * args.workers) or float(samples["t_s"].max())
    end_window = (last_t - args.window_s, last_t)
    first = window_stats(samples, ends, *start_window)
    last = window_stats(samples, ends, *end_window)
    processes = {}
    for name in sorted(set(first) & set(last) - {"workers"}):
        a, b = first[name], last[name]
        entry = {
            "rss_mb_start": round(a["rss_mb"], 1),
            "rss_mb_end": round(b["rss_mb"], 1),
            "rss_growth_pct": round((b["rss_mb"] / a["rss_mb"] - 1) * 100, 2),
            "fds_start": a["fds"],
            "fds_end": b["fds"],
        }
        processes[name] = entry
    cpu_per_event = {
        f"{key}_{which}": round(window.get("workers", {}).get(key, float("nan")), 2)
        for which, window in (("start", first), ("end", last))
        for key in ("cpu_us_per_event", "events")
    }
    counted = locust_count(run_dir)
    open_streams = None
    try:
        load = pd.read_csv(run_dir / "client_load.csv")
        steady = load[(load["t_s"] >= start_window[0]) & (load["t_s"] <= end_window[1] - args.window_s / 2)]
        open_streams = {str(k): float(v) for k, v in steady.groupby("worker")["open_streams"].median().items()}
    except (OSError, ValueError, KeyError):
        pass
    return {
        "full_load_end_s": round(last_t - started, 1),
        "streams_per_worker": args.streams,
        "workers": args.workers,
        "windows_s": {
            "start": [round(t - started) for t in start_window],
            "end": [round(t - started) for t in end_window],
        },
        "processes": processes,
        "workers_cpu_per_event": cpu_per_event,
        "requests_csv_rows": int(len(ends)),
        "failed_rows": int((ends["error_kind"].fillna("") != "").sum()),
        "locust_request_count": counted,
        "records_lost": None if counted is None else counted - int(len(ends)),
        "server_finished_last_scrape": server_finished(run_dir),
        "successful_rows": int((ends["error_kind"].fillna("") == "").sum()),
        "open_streams_median": open_streams,
        "rss_goal_met": all(p["rss_growth_pct"] < RSS_GOAL_PCT for n, p in processes.items() if n != "server"),
    }


def print_summary(summary: dict) -> None:
    print(
        f"\nsoak: full load until {summary['full_load_end_s']:.0f} s, {summary['streams_per_worker']} streams x {summary['workers']} worker(s)"
    )
    print(f"windows (s from start): start {summary['windows_s']['start']}, end {summary['windows_s']['end']}")
    print("| process | RSS MB start | RSS MB end | growth | fds start | fds end |")
    print("|---|---|---|---|---|---|")
    for name, p in summary["processes"].items():
        print(
            f"| {name} | {p['rss_mb_start']} | {p['rss_mb_end']} | {p['rss_growth_pct']:+.2f} % | {p['fds_start']} | "
            f"{p['fds_end']} |"
        )
    c = summary["workers_cpu_per_event"]
    print(
        f"workers' CPU per content event: start {c['cpu_us_per_event_start']} µs ({c['events_start']:.0f} events), "
        f"end {c['cpu_us_per_event_end']} µs ({c['events_end']:.0f} events)"
    )
    print(
        f"requests.csv rows {summary['requests_csv_rows']} (failed {summary['failed_rows']}), Locust's count "
        f"{summary['locust_request_count']}: records lost {summary['records_lost']}; the server finished "
        f"{summary['server_finished_last_scrape']} by its last scrape ({summary['successful_rows']} successful rows); "
        "open streams (median) "
        f"{summary['open_streams_median']}; RSS growth < {RSS_GOAL_PCT:.0f} %: {summary['rss_goal_met']}"
    )


def run(args) -> dict:
    run_dir = Path(args.run_dir) if args.run_dir else Path(tempfile.mkdtemp(prefix="llm-locust-soak-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    print(f"run directory: {run_dir}", flush=True)
    seqs = args.streams * args.workers
    server_port = free_port()
    server = start_sim_server(
        port=server_port,
        max_num_seqs=seqs,
        log_path=run_dir / "server.log",
        extra=[
            "--decode-base-ms", str(args.step_ms), "--decode-per-seq-ms", "0", "--prefill-ms-per-token", "0",
            "--max-num-batched-tokens", str(seqs * 64), "--kv-capacity-tokens", str(seqs * 2048),
            "--log-stats-interval-s", "10",
        ],
    )  # fmt: skip
    spawn_rate = max(1.0, args.streams * args.workers / 10.0)
    locust = LocustRun(
        locustfile=REPO / "benchmarks" / "soak_locustfile.py",
        run_dir=run_dir,
        workers=args.workers,
        locust_args=[
            "--host", f"http://127.0.0.1:{server_port}", "--model", SIM_MODEL, "--max-tokens", str(args.max_tokens),
            "--ignore-eos", "true", "-u", str(seqs), "-r", str(spawn_rate), "-t", f"{args.duration_s:.0f}s",
            "--stop-timeout", "60", "--label", "soak=1",
        ],
    )  # fmt: skip
    port = free_port()
    logs = [open(run_dir / "locust_master.log", "w")]
    processes: dict[str, subprocess.Popen] = {}
    rows: list[dict] = []
    started = time.time()
    try:
        master = subprocess.Popen(locust.master_command(port), stdout=logs[0], stderr=subprocess.STDOUT)
        processes["master"] = master
        for index in range(args.workers):
            logs.append(open(run_dir / f"locust_worker_{index}.log", "w"))
            worker = subprocess.Popen(locust.worker_command(port), stdout=logs[-1], stderr=subprocess.STDOUT)
            processes[f"worker{index}"] = worker
        processes["server"] = server
        limit = time.monotonic() + args.duration_s + 180
        next_print = time.monotonic()
        # written as it goes: a soak cut short keeps its samples
        with open(run_dir / "soak_samples.csv", "w", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=["t_s", "process", "rss_mb", "fds", "cpu_s"])
            writer.writeheader()
            try:
                while master.poll() is None and time.monotonic() < limit:
                    now = sample(processes)
                    rows.extend(now)
                    writer.writerows(now)
                    out.flush()
                    if time.monotonic() >= next_print:
                        line = "  ".join(f"{r['process']} {r['rss_mb']:.0f} MB/{r['fds']} fds" for r in now)
                        print(f"  {time.time() - started:6.0f} s  {line}", flush=True)
                        next_print += 60
                    time.sleep(args.sample_s)
            except KeyboardInterrupt:
                print("interrupted: stopping the processes; the figures cover the run so far", flush=True)
    finally:
        for name, popen in reversed(list(processes.items())):
            stop_process(popen, grace_s=90 if name == "master" else 30)
        stop_process(server)
        for log in logs:
            log.close()
    samples = pd.DataFrame(rows)
    summary = summarize(run_dir, samples, started, args)
    summary["run_dir"] = str(run_dir)
    (run_dir / "soak_summary.json").write_text(json.dumps(summary, indent=2))
    print_summary(summary)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration-s", type=float, default=1800.0, help="how long the load runs, s")
    parser.add_argument("--streams", type=int, default=256, help="open streams (users) per worker")
    parser.add_argument("--workers", type=int, default=1, help="Locust worker processes")
    parser.add_argument(
        "--step-ms", type=float, default=100.0, help="the server's decode step, ms (tokens/s = 1000/step)"
    )
    parser.add_argument("--max-tokens", type=int, default=64, help="output tokens per request (ignore_eos)")
    parser.add_argument("--warmup-s", type=float, default=120.0, help="left out before the start window, s")
    parser.add_argument("--window-s", type=float, default=60.0, help="length of the start and end windows, s")
    parser.add_argument("--sample-s", type=float, default=2.0, help="seconds between process samples")
    parser.add_argument("--run-dir", default="", help="run directory (default: a new temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary run directory")
    args = parser.parse_args()
    if args.duration_s < args.warmup_s + 2 * args.window_s:
        parser.error("--duration-s must cover --warmup-s plus two --window-s")
    with SigtermAsInterrupt():  # a SIGTERM stops the soak as Ctrl-C does: processes stopped, figures so far kept
        summary = run(args)
    if not args.run_dir and not args.keep:
        shutil.rmtree(summary["run_dir"], ignore_errors=True)


if __name__ == "__main__":
    main()
