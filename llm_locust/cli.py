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
from llm_locust.options import positive_float, positive_int

LOCUSTFILES = Path(locustfiles.__file__).resolve().parent
SHAPE_LOCUSTFILES = {"ladder": "ladder.py", "baseline": "baseline.py", "none": "chat_stream.py"}


def default_run_dir(prefix: str = "run") -> Path:
    """``runs/<prefix>-YYYYmmdd-HHMMSS`` under the current folder."""
    return Path("runs") / f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}"


RUN_EPILOG = """\
Every other flag goes to Locust and llm-locust's options, among them:
  --host URL                  the server, without /v1 (required), e.g. http://127.0.0.1:8000
  --model NAME                model to request (default: the first of GET /v1/models)
  --ladder 1,2,4,8            concurrency ladder (--shape ladder)
  --dwell-s S                 seconds each ladder step is held (default 20)
  --warmup-s S                seconds at the start of each step left out of the analysis (default 5)
  --max-tokens N              max_tokens per request (default 64)
  --baseline-requests N       requests for --shape baseline (default 10)
  --server-log PATH           follow the server's log file during the run
  --server-metrics-url URL    another Prometheus endpoint to scrape (repeatable)
  --web                       watch it live in Locust's web UI (LLM tab)
All of them: .venv/bin/locust -f locustfiles/ladder.py --help
"""


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = RUN_EPILOG
    parser.add_argument("--workers", type=positive_int, default=2, help="Local Locust worker processes (default 2)")
    parser.add_argument(
        "--shape", choices=sorted(SHAPE_LOCUSTFILES), default="ladder",
        help="ladder (--ladder, --dwell-s, --warmup-s), baseline (--baseline-requests) or none (-u, -r, -t)",
    )  # fmt: skip
    parser.add_argument("-f", "--locustfile", default=None, help="Your own locustfile instead of the shape's")
    parser.add_argument("--run-dir", type=Path, default=None, help="Run directory (default runs/run-<time>); must not hold a run already")
    parser.add_argument("--no-analyze", action="store_true", help="Do not analyse the run directory afterwards")
    parser.add_argument("--timeout-s", type=positive_float, default=3600.0,
                        help="Upper bound on the run's duration; past it the run is stopped and its data kept")
    parser.add_argument(
        "--web", action="store_true",
        help="Watch it live: Locust's web UI with the LLM tab on the master at 127.0.0.1:--web-port (the run still "
             "starts and stops by itself)",
    )  # fmt: skip
    parser.add_argument("--web-port", type=int, default=8089, help="Web UI port with --web (0: a free one; default 8089)")
    parser.add_argument(
        "--web-linger-s", type=float, default=60.0, help="With --web: seconds the web UI stays up after the run ends"
    )


def parse_locust_args(locust_args: list[str], *, strict: bool = True):
    """Parse the pass-through flags with Locust's own parser (llm-locust's options registered), as
    the master will: argparse errors (unknown flag, bad value) exit 2 here, before anything starts.
    ``strict=False`` (a user's own locustfile, which may add flags of its own) ignores unknown flags.
    """
    import os

    skip = "LOCUST_SKIP_MONKEY_PATCH"
    previous = os.environ.get(skip)
    os.environ[skip] = "1"  # the launcher only parses: no gevent patching in this process
    try:
        import llm_locust.plugin  # noqa: F401  (registers llm-locust's options on Locust's events)
        from locust.argument_parser import get_parser
    finally:
        if previous is None:
            os.environ.pop(skip, None)
        else:
            os.environ[skip] = previous
    parser = get_parser()
    parser.prog = "llm-locust run"
    if strict:
        return parser.parse_args(locust_args)
    return parser.parse_known_args(locust_args)[0]


def run_dir_problem(run_dir: Path) -> str | None:
    """Why ``run_dir`` cannot take a new run (it holds one already), or None."""
    held = [name for name in ("run.json", "requests.csv", "server_metrics.csv", "locust_master.log") if (run_dir / name).exists()]
    if held:
        return f"--run-dir {run_dir} already holds a run ({', '.join(held)}): use a new directory"
    return None


