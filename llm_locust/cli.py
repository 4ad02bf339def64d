"""``llm-locust``: the command line. Parses, then calls one library entry point per subcommand.

    llm-locust demo                         embedded server + ladder + analysis, end to end
    llm-locust run --host URL [flags]       Locust master + N workers against your server
    llm-locust analyze RUN_DIR              per-step table, critical concurrency, PNGs
    llm-locust compare RUN_DIR RUN_DIR ...  rounds side by side: round table, attribution
    llm-locust diagnose --host URL [...]    baseline, config check, ladder, verdict (+ A/B) in one go
    llm-locust sim-server [flags]           the embedded continuous-batching server

``run`` takes its own few flags (below) and passes every other flag to Locust unchanged, so the
flags of ``locust -f llm_locust/locustfiles/…`` (Locust's and llm-locust's own, see ``llm_locust.options``)
work here too. Imports are lazy: ``sim-server`` and ``analyze`` never import Locust or gevent.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from llm_locust.argtypes import non_negative_int, positive_float
from llm_locust.clihelp import (
    HelpFormatter,
    Parser,
    add_deprecated_alias,
    add_first_request_flag,
    add_passthrough_help,
    locust_parser,
    parse_locust_args,
)
from llm_locust.run.postrun import finish_run, preload_post_run
from llm_locust.run.preflight import LOCUSTFILES, default_run_dir, preflight_or_exit, run_dir_problem

__all__ = [
    "locust_parser",
    "parse_locust_args",
    "SHAPE_LOCUSTFILES",
    "SUBCOMMANDS",
    "build_parser",
    "check_run",
    "main",
]

PROGRESS_EVERY_S = 10.0
"""Seconds between the progress lines of a run (``--quiet``: none)."""
SHAPE_LOCUSTFILES = {"ladder": "ladder.py", "baseline": "baseline.py", "rate": "rate.py", "none": "chat_stream.py"}


RUN_OWN_FLAGS_NOTE = """\
llm-locust run starts a Locust master and workers; every flag not listed above goes to them:
  -H URL, --host URL    the server, without /v1 (required), e.g. http://127.0.0.1:8000
  -u N, -r N, -t TIME   users, spawn rate and run time with --shape none (Locust's own)
and llm-locust's options below (the same flags as `locust -f llm_locust/locustfiles/ladder.py`)."""

RUN_FOOTER = """\
Locust's own options (-u, -r, -t, --csv, --tags, --exit-code-on-error, ...) pass through too:
  llm-locust run --help-locust        lists them all, with the llm-locust options above"""


class HelpLocust(argparse.Action):
    """``--help-locust``: print Locust's own parser's help (llm-locust's options added) and exit."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(locust_parser().format_help())
        parser.exit()


def _add_fail_on(parser: argparse.ArgumentParser) -> None:
    """``--fail-on`` as ``analyze`` defines it when help is asked for; otherwise the same flag
    without its help text, whose module (the analysis: pandas, matplotlib) took seconds of
    ``run``'s start-up (the flag is parsed with :mod:`llm_locust.analysis.thresholds` only when given)."""
    if {"-h", "--help"} & set(sys.argv[1:]) or sys.argv[1:2] != ["run"]:
        from llm_locust.analysis.analyzecmd import add_fail_on_argument

        add_fail_on_argument(parser)
        return
    parser.add_argument("--fail-on", action="append", default=[], metavar="EXPR")


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    add_passthrough_help(parser, intro=RUN_OWN_FLAGS_NOTE, footer=RUN_FOOTER)
    parser.add_argument(
        "--help-locust", action=HelpLocust, help="Show every flag Locust takes (its own and llm-locust's) and exit"
    )
    parser.add_argument(
        "--workers",
        type=non_negative_int,
        default=2,
        metavar="N",
        help="Local Locust worker processes (default 2; 0 with --remote-workers)",
    )
    parser.add_argument(
        "--remote-workers", type=non_negative_int, default=0, metavar="N",
        help="Also wait for N workers started elsewhere (other machines, Kubernetes pods: locust -f … --worker "
             "--master-host THIS --master-port PORT); the master then listens on every interface at --master-port",
    )  # fmt: skip
    parser.add_argument(
        "--master-port", type=int, default=5557, help="The master's port for --remote-workers (default 5557)"
    )
    parser.add_argument(
        "--shape", choices=sorted(SHAPE_LOCUSTFILES), default=None,
        help="ladder (--ladder, --dwell-s, --warmup-s; the default), rate (--rate/--rates, --arrival, --max-users; "
             "the default with --trace), baseline (--baseline-requests) or none (-u, -r, -t)",
    )  # fmt: skip
    parser.add_argument("-f", "--locustfile", default=None, help="Your own locustfile instead of the shape's")
    parser.add_argument(
        "--out",
        dest="run_dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="Output folder: the run directory (default runs/run-<time>); must not hold a run already",
    )
    add_deprecated_alias(parser, "--run-dir", "--out", dest="run_dir", type=Path)
    parser.add_argument("--no-analyze", action="store_true", help="Do not analyse the run directory afterwards")
    parser.add_argument(
        "-q", "--quiet", action="store_true",
        help="No progress lines while it runs (step i of N, users, elapsed, time left); the results are still printed",
    )  # fmt: skip
    add_first_request_flag(parser)
    _add_fail_on(parser)
    parser.add_argument(
        "--timeout-s",
        type=positive_float,
        default=3600.0,
        metavar="S",
        help="Upper bound on the run's duration, s; past it the run is stopped and its data kept",
    )
    parser.add_argument(
        "--web", action="store_true",
        help="Watch it live: Locust's web UI with the LLM tab on the master at 127.0.0.1:--web-port (the run still "
             "starts and stops by itself)",
    )  # fmt: skip
    parser.add_argument(
        "--web-port", type=int, default=8089, help="Web UI port with --web (0: a free one; default 8089)"
    )
    parser.add_argument(
        "--web-linger-s", type=float, default=60.0, help="With --web: seconds the web UI stays up after the run ends"
    )


def check_run(args: argparse.Namespace, locust_args: list[str]):
    """Everything ``run`` can check before it starts a process: returns ``(options, locustfile)``;
    the parsed ``--fail-on`` thresholds are left in ``args.thresholds``.

    Raises
    ------
    SystemExit
        Status 2, after one ``llm-locust run: error: …`` line on stderr.
    """
    from llm_locust.options import rate_ladder, validate_options

    def fail(message: str):
        print(f"llm-locust run: error: {message}", file=sys.stderr)
        raise SystemExit(2)

    options = parse_locust_args(locust_args, strict=args.locustfile is None)
    trace = getattr(options, "trace", "")
    if getattr(args, "shape", None) is None:
        args.shape = "rate" if trace else "ladder"
    locustfile = Path(args.locustfile) if args.locustfile else LOCUSTFILES / SHAPE_LOCUSTFILES[args.shape]
    if not locustfile.is_file():
        fail(f"locustfile {locustfile} not found")
    if args.workers + args.remote_workers < 1:
        fail("--workers 0 needs --remote-workers N (at least one worker)")
    if not options.host:
        fail("--host is required (e.g. --host http://127.0.0.1:8000)")
    if trace and args.shape != "rate" and args.locustfile is None:
        fail(f"--trace is replayed open-loop by --shape rate (this run's shape: {args.shape})")
    try:
        validate_options(options)
        if args.shape == "rate" and args.locustfile is None and not trace:
            rate_ladder(options)  # a rate run without a rate is refused here, not in the master
    except ValueError as exc:
        fail(str(exc))
    if (
        args.shape != "rate"
        and args.locustfile is None
        and (getattr(options, "rate", 0) or getattr(options, "rates", ""))
    ):
        fail(f"--rate/--rates take effect with --shape rate only (this run's shape: {args.shape})")
    if args.run_dir is not None and (problem := run_dir_problem(args.run_dir)):
        fail(problem)
    args.thresholds = check_thresholds(args, options, fail)
    return options, locustfile


def check_thresholds(args: argparse.Namespace, options, fail) -> tuple:
    """``--fail-on`` parsed, and its ``@USERS`` checked against the ladder the run will climb
    (``fail(message)`` raises on a problem): before any load is sent."""
    if not getattr(args, "fail_on", None):
        return ()  # nothing to check: the analysis (pandas) is not imported before the run
    from llm_locust.analysis.thresholds import ThresholdError, check_steps, parse_thresholds
    from llm_locust.options import parse_ladder

    try:
        thresholds = parse_thresholds(getattr(args, "fail_on", None))
        if thresholds and getattr(args, "no_analyze", False):
            raise ThresholdError("--fail-on is checked on the analysis: drop --no-analyze")
        ladder = getattr(options, "ladder", None)
        steps = parse_ladder(ladder) if ladder and getattr(args, "shape", "ladder") == "ladder" else None
        if not getattr(args, "locustfile", None):  # a locustfile of the user's own: checked on the analysis
            check_steps(thresholds, steps)
    except ThresholdError as exc:
        fail(str(exc))
    return thresholds


def check_input_sizing(options) -> str:
    """Size ``--input-tokens`` (and ``--trace``) prompts once before any load (tokenizer or server probes): exit 2
    with one line when they cannot be built exactly. Returns the calibration as
    ``--input-calibration`` text, which the workers then use instead of probing again.

    Raises
    ------
    SystemExit
        Status 2, after one ``llm-locust run: error: …`` line on stderr.
    """
    from llm_locust.client.models import first_served_model
    from llm_locust.client.workload.build import build_request_source, input_calibration

    try:
        model = options.model or first_served_model(options.host, api_key=options.api_key or "")
        calibration = input_calibration(options, host=options.host, model=model)
        options.input_calibration = calibration.to_json()
        build_request_source(options, host=options.host, model=model, prompts=())  # the length check
        return options.input_calibration
    except Exception as exc:  # any failure to size the prompts stops the run before it starts
        flag = "--trace" if getattr(options, "trace", "") else "--input-tokens"
        print(f"llm-locust run: error: {flag}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def cmd_run(args: argparse.Namespace, locust_args: list[str]) -> int:
    from llm_locust.run.launcher import BootedLocust

    # the master and the workers import Locust (~0.7 s of CPU each) while this process checks the run;
    # they run nothing until run_locust gives them their command lines
    booted = BootedLocust(args.workers, plugin=args.locustfile is None)
    try:
        return _run_checked(args, locust_args, booted)
    finally:
        booted.cancel()  # those not handed out: a refused run, an interrupt before the start


def _run_checked(args: argparse.Namespace, locust_args: list[str], booted) -> int:
    from llm_locust.master.config import metrics_targets, targets_line
    from llm_locust.run.launcher import LocustRun, SigtermAsInterrupt, free_port, run_locust

    with SigtermAsInterrupt() as signals:  # SIGTERM stops the run the way Ctrl-C does (exit 143)
        try:
            options, locustfile = check_run(args, locust_args)
            preflight_or_exit(
                options.host,
                model=options.model,
                api_key=options.api_key or "",
                model_required=not getattr(options, "payload_file", "") and options.protocol != "generic",
            )
            sized = getattr(options, "input_tokens", 0) or getattr(options, "trace", "")
            if sized and not getattr(options, "input_calibration", ""):
                locust_args = [*locust_args, "--input-calibration", check_input_sizing(options)]
            if args.locustfile is None and not args.no_first_request:
                from llm_locust.run.firstrequest import check_first_request

                check_first_request(locust_args, prog="llm-locust run")
        except KeyboardInterrupt:  # nothing started yet
            return signals.exit_code
        run_dir = args.run_dir or default_run_dir()
        print(f"run directory: {run_dir}")
        print(targets_line(metrics_targets(options, options.host), options.host))
        preload_post_run(analyze=not args.no_analyze)  # the report's imports, while the test runs
        web_port = (args.web_port or free_port()) if args.web else None
        code = run_locust(
            LocustRun(
                locustfile=locustfile,
                run_dir=run_dir,
                workers=args.workers,
                remote_workers=args.remote_workers,
                master_port=args.master_port,
                locust_args=locust_args,
                timeout_s=args.timeout_s,
                web_port=web_port,
                web_linger_s=args.web_linger_s,
                booted=booted,
            ),
            signals=signals,
            progress_every_s=0 if args.quiet else PROGRESS_EVERY_S,
        )
        signals.stopping()  # the run is over: a SIGTERM now lets the report finish
        return finish_run(
            run_dir,
            code,
            exit_code_on_error=options.exit_code_on_error,
            analyze=not args.no_analyze,
            fail_on=args.thresholds,
        )


def _add_analyze(parser: argparse.ArgumentParser) -> None:
    from llm_locust.analysis.analyzecmd import add_arguments

    add_arguments(parser)


def _add_compare(parser: argparse.ArgumentParser) -> None:
    from llm_locust.analysis.compare.comparecmd import add_arguments

    add_arguments(parser)


def _add_diagnose(parser: argparse.ArgumentParser) -> None:
    from llm_locust.run import diagnose

    diagnose.add_arguments(parser)


def _add_demo(parser: argparse.ArgumentParser) -> None:
    from llm_locust.run import demo

    demo.add_arguments(parser)


def _add_sim_server(parser: argparse.ArgumentParser) -> None:
    from llm_locust.simserver.config import add_arguments

    add_arguments(parser)


SUBCOMMANDS = {
    "run": (
        "One load run against your server (a concurrency ladder by default), then its analysis",
        _add_run_arguments,
    ),
    "analyze": ("Analyse a run directory (again): step table, verdict, report/", _add_analyze),
    "compare": ("Rounds side by side (an A/B of one server change): round table and attribution", _add_compare),
    "diagnose": (
        "The playbook against your server: baseline, config check, ladder, verdict (and an A/B)",
        _add_diagnose,
    ),
    "demo": ("The whole job against an embedded server, end to end", _add_demo),
    "sim-server": ("Start the embedded server (a model of continuous batching) on its own", _add_sim_server),
}
"""Subcommand -> (help line, function adding its arguments). Each function imports its module
only when called, so a subcommand's parser costs only its own imports: ``run`` never imports
pandas, matplotlib or aiohttp just to read its flags (they took seconds of its start-up)."""


TOP_DESCRIPTION = """\
Load-test an LLM inference server (vLLM, TGI, SGLang, llama.cpp, your own), find the concurrency
where it stops scaling (the critical concurrency) and name the bottleneck, with the evidence."""

TOP_EPILOG = """\
start here:
  llm-locust demo                                   the whole job against an embedded server (~2 min)
  llm-locust diagnose --host http://127.0.0.1:8000  your server: baseline, config check, ladder, verdict
  llm-locust run --host http://127.0.0.1:8000 --ladder 1,2,4,8   one ladder run, analysed
  llm-locust compare runs/a runs/b                  two rounds side by side (an A/B of one change)

Each command's options: llm-locust COMMAND --help. Docs: the docs/ folder (mkdocs site)."""


def package_version() -> str:
    """The installed distribution's version (``importlib.metadata``), or ``unknown``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llm-locust")
    except PackageNotFoundError:
        return "unknown"


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``llm-locust`` parser: every subcommand, or only ``only`` (the one on the command line).

    Parameters
    ----------
    only : str, optional
        A key of :data:`SUBCOMMANDS`: build just that subcommand's parser (same ``prog``, same
        messages); None builds them all (``llm-locust --help``, a misspelt subcommand).
    """
    parser = Parser(prog="llm-locust", description=TOP_DESCRIPTION, epilog=TOP_EPILOG, formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    for name, (help_text, add_arguments) in SUBCOMMANDS.items():
        if only is None or name == only:
            command = sub.add_parser(name, help=help_text, description=help_text, formatter_class=HelpFormatter)
            add_arguments(command)
            command.set_defaults(_command_parser=command)  # its own usage line for its errors (main)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the process's own command line: an --api-key on it moves to the environment
        from llm_locust.auth import reexec_without_api_key

        reexec_without_api_key()
    own_process = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv[0] if argv[:1] and argv[0] in SUBCOMMANDS else None)
    args, rest = parser.parse_known_args(argv)
    command_parser = vars(args).pop("_command_parser")
    if args.command == "run":  # rest goes to Locust's own parser, which judges it
        code = cmd_run(args, rest)
        if own_process:  # the process ends now: its report is written and closed
            from llm_locust.run.boot import exit_without_final_collection

            exit_without_final_collection()
        return code
    if args.command == "diagnose":
        from llm_locust.run import diagnose

        return diagnose.run(args, rest)
    if rest:  # as the subcommand's own error ("llm-locust analyze: error: ..."), with its usage line
        command_parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "analyze":
        from llm_locust.analysis.analyzecmd import run as analyze_run

        return analyze_run(args)
    if args.command == "compare":
        from llm_locust.analysis.compare.comparecmd import run as compare_run

        return compare_run(args)
    if args.command == "demo":
        from llm_locust.run import demo

        return demo.run(args)
    from llm_locust.simserver import run_from_args

    run_from_args(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
