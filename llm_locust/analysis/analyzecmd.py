"""``llm-locust analyze RUN_DIR``: a thin command over :func:`llm_locust.analysis.pipeline.analyze_run`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from llm_locust.analysis.perrequest.chunks import multi_token_line
from llm_locust.analysis.perrequest.outcome import RunOutcome, error_lines
from llm_locust.analysis.perstep.inputs import input_lines
from llm_locust.analysis.pipeline import (
    ReportWriteError,
    analyze_run,
    config_line,
    critical_line,
    format_check_lines,
    format_table,
)
from llm_locust.analysis.report.sections import goodput_line
from llm_locust.analysis.report.verdict import verdict_lines
from llm_locust.analysis.rundir.reader import RunDirError
from llm_locust.analysis.server.serverlog import TimeSource
from llm_locust.analysis.server.sources import ServerOptions, ServerSource
from llm_locust.analysis.thresholds import THRESHOLD_HELP, ThresholdError, parse_thresholds, summary_lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``analyze`` arguments to ``parser`` (reused by the ``llm-locust`` subcommand)."""
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="run directory holding run.json and requests.csv")
    parser.add_argument(
        "--min-gain-per-doubling",
        type=float,
        default=1.15,
        metavar="X",
        help="throughput ratio per doubling of concurrency below which throughput stops rising (default: %(default)s)",
    )
    parser.add_argument(
        "--waiting-threshold",
        type=float,
        default=0.5,
        metavar="X",
        help="time-averaged server waiting requests above which the server queues (default: %(default)s)",
    )
    parser.add_argument(
        "--ttft-growth",
        type=float,
        default=1.5,
        metavar="X",
        help="TTFT p50 ratio to the previous step above which TTFT climbs (default: %(default)s)",
    )
    parser.add_argument(
        "--slo",
        default=None,
        metavar="OBJECTIVES",
        help='service-level objectives for goodput, e.g. "ttft_ms<=500,tpot_ms<=50" '
        "(metrics: ttft_ms, first_answer_ms, tpot_ms, e2e_ms with <=; decode_tps with >=; default: the run's --slo)",
    )
    add_fail_on_argument(parser)
    add_server_arguments(parser)
    add_quiet_argument(parser)


def add_quiet_argument(parser: argparse.ArgumentParser) -> None:
    """``-q/--quiet`` of every long command: no progress lines (the results are still printed)."""
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="No progress lines while it works (the results are still printed)"
    )


def add_fail_on_argument(parser: argparse.ArgumentParser) -> None:
    """``--fail-on EXPR`` (repeatable), shared by ``analyze``, ``run`` and ``diagnose``."""
    parser.add_argument("--fail-on", action="append", default=[], metavar="EXPR", help=THRESHOLD_HELP)


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """How to read the server side: source policy, log, format file, family, time zone."""
    parser.add_argument(
        "--server-source",
        choices=[s.value for s in ServerSource],
        default="auto",
        help="server data for the step table: metrics, log, both (metrics first, "
        "the log where metrics have no value) or auto (what exists; default)",
    )
    parser.add_argument(
        "--server-log",
        type=Path,
        default=None,
        metavar="PATH",
        help="read this server log instead of RUN_DIR/server.log",
    )
    parser.add_argument(
        "--server-log-format",
        type=Path,
        default=None,
        metavar="FILE",
        help="user format file (TOML: named-group regexes, metric names) for a server without a built-in parser, "
        "or a shipped format's name (nginx-error: nginx's error log)",
    )
    parser.add_argument(
        "--server-family",
        default=None,
        metavar="NAME",
        help="force the engine: vllm, sglang, tgi, llamacpp, triton or generic (default: detected)",
    )
    parser.add_argument(
        "--server-log-tz",
        default=None,
        metavar="TZ",
        help="time zone of log stamps without one (UTC, local, +05:30, "
        "Europe/Paris; default: the run master's, else UTC)",
    )
    parser.add_argument(
        "--server-log-time",
        choices=[t.value for t in TimeSource],
        default="auto",
        help="place log lines by their arrival stamps, their own stamps, or auto (default)",
    )


def server_options(args: argparse.Namespace) -> ServerOptions:
    """The :class:`ServerOptions` of parsed ``analyze`` arguments."""
    return ServerOptions(
        source=ServerSource(args.server_source),
        family=args.server_family,
        tz=args.server_log_tz,
        time_source=TimeSource(args.server_log_time),
    )


