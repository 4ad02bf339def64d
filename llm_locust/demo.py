"""``llm-locust demo``: the main job end to end on the embedded server.

Starts the embedded continuous-batching server (``max_num_seqs`` 8 by default) on a free loopback
port, runs the concurrency ladder 1, 2, 4, 8, 16, 32 with a Locust master and 2 worker processes,
stops the server, analyses the run directory (per-step table, critical concurrency, PNGs) and
says whether the critical concurrency found equals the server's ``max_num_seqs``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import requests

from llm_locust.launcher import free_port, stop_process

SIM_MODEL = "sim-llama"
SERVER_START_TIMEOUT_S = 30.0
DEMO_OVERHEAD_S = 15.0
"""Measured beyond the ladder's steps: start-up, the drain of the last step's requests, analysis."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-dir", type=Path, default=None, help="Run directory (default runs/demo-<time>)")
    parser.add_argument("--max-num-seqs", type=int, default=8, help="Batch ceiling of the embedded server")
    parser.add_argument("--ladder", default="1,2,4,8,16,32", help="Concurrency ladder")
    parser.add_argument("--dwell-s", type=float, default=20.0, help="Seconds per ladder step")
    parser.add_argument("--warmup-s", type=float, default=5.0, help="Warm-up seconds left out of each step")
    parser.add_argument("--max-tokens", type=int, default=64, help="max_tokens per request")
    parser.add_argument("--workers", type=int, default=2, help="Locust worker processes")
    parser.add_argument("--web", action="store_true", help="Watch it live in Locust's web UI (LLM tab) at 127.0.0.1:--web-port")
    parser.add_argument("--web-port", type=int, default=8089, help="Web UI port with --web (0: a free one)")
    parser.add_argument("--web-linger-s", type=float, default=30.0, help="With --web: seconds the UI stays up after the run")


def start_sim_server(*, port: int, max_num_seqs: int, log_path: Path, extra: list[str] = ()) -> subprocess.Popen:
    """Start ``python -m llm_locust.simserver`` on 127.0.0.1:``port`` and wait for ``/health``.

    Raises
    ------
    RuntimeError
        The server exited, or did not answer 200 within 30 s (it is stopped first).
    """
    process = subprocess.Popen(
        [sys.executable, "-m", "llm_locust.simserver", "--host", "127.0.0.1", "--port", str(port),
         "--max-num-seqs", str(max_num_seqs), "--model-name", SIM_MODEL, "--stats-log", str(log_path), *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"embedded server exited with {process.returncode}: {process.stderr.read().decode()[-500:]}")
        try:
            if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process
        except requests.RequestException:
            pass
        time.sleep(0.2)
    stop_process(process)
    raise RuntimeError(f"embedded server not ready on port {port} after {SERVER_START_TIMEOUT_S:.0f} s")


def run(args: argparse.Namespace) -> int:
    from analysis.cli import print_result
    from analysis.report import analyze_run
    from llm_locust.cli import LOCUSTFILES, default_run_dir
    from llm_locust.launcher import LocustRun, run_locust
    from llm_locust.options import parse_ladder

    from llm_locust.cli import preflight_or_exit, report_outcome, run_dir_problem
    from llm_locust.options import validate_options

    try:
        ladder = parse_ladder(args.ladder)
        validate_options(argparse.Namespace(dwell_s=args.dwell_s, warmup_s=args.warmup_s, max_tokens=args.max_tokens))
        if args.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {args.workers}")
    except ValueError as exc:
        print(f"llm-locust demo: error: {exc}", file=sys.stderr)
        return 2
    if args.run_dir is not None and (problem := run_dir_problem(args.run_dir)):
        print(f"llm-locust demo: error: {problem}", file=sys.stderr)
        return 2
    run_dir = args.run_dir or default_run_dir("demo")
    run_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    host = f"http://127.0.0.1:{port}"
    duration_s = len(ladder) * args.dwell_s
    print(f"embedded server: {host} (max_num_seqs {args.max_num_seqs}); log {run_dir / 'server.log'}")
    estimate_s = duration_s + DEMO_OVERHEAD_S
    print(f"ladder {ladder}, {args.dwell_s:.0f} s a step (~{estimate_s / 60:.1f} min with start-up, drain and analysis), "
          f"{args.workers} Locust workers")
    print(f"run directory: {run_dir}")
    server = start_sim_server(port=port, max_num_seqs=args.max_num_seqs, log_path=run_dir / "server.log")
    try:
        preflight_or_exit(host, model=SIM_MODEL, prog="llm-locust demo")
        code = run_locust(
            LocustRun(
                locustfile=LOCUSTFILES / "ladder.py",
                run_dir=run_dir,
                workers=args.workers,
                timeout_s=duration_s + 180,
                web_port=(args.web_port or free_port()) if args.web else None,
                web_linger_s=args.web_linger_s,
                locust_args=[
                    "--host", host, "--model", SIM_MODEL, "--ladder", args.ladder,
                    "--dwell-s", str(args.dwell_s), "--warmup-s", str(args.warmup_s),
                    "--max-tokens", str(args.max_tokens), "--label", "target=embedded",
                    "--label", f"max_num_seqs={args.max_num_seqs}",
                ],
            )
        )  # fmt: skip
    finally:
        stop_process(server, grace_s=10)
    if code not in (0, 1, 124, 130):
        print(f"locust exited with code {code}; see {run_dir / 'locust_master.log'}", file=sys.stderr)
        return code
    if report_outcome(run_dir, prog="llm-locust demo"):
        return 1
    result = analyze_run(run_dir)
    print_result(result)
    found = result.critical.users
    if found == args.max_num_seqs:
        print(f"As expected: the critical concurrency equals the embedded server's max_num_seqs ({args.max_num_seqs}).")
        return 0
    print(f"Unexpected: the embedded server's max_num_seqs is {args.max_num_seqs}, the analysis found {found}.")
    return 3
