"""``llm-locust``: the command line. Parses, then calls one library entry point per subcommand.

    llm-locust demo                         embedded server + ladder + analysis, end to end
    llm-locust run --host URL [flags]       Locust master + N workers against your server
    llm-locust analyze RUN_DIR              per-step table, critical concurrency, PNGs
    llm-locust sim-server [flags]           the embedded continuous-batching server

``run`` takes its own few flags (below) and passes every other flag to Locust unchanged, so the
flags of ``locust -f locustfiles/…`` (Locust's and llm-locust's own, see ``llm_locust.options``)
work here too. Imports are lazy: ``sim-server`` and ``analyze`` never import Locust or gevent.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import locustfiles

LOCUSTFILES = Path(locustfiles.__file__).resolve().parent
SHAPE_LOCUSTFILES = {"ladder": "ladder.py", "baseline": "baseline.py", "none": "chat_stream.py"}


def default_run_dir(prefix: str = "run") -> Path:
    """``runs/<prefix>-YYYYmmdd-HHMMSS`` under the current folder."""
    return Path("runs") / f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}"


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=int, default=2, help="Local Locust worker processes (default 2)")
    parser.add_argument(
        "--shape", choices=sorted(SHAPE_LOCUSTFILES), default="ladder",
        help="ladder (--ladder, --dwell-s, --warmup-s), baseline (--baseline-requests) or none (-u, -r, -t)",
    )  # fmt: skip
    parser.add_argument("-f", "--locustfile", default=None, help="Your own locustfile instead of the shape's")
    parser.add_argument("--run-dir", type=Path, default=None, help="Run directory (default runs/run-<time>)")
    parser.add_argument("--no-analyze", action="store_true", help="Do not analyse the run directory afterwards")
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="Upper bound on the run's duration")
    parser.add_argument(
        "--web", action="store_true",
        help="Watch it live: Locust's web UI with the LLM tab on the master at 127.0.0.1:--web-port (the run still "
             "starts and stops by itself)",
    )  # fmt: skip
    parser.add_argument("--web-port", type=int, default=8089, help="Web UI port with --web (0: a free one; default 8089)")
    parser.add_argument(
        "--web-linger-s", type=float, default=60.0, help="With --web: seconds the web UI stays up after the run ends"
    )


def cmd_run(args: argparse.Namespace, locust_args: list[str]) -> int:
    from llm_locust.launcher import LocustRun, free_port, run_locust

    if not any(a == "--host" or a.startswith("--host=") or a == "-H" for a in locust_args):
        print("llm-locust run: --host is required (e.g. --host http://127.0.0.1:8000)", file=sys.stderr)
        return 2
    run_dir = args.run_dir or default_run_dir()
    locustfile = Path(args.locustfile) if args.locustfile else LOCUSTFILES / SHAPE_LOCUSTFILES[args.shape]
    print(f"run directory: {run_dir}")
    web_port = (args.web_port or free_port()) if args.web else None
    code = run_locust(
        LocustRun(locustfile=locustfile, run_dir=run_dir, workers=args.workers, locust_args=locust_args,
                  timeout_s=args.timeout_s, web_port=web_port, web_linger_s=args.web_linger_s)
    )
    if code not in (0, 1):  # 1 = some requests failed: still a measured run
        print(f"locust exited with code {code}; see {run_dir / 'locust_master.log'}", file=sys.stderr)
        return code
    _print_client_report(run_dir)
    if args.no_analyze:
        return code
    from analysis.cli import main as analyze_main

    return analyze_main([str(run_dir)])


def _print_client_report(run_dir: Path) -> None:
    """The master's end-of-run client summary (``client_report.json``), when it wrote one."""
    import json

    from llm_locust.clientreport import format_summary

    def nulls_as_nan(obj: dict) -> dict:
        return {key: float("nan") if value is None else value for key, value in obj.items()}

    try:
        report = json.loads((run_dir / "client_report.json").read_text(), object_hook=nulls_as_nan)
    except (OSError, ValueError):
        return
    print(format_summary(report))


def build_parser() -> argparse.ArgumentParser:
    from analysis.cli import add_arguments as add_analyze_arguments
    from llm_locust import demo
    from llm_locust.simserver import add_arguments as add_sim_arguments

    parser = argparse.ArgumentParser(prog="llm-locust", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="Locust master + workers against a server; other flags go to Locust")
    _add_run_arguments(run)
    add_analyze_arguments(sub.add_parser("analyze", help="Analyse a run directory"))
    demo.add_arguments(sub.add_parser("demo", help="Embedded server + ladder + analysis, end to end"))
    add_sim_arguments(sub.add_parser("sim-server", help="The embedded continuous-batching server"))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv[:1] == ["run"]:
        args, rest = parser.parse_known_args(argv)
        return cmd_run(args, rest)
    args = parser.parse_args(argv)
    if args.command == "analyze":
        from analysis.cli import run as analyze_run

        return analyze_run(args)
    if args.command == "demo":
        from llm_locust import demo

        return demo.run(args)
    from llm_locust.simserver import run_from_args

    run_from_args(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