def print_result(result) -> None:
    """Print the per-step table, the verdict block (``Bottleneck: <kind> — …`` with its evidence
    and recommendations), notes, the critical concurrency with its evidence (or why there is
    none: no request, no success - with the error kinds -, one load level), the batching-config
    check, the format file checked against the server log (lines matched per pattern, warnings),
    the written files. ``analyze``, ``run`` and ``diagnose`` print through it."""
    if result.outcome is not RunOutcome.NO_REQUESTS:
        print(format_table(result.table))
        print()
    if getattr(result, "verdict", None) is not None:
        for line in verdict_lines(result.verdict):
            print(line)
        print()
    for note in result.notes:
        print(f"Note: {note}")
    if result.baseline is not None and result.outcome is RunOutcome.MEASURED:
        print(result.baseline.text)  # one stream at a time: no ladder to find a knee on
    if result.no_verdict_line:
        print(result.no_verdict_line)
        for line in result.critical.evidence[:-1]:
            print(f"  {line}")
        if result.outcome is RunOutcome.NO_SUCCESS and result.errors is not None:
            print("Errors by kind (one example message each):")
            for line in error_lines(result.errors):
                print(f"  {line}")
    elif result.baseline is None:
        print(critical_line(result.critical))
        for line in result.critical.evidence:
            print(f"  {line}")
        if result.critical.kneed_users is not None:
            print(f"  kneed cross-check: {result.critical.axis.fmt(result.critical.kneed_users)}")
    if getattr(result, "slos", ()) and result.outcome is RunOutcome.MEASURED:
        print(goodput_line(result.slos, result.goodput_knee_users, result.critical.users, result.critical.axis))
    if config_line(result):
        print(config_line(result))
        for detail in result.config_check.details:
            print(f"  {detail}")
    for line in format_check_lines(result):
        print(f"  {line}" if line.startswith("warning:") else f"Format file {line}")
    for line in summary_lines(getattr(result, "thresholds", ())):
        print(line)
    for line in input_lines(result.table)[2:-1]:  # without the heading and the blank line
        print("Inputs: " + line[2:].replace("**", ""))
    if multi_token_line(result.table):
        print(multi_token_line(result.table))
    paths = result.paths
    if paths is None:  # not written (ReportWriteError)
        return
    print()
    for label, path in (
        ("Throughput", paths.throughput_png),
        ("Latency", paths.latency_png),
        ("Timeline", paths.timeline_png),
        ("Errors", paths.errors_png),
        ("Steps CSV", paths.steps_csv),
        ("Verdict JSON", paths.verdict_json),
        ("Summary", paths.summary_md),
        ("HTML index", paths.index_html),
    ):
        if path is not None:
            print(f"{label}: {path}")


def run(args: argparse.Namespace) -> int:
    """Analyse ``args.run_dir``, print the table, the verdict and the written files.

    Returns
    -------
    int
        0 when some request succeeded; 1 when none was recorded or every one failed (no
        verdict: the printed output says why); 2 when the run directory cannot be read (one
        line on stderr naming the file, e.g. a byte that is not UTF-8 and its offset), a
        server option is wrong or a ``--fail-on`` expression is malformed or names a step the
        run does not have; 3 when measured but a ``--fail-on`` threshold failed.
    """
    try:
        fail_on = parse_thresholds(args.fail_on)
    except ThresholdError as exc:
        print(f"llm-locust analyze: error: {exc}", file=sys.stderr)
        return 2
    from llm_locust.analysis.console import Heartbeat

    heartbeat = Heartbeat("analyze", quiet=getattr(args, "quiet", False))
    try:
        with heartbeat:
            result = analyze_run(
                args.run_dir,
                min_gain_per_doubling=args.min_gain_per_doubling,
                waiting_threshold=args.waiting_threshold,
                ttft_growth=args.ttft_growth,
                server=server_options(args),
                server_log=args.server_log,
                server_log_format=args.server_log_format,
                slo=args.slo,
                fail_on=fail_on,
                stage=lambda name: setattr(heartbeat, "stage", name),
            )
    except (RunDirError, ValueError) as exc:
        print(f"llm-locust analyze: error: {exc}", file=sys.stderr)
        return 2
    except ReportWriteError as exc:  # the analysis is printed, the files are not there
        print_result(exc.result)
        print(f"llm-locust analyze: error: {exc}", file=sys.stderr)
        return 2
    print_result(result)
    return result.exit_code


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``llm-locust analyze``; ``argv`` excludes the ``analyze`` word."""
    parser = argparse.ArgumentParser(
        prog="llm-locust analyze", description="Analyse a run directory: per-step table, critical concurrency, report/."
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