def check_run(args: argparse.Namespace, locust_args: list[str]):
    """Everything ``run`` can check before it starts a process: returns ``(options, locustfile)``.

    Raises
    ------
    SystemExit
        Status 2, after one ``llm-locust run: error: …`` line on stderr.
    """
    from llm_locust.options import validate_options

    def fail(message: str):
        print(f"llm-locust run: error: {message}", file=sys.stderr)
        raise SystemExit(2)

    locustfile = Path(args.locustfile) if args.locustfile else LOCUSTFILES / SHAPE_LOCUSTFILES[args.shape]
    if not locustfile.is_file():
        fail(f"locustfile {locustfile} not found")
    options = parse_locust_args(locust_args, strict=args.locustfile is None)
    if not options.host:
        fail("--host is required (e.g. --host http://127.0.0.1:8000)")
    try:
        validate_options(options)
    except ValueError as exc:
        fail(str(exc))
    if args.run_dir is not None and (problem := run_dir_problem(args.run_dir)):
        fail(problem)
    return options, locustfile


def preflight_or_exit(host: str, *, model: str = "", api_key: str = "", prog: str = "llm-locust run") -> None:
    """GET HOST/v1/models before starting Locust: exit 2 with one line when the server cannot be
    reached, the host ends with /v1, or ``model`` is not among the served models."""
    from llm_locust.models import preflight

    error, note = preflight(host, model=model, api_key=api_key)
    if error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        raise SystemExit(2)
    if note:
        print(f"{prog}: {note}", file=sys.stderr)


def failure_summary(run_dir: Path, *, examples: int = 3) -> str | None:
    """When no request of the run succeeded: "all N requests failed" with the commonest error kinds
    and one example message each (from ``requests.csv``); None when some succeeded."""
    import csv
    from collections import Counter

    try:
        with open(run_dir / "requests.csv", newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        rows = []
    if any(not row.get("error_kind") for row in rows):
        return None
    if not rows:
        return "no request was recorded"
    kinds = Counter(row["error_kind"] for row in rows)
    example = {}
    for row in rows:
        example.setdefault(row["error_kind"], row.get("error_message", ""))
    lines = [f"all {len(rows)} requests failed:"]
    for kind, count in kinds.most_common(examples):
        lines.append(f"  {count} x {kind}: {example[kind][:200]}")
    return "\n".join(lines)


def _user_errors(run_dir: Path) -> list[dict]:
    import json

    try:
        return json.loads((run_dir / "run.json").read_text()).get("user_errors") or []
    except (OSError, ValueError, AttributeError):
        return []


def report_outcome(run_dir: Path, prog: str = "llm-locust run") -> bool:
    """After a run: print the users that failed (e.g. in ``on_start``) and, when no request
    succeeded, the failure summary, on stderr. Returns True when no request succeeded."""
    for error in _user_errors(run_dir):
        print(f"{prog}: a user failed ({error.get('count', 1)} x): {error.get('msg', '')}", file=sys.stderr)
    summary = failure_summary(run_dir)
    if summary:
        print(f"{prog}: {summary}", file=sys.stderr)
        return True
    return False


def cmd_run(args: argparse.Namespace, locust_args: list[str]) -> int:
    from llm_locust.launcher import LocustRun, free_port, run_locust

    options, locustfile = check_run(args, locust_args)
    preflight_or_exit(options.host, model=options.model, api_key=options.api_key or "")
    run_dir = args.run_dir or default_run_dir()
    print(f"run directory: {run_dir}")
    web_port = (args.web_port or free_port()) if args.web else None
    code = run_locust(
        LocustRun(locustfile=locustfile, run_dir=run_dir, workers=args.workers, locust_args=locust_args,
                  timeout_s=args.timeout_s, web_port=web_port, web_linger_s=args.web_linger_s)
    )
    if code not in (0, 1, 124, 130):  # 1 = some requests failed, 124/130 = stopped: still measured
        print(f"locust exited with code {code}; see {run_dir / 'locust_master.log'}", file=sys.stderr)
        return code
    _print_client_report(run_dir)
    if report_outcome(run_dir):
        return 1
    if args.no_analyze:
        return code
    from analysis.cli import main as analyze_main

    analyzed = analyze_main([str(run_dir)])
    return code if code in (124, 130) else analyzed


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
