"""``llm-locust demo``: the main job end to end on the embedded server.

Starts the embedded continuous-batching server (``max_num_seqs`` 8 by default) on a free loopback
port, runs the concurrency ladder 1, 2, 4, 8, 16, 32 with a Locust master and 2 worker processes,
stops the server, analyses the run directory (per-step table, verdict, critical concurrency, PNGs)
and says whether the critical concurrency found equals the server's ``max_num_seqs`` and the
bottleneck is ``scheduler_ceiling`` (``batching_off`` for a ceiling of 1).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, cast

import requests

from llm_locust.parentdeath import command_ending_with_this_process
from llm_locust.run.launcher import STOPPED_CODES, SigtermAsInterrupt, free_port, stop_process

SIM_MODEL = "sim-llama"
SERVER_START_TIMEOUT_S = 30.0
DEMO_OVERHEAD_S = 15.0
"""Measured beyond the ladder's steps: start-up, the drain of the last step's requests, analysis."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from llm_locust.clihelp import add_deprecated_alias

    parser.add_argument(
        "--out", dest="run_dir", type=Path, default=None, metavar="DIR",
        help="Output folder: the run directory (default runs/demo-<time>)",
    )  # fmt: skip
    add_deprecated_alias(parser, "--run-dir", "--out", dest="run_dir", type=Path)
    parser.add_argument("--max-num-seqs", type=int, default=8, help="Batch ceiling of the embedded server")
    parser.add_argument("--ladder", default="1,2,4,8,16,32", help="Concurrency ladder")
    parser.add_argument("--dwell-s", type=float, default=20.0, help="Seconds per ladder step")
    parser.add_argument("--warmup-s", type=float, default=5.0, help="Warm-up seconds left out of each step")
    parser.add_argument("--max-tokens", type=int, default=64, help="max_tokens per request")
    parser.add_argument("--workers", type=int, default=2, help="Locust worker processes")
    parser.add_argument(
        "--web", action="store_true", help="Watch it live in Locust's web UI (LLM tab) at 127.0.0.1:--web-port"
    )
    parser.add_argument("--web-port", type=int, default=8089, help="Web UI port with --web (0: a free one)")
    parser.add_argument("-q", "--quiet", action="store_true", help="No progress lines while it runs")
    parser.add_argument(
        "--web-linger-s", type=float, default=30.0, help="With --web: seconds the UI stays up after the run"
    )


def start_sim_server(*, port: int, max_num_seqs: int, log_path: Path, extra: Sequence[str] = ()) -> subprocess.Popen:
    """Start ``python -m llm_locust.simserver`` on 127.0.0.1:``port`` and wait for ``/health``.

    Raises
    ------
    RuntimeError
        The server exited, or did not answer 200 within 30 s (it is stopped first).
    """
    process = subprocess.Popen(  # it ends with this process, however that one dies (parentdeath.py)
        command_ending_with_this_process(
            [sys.executable, "-m", "llm_locust.simserver", "--listen", "127.0.0.1", "--port", str(port),
             "--max-num-seqs", str(max_num_seqs), "--model-name", SIM_MODEL, "--stats-log", str(log_path), *extra]),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                stderr = cast(IO[bytes], process.stderr)  # stderr=PIPE above
                raise RuntimeError(f"embedded server exited with {process.returncode}: {stderr.read().decode()[-500:]}")
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    return process
            except requests.RequestException:
                pass
            time.sleep(0.2)
    except BaseException:  # Ctrl-C or SIGTERM while waiting: the server goes too
        stop_process(process, grace_s=5)
        raise
    stop_process(process)
    raise RuntimeError(f"embedded server not ready on port {port} after {SERVER_START_TIMEOUT_S:.0f} s")


def run(args: argparse.Namespace) -> int:
    from llm_locust.options import parse_ladder, validate_options
    from llm_locust.run.launcher import LocustRun, run_locust
    from llm_locust.run.preflight import LOCUSTFILES, default_run_dir, preflight_or_exit, run_dir_problem

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
    print(
        f"ladder {ladder}, {args.dwell_s:.0f} s a step (~{estimate_s / 60:.1f} min with start-up, drain and analysis), "
        f"{args.workers} Locust workers"
    )
    print(f"run directory: {run_dir}")
    with SigtermAsInterrupt() as signals:  # SIGTERM stops the demo the way Ctrl-C does (exit 143)
        try:
            server = start_sim_server(port=port, max_num_seqs=args.max_num_seqs, log_path=run_dir / "server.log")
        except KeyboardInterrupt:
            return signals.exit_code
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
                ),
                signals=signals,
                progress_every_s=0 if args.quiet else 10.0,
            )  # fmt: skip
        except KeyboardInterrupt:  # before Locust started
            code = signals.exit_code
        finally:
            signals.stopping()  # a SIGTERM from now on lets the server stop and the report finish
            stop_process(server, grace_s=10)
        return _report(run_dir, code, args.max_num_seqs)


def _report(run_dir: Path, code: int, max_num_seqs: int) -> int:
    """After the run: the post-run sequence (:func:`~llm_locust.run.postrun.finish_run_result`),
    then whether the critical concurrency found is the server's ``max_num_seqs`` (0, else 3)."""
    from llm_locust.run.postrun import finish_run_result

    exit_code, result = finish_run_result(run_dir, code, prog="llm-locust demo")
    if result is None or code in STOPPED_CODES or code not in (0, 1):
        return exit_code
    found = result.critical.users
    kind = result.verdict.bottleneck.value if result.verdict is not None else None
    expected = "batching_off" if max_num_seqs == 1 else "scheduler_ceiling"
    if found == max_num_seqs and kind == expected:
        print(
            f"As expected: the critical concurrency equals the embedded server's max_num_seqs ({max_num_seqs}) "
            f"and the bottleneck is {expected}."
        )
        return 0
    print(
        f"Unexpected: the embedded server's max_num_seqs is {max_num_seqs}, the analysis found {found} "
        f"(bottleneck {kind}, expected {expected})."
    )
    return 3
