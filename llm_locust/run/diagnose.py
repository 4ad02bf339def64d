"""``llm-locust diagnose``: the playbook's whole order against one server, as one command.

1. Single-request baseline: ``--baseline-requests`` requests one at a time (fixed prompt set,
   temperature 0, fixed ``--max-tokens``), medians (``<round>/baseline/``).
2. Startup-config check: did the batching settings take effect (server log, ``/props``, ``/info``).
3. Ladder (``<round>/ladder/``) until the knee is passed. When the verdict finds the steps too
   short to decide (``undetermined``, rule ``steps_too_short``), the ladder is rerun once with
   the ``--dwell-s`` it asks for, within ``--time-budget-s``. While the critical concurrency is not
   reached and throughput still rises at the top step, the ladder is run again with two more
   doublings, bounded by ``--max-users`` and ``--time-budget-s`` (the earlier attempt is kept as
   ``ladder-try<N>/``). With ``--rates`` the ladder is a request-rate ladder (``--shape rate``):
   its steps are offered requests/s, extended the same way up to ``--max-rate``, sent by a pool
   of ``--max-users`` users.
4. Verdict and recommendations (the single-run analysis, :mod:`llm_locust.analysis.pipeline`), and
   the ``--fail-on`` thresholds checked on each round's ladder (exit 3 when one fails).
5. With ``--host-b`` (a second server) or ``--compare-to`` (an earlier round): the A/B round and the
   attribution (:mod:`llm_locust.analysis.compare`), ``compare/``.

Everything lands under ``--out``: one folder per round and ``report/index.html`` linking them.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from llm_locust.argtypes import positive_float, positive_int
from llm_locust.options import MAX_USERS_DEFAULT, parse_ladder, parse_rates

REPORT_PAGE = Path("report") / "index.html"
"""The one page of a diagnosis to open, under ``--out`` (:func:`llm_locust.analysis.compare.html.write_index`)."""
ATTEMPT_OVERHEAD_S = 30.0
"""Start-up, drain and analysis of one Locust run beyond its steps, s (for the time budget)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``diagnose`` flags; any other flag goes to Locust unchanged (as with ``run``), and its help
    lists those (llm-locust's options) after its own."""
    from llm_locust.clihelp import add_passthrough_help

    add_passthrough_help(
        parser,
        intro="Every other flag goes to each round's Locust runs (baseline and ladder), among them:",
        footer="Locust's own options pass through too: llm-locust run --help-locust lists them all.",
        exclude={"--run-dir", "--rate", "--records-window"},
    )
    parser.add_argument("--host", required=True, metavar="URL", help="The server, without /v1 (round a)")
    parser.add_argument("--host-b", default=None, metavar="URL", help="A second server to compare with (round b)")
    parser.add_argument(
        "--compare-to",
        type=Path,
        default=None,
        metavar="ROUND",
        help="An earlier round (run directory or round folder) to compare with; it is the baseline round",
    )
    parser.add_argument("--model", default="", metavar="NAME", help="Model of round a (default: the server's first)")
    parser.add_argument("--model-b", default=None, metavar="NAME", help="Model of round b (default: --model)")
    parser.add_argument(
        "--label", action="append", default=[], metavar="KEY=VALUE", help="Label of round a (repeatable)"
    )
    parser.add_argument(
        "--label-b", action="append", default=[], metavar="KEY=VALUE", help="Label of round b (repeatable)"
    )
    parser.add_argument("--server-log", default=None, metavar="PATH", help="Server log of round a to follow")
    parser.add_argument("--server-log-b", default=None, metavar="PATH", help="Server log of round b to follow")
    parser.add_argument(
        "--out", type=Path, default=None, metavar="DIR", help="Output folder (default runs/diagnose-<time>)"
    )
    parser.add_argument(
        "--baseline-requests", type=positive_int, default=10, metavar="N", help="Single-request repeats (default 10)"
    )
    parser.add_argument("--ladder", default=None, metavar="U1,U2,...", help="Starting ladder, users (default 1,2,4,8)")
    parser.add_argument(
        "--rates",
        default=None,
        metavar="R1,R2,...",
        help="A request-rate ladder instead (requests/s, --shape rate), e.g. 1,2,4,8",
    )
    parser.add_argument(
        "--max-users",
        type=positive_int,
        default=MAX_USERS_DEFAULT,
        metavar="N",
        help="Never extend the ladder past this; with --rates: the users that send the schedule "
        f"(default {MAX_USERS_DEFAULT}, as run's)",
    )
    parser.add_argument(
        "--max-rate",
        type=positive_float,
        default=64.0,
        metavar="R",
        help="With --rates: never extend the rate ladder past this, requests/s (default 64)",
    )
    parser.add_argument(
        "--time-budget-s",
        type=positive_float,
        default=1800.0,
        metavar="S",
        help="No ladder extension that would end past this many seconds after the start (default 1800)",
    )
    parser.add_argument(
        "--dwell-s", type=positive_float, default=20.0, metavar="S", help="Seconds per ladder step (default 20)"
    )
    parser.add_argument(
        "--warmup-s", type=float, default=5.0, metavar="S", help="Warm-up left out of each step (default 5)"
    )
    parser.add_argument(
        "--max-tokens", type=positive_int, default=64, metavar="N", help="max_tokens per request (default 64)"
    )
    parser.add_argument(
        "--workers", type=positive_int, default=2, metavar="N", help="Locust workers for the ladder (default 2)"
    )
    from llm_locust.analysis.analyzecmd import add_fail_on_argument
    from llm_locust.clihelp import add_first_request_flag

    add_fail_on_argument(parser)
    add_first_request_flag(parser)
    parser.add_argument(
        "-q", "--quiet", action="store_true",
        help="No progress lines while its runs go (step i of N, users, elapsed, time left); the results are still printed",
    )  # fmt: skip
    from llm_locust.run.search import add_search_arguments

    add_search_arguments(parser)


def extended_ladder(ladder: list, bound: float) -> list:
    """The ladder with two more doublings of its top step, those not above ``bound``.

    >>> extended_ladder([1, 2, 4], 16)
    [1, 2, 4, 8, 16]
    >>> extended_ladder([0.5, 1.0], 3.0)
    [0.5, 1.0, 2.0]
    """
    return list(ladder) + [x for x in (ladder[-1] * 2, ladder[-1] * 4) if x <= bound]


def possible_ladder(ladder: list[int], max_users: int) -> list[int]:
    """Every step the ladder may climb: the starting ladder and its doublings up to ``max_users``.

    >>> possible_ladder([1, 2, 4], 16)
    [1, 2, 4, 8, 16]
    """
    steps = list(ladder)
    while steps[-1] * 2 <= max_users:
        steps.append(steps[-1] * 2)
    return steps


@dataclass
class RoundRun:
    """What one measured round produced (folders and analyses)."""

    name: str
    folder: Path
    baseline: object = None
    ladder: object = None
    notes: list[str] = field(default_factory=list)
    failed: bool = False


def _rising_at_top(result, min_gain: float = 1.15) -> bool:
    """Throughput still rises over the last two measured steps (gain per doubling of the load,
    users or offered requests/s, >= ``min_gain``)."""
    from llm_locust.analysis.loadaxis import load_axis

    column = load_axis(result.table).column
    table = result.table.dropna(subset=["output_tps"]).sort_values(column)
    if len(table) < 2:
        return False
    (u0, t0), (u1, t1) = table[[column, "output_tps"]].to_numpy()[-2:]
    if t0 <= 0 or u1 <= u0:
        return t1 > t0
    return (t1 / t0) ** (1.0 / math.log2(u1 / u0)) >= min_gain


def longer_dwell_s(result, dwell_s: float) -> float | None:
    """The ``--dwell-s`` to rerun a ladder with when its verdict found the steps too short to
    decide (rule ``steps_too_short``, its ``dwell_s_needed``), or None (decided, or no longer
    dwell asked for than ``dwell_s``)."""
    verdict = getattr(result, "verdict", None)
    if verdict is None or verdict.bottleneck.value != "undetermined":
        return None
    short = next((e for e in verdict.evidence if e.rule == "steps_too_short" and e.holds), None)
    needed = short.values.get("dwell_s_needed") if short is not None else None
    if needed is None or not math.isfinite(needed) or needed <= dwell_s:
        return None
    return float(needed)


def check_compare_to_axis(path: Path, *, rate: bool) -> None:
    """Refuse (``ValueError``, an :class:`llm_locust.analysis.compare.changes.LoadAxisMismatch`) a
    ``--compare-to`` round whose ladder steps a different load axis than the one this diagnosis
    will run (a concurrency ladder, or a ``--rates`` ladder), before any load is sent.

    Raises
    ------
    llm_locust.analysis.rundir.reader.RunDirError
        The round cannot be read.
    """
    from llm_locust.analysis.compare.changes import LoadAxisMismatch, load_round
    from llm_locust.analysis.loadaxis import RATE, load_axis

    earlier = load_round(path)
    if earlier.ladder is None:
        return
    if (load_axis(earlier.ladder.steps) is RATE) != rate:
        this = "a request-rate ladder (--rates)" if rate else "a concurrency ladder (--ladder)"
        other = "a request-rate ladder" if not rate else "a concurrency ladder"
        raise LoadAxisMismatch(
            f"--compare-to {path}: its ladder is {other}, this diagnosis runs {this}; the rounds' "
            "steps, knees and critical values would be in different units (different load axes)"
        )


def check_log_format(args: argparse.Namespace, extra: list[str]) -> None:
    """Refuse (``ValueError``) a ``--server-log-format`` among the Locust flags that would read
    no log: neither ``--server-log`` (diagnose's own) nor ``--server-log-cmd`` is given, and the
    file has no ``[metrics]`` table (:func:`llm_locust.options.log_format_problem`)."""
    from llm_locust.options import log_format_problem

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--server-log-format", default="")
    parser.add_argument("--server-log-cmd", default="")
    known = parser.parse_known_args(extra)[0]
    if known.server_log_format:
        followed = bool(args.server_log or known.server_log_cmd)
        if problem := log_format_problem(known.server_log_format, followed=followed):
            raise ValueError(problem)


class Stopped(Exception):
    """The user stopped a run (Ctrl-C, SIGTERM) or it hit its timeout: no further phase starts."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def exit_code_on_error(extra: list[str]) -> int:
    """The ``--exit-code-on-error`` among the Locust flags (Locust's default, 1, when not given):
    the code a Locust run that measured, with some requests failing, ends with.

    >>> exit_code_on_error(["--exit-code-on-error", "0"]), exit_code_on_error([])
    (0, 1)
    """
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--exit-code-on-error", type=int, default=1)
    try:
        return parser.parse_known_args(extra)[0].exit_code_on_error
    except SystemExit:  # a malformed value: Locust's own parser refuses it, and the run fails
        return 1


def _locust(
    locustfile: str,
    run_dir: Path,
    workers: int,
    args: list[str],
    timeout_s: float,
    signals,
    *,
    on_error: int = 1,
    quiet: bool = False,
) -> bool:
    """Run one Locust shape; raise :class:`Stopped` when it was stopped (124/130/143).

    Returns
    -------
    bool
        True when the run measured: Locust ended with 0, or with ``on_error`` (its
        ``--exit-code-on-error``: some requests failed). Otherwise (a Locust error, a master that
        refused to record) the master's own words are printed and False is returned.
    """
    from llm_locust.run.launcher import STOPPED_CODES, LocustRun, run_locust
    from llm_locust.run.postrun import report_master_failure
    from llm_locust.run.preflight import LOCUSTFILES

    code = run_locust(
        LocustRun(
            locustfile=LOCUSTFILES / locustfile, run_dir=run_dir, workers=workers, locust_args=args, timeout_s=timeout_s
        ),
        signals=signals,
        progress_every_s=0 if quiet else 10.0,
    )
    if code in STOPPED_CODES:
        raise Stopped(code)
    if code not in (0, on_error):
        report_master_failure(run_dir, code, "llm-locust diagnose")
        return False
    return True


def request_args(host: str, model: str, args: argparse.Namespace, extra: list[str]) -> list[str]:
    """The Locust flags that shape a round's requests (host, model, max_tokens, temperature 0,
    the pass-through flags): its runs' and its first request's."""
    return [
        "--host", host, "--max-tokens", str(args.max_tokens), "--temperature", "0",
        *(["--model", model] if model else []), *extra,
    ]  # fmt: skip


def measure_round(
    name: str,
    folder: Path,
    *,
    host: str,
    model: str,
    labels: list[str],
    server_log: str | None,
    args: argparse.Namespace,
    extra: list[str],
    ladder: list,
    started: float,
    signals,
) -> tuple[RoundRun, list]:
    """Baseline, config check, ladder (extended while throughput rises), verdict; prints as it goes.

    Returns
    -------
    (RoundRun, list)
        The round and the ladder it ended with (users, or requests/s with ``args.rates``).
    """
    from llm_locust.analysis.analyzecmd import print_result
    from llm_locust.analysis.loadaxis import fmt_number
    from llm_locust.analysis.pipeline import analyze_run
    from llm_locust.run.postrun import report_outcome

    out = RoundRun(name=name, folder=folder)
    common = [
        *request_args(host, model, args, extra),
        *[x for label in labels for x in ("--label", label)],
        *(["--server-log", server_log] if server_log else []),
    ]
    print(
        f"\n=== round {name}: {host} ===\n-- 1. single-request baseline ({args.baseline_requests} requests, one at a time)"
    )
    on_error = exit_code_on_error(extra)
    measured = _locust(
        "baseline.py",
        folder / "baseline",
        1,
        [*common, "--baseline-requests", str(args.baseline_requests)],
        60.0 + args.baseline_requests * 120.0,
        signals,
        on_error=on_error,
        quiet=args.quiet,
    )
    if not measured or report_outcome(folder / "baseline", prog="llm-locust diagnose"):
        out.failed = True
        return out, ladder
    out.baseline = analyze_run(folder / "baseline")
    print(out.baseline.baseline.text if out.baseline.baseline else "baseline: no figures")
    print("-- 2. startup-config check")
    print(out.baseline.config_check.line if out.baseline.config_check else "no server configuration read")
    for detail in out.baseline.config_check.details if out.baseline.config_check else ():
        print(f"  {detail}")
    attempt, lengthened = 1, False
    rate = bool(args.rates)
    unit, bound = ("req/s", args.max_rate) if rate else ("users", args.max_users)
    while True:
        steps = ",".join(map(fmt_number, ladder))
        print(
            f"-- 3. {'rate ladder' if rate else 'ladder'} {steps}{' req/s' if rate else ''}, {args.dwell_s:g} s a step"
        )
        run_dir = folder / "ladder"
        measured = _locust(
            "rate.py" if rate else "ladder.py",
            run_dir,
            args.workers,
            [
                *common,
                *(["--rates", steps, "--max-users", str(args.max_users)] if rate else ["--ladder", steps]),
                "--dwell-s",
                str(args.dwell_s),
                "--warmup-s",
                str(args.warmup_s),
            ],
            len(ladder) * args.dwell_s + 180.0,
            signals,
            on_error=on_error,
            quiet=args.quiet,
        )
        if not measured or report_outcome(run_dir, prog="llm-locust diagnose"):
            out.failed = True
            return out, ladder
        out.ladder = analyze_run(run_dir, fail_on=getattr(args, "thresholds", ()))
        dwell_s = longer_dwell_s(out.ladder, args.dwell_s)
        if dwell_s is not None:  # the verdict could not decide on steps this short: lengthen them once
            needed_s = len(ladder) * dwell_s + ATTEMPT_OVERHEAD_S
            if not lengthened and time.monotonic() - started + needed_s <= args.time_budget_s:
                print(f"steps too short to tell: rerunning the ladder with --dwell-s {dwell_s:g}")
                run_dir.rename(folder / f"ladder-try{attempt}")
                attempt, args.dwell_s, lengthened = attempt + 1, dwell_s, True
                continue
            out.notes.append(
                f"steps too short to tell; a ladder of {dwell_s:g} s a step does not fit the time budget "
                f"({args.time_budget_s:g} s, --time-budget-s)"
                if not lengthened
                else f"steps still too short to tell at --dwell-s {args.dwell_s:g}"
            )
            break
        if out.ladder.critical.users is not None or not _rising_at_top(out.ladder):
            break
        longer = extended_ladder(ladder, bound)
        needed_s = len(longer) * args.dwell_s + ATTEMPT_OVERHEAD_S
        top = f"{fmt_number(ladder[-1])} {unit}"
        if len(longer) == len(ladder):
            flag = f"--max-rate {fmt_number(bound)}" if rate else f"--max-users {bound}"
            out.notes.append(f"throughput still rises at {top}; {flag} stops the ladder")
            break
        if time.monotonic() - started + needed_s > args.time_budget_s:
            out.notes.append(
                f"throughput still rises at {top}; the time budget "
                f"({args.time_budget_s:g} s) leaves no room for {[fmt_number(x) for x in longer]}"
            )
            break
        print(f"throughput still rises at {top}: extending the ladder to {[fmt_number(x) for x in longer]}")
        run_dir.rename(folder / f"ladder-try{attempt}")
        attempt, ladder = attempt + 1, longer
    for note in out.notes:
        print(f"Note: {note}")
    print("-- 4. verdict and recommendations")
    print_result(out.ladder)
    return out, ladder


def run(args: argparse.Namespace, extra: list[str]) -> int:
    """The whole order; returns 0, 1 when a round had no successful request, 2 on bad arguments
    (a malformed ``--fail-on`` among them, refused before any load) or when the comparison is
    refused (different workloads, or a ``--compare-to`` round of the other load axis: refused
    before any load), 3 when a round's ladder failed a ``--fail-on`` threshold,
    124/130/143 when a run was stopped (timeout, Ctrl-C, SIGTERM: no further phase starts, the
    runs so far are kept)."""
    from llm_locust.analysis.compare import WorkloadMismatch, compare_rounds, write_comparison
    from llm_locust.analysis.compare.changes import LoadAxisMismatch
    from llm_locust.analysis.compare.comparecmd import print_comparison
    from llm_locust.analysis.compare.html import write_index
    from llm_locust.analysis.rundir.reader import RunDirError
    from llm_locust.analysis.thresholds import EXIT_THRESHOLD_FAILED, check_steps, parse_thresholds
    from llm_locust.auth import API_KEY_ENV, api_key_out_of_argv
    from llm_locust.run.firstrequest import check_first_request
    from llm_locust.run.launcher import SigtermAsInterrupt
    from llm_locust.run.preflight import default_run_dir, out_dir_problem, preflight_or_exit

    try:
        if args.ladder is not None and args.rates is not None:
            raise ValueError("give --ladder (users) or --rates (requests/s), not both")
        ladder: list = parse_rates(args.rates) if args.rates is not None else parse_ladder(args.ladder or "1,2,4,8")
        if args.host_b and args.compare_to:
            raise ValueError("give --host-b or --compare-to, not both")
        if args.compare_to and not args.compare_to.exists():
            raise ValueError(f"--compare-to {args.compare_to}: no such folder")
        if args.compare_to:
            check_compare_to_axis(args.compare_to, rate=args.rates is not None)
        if getattr(args, "search", False):
            from llm_locust.run.search import slo_text

            if not slo_text(extra):
                raise ValueError("--search finds the largest concurrency meeting the SLOs: give --slo too")
            if args.rates is not None:
                raise ValueError("--search probes concurrencies: leave out --rates")
        args.thresholds = parse_thresholds(args.fail_on)
        check_log_format(args, extra)
        if args.rates is not None:
            if any(t.where not in (None, "knee") for t in args.thresholds):
                raise ValueError("--fail-on @N names a step's users; with --rates give @knee or no step")
        else:
            check_steps(args.thresholds, possible_ladder(ladder, args.max_users))
    except (ValueError, RunDirError) as exc:
        print(f"llm-locust diagnose: error: {exc}", file=sys.stderr)
        return 2
    out = args.out or default_run_dir("diagnose")
    # a folder used before: its master would refuse to record and its old verdict read back as new
    if problem := out_dir_problem(out):
        print(f"llm-locust diagnose: error: {problem}", file=sys.stderr)
        return 2
    # the key the Locust runs will send (--api-key among the Locust flags, else LLM_LOCUST_API_KEY)
    api_key = api_key_out_of_argv(extra)[1] or os.environ.get(API_KEY_ENV, "")
    for host, model in ((args.host, args.model), (args.host_b, args.model_b or args.model)):
        if host:
            preflight_or_exit(host, model=model, api_key=api_key, prog="llm-locust diagnose", model_required=False)
            if not args.no_first_request:
                check_first_request(request_args(host, model, args, extra), prog="llm-locust diagnose")
    out.mkdir(parents=True, exist_ok=True)
    print(f"output: {out}\nopen this page when it ends: {out / REPORT_PAGE}")
    started = time.monotonic()
    rounds: list[RoundRun] = []
    with SigtermAsInterrupt() as signals:
        try:
            first, ladder = measure_round(
                "a",
                out / "round-a",
                host=args.host,
                model=args.model,
                labels=args.label,
                server_log=args.server_log,
                args=args,
                extra=extra,
                ladder=ladder,
                started=started,
                signals=signals,
            )
            rounds.append(first)
            if args.host_b and not first.failed:
                second, _ = measure_round(
                    "b",
                    out / "round-b",
                    host=args.host_b,
                    model=args.model_b or args.model,
                    labels=args.label_b,
                    server_log=args.server_log_b,
                    args=args,
                    extra=extra,
                    ladder=ladder,
                    started=started,
                    signals=signals,
                )
                rounds.append(second)
            if getattr(args, "search", False) and not first.failed:
                from llm_locust.run.search import search_capacity

                search_capacity(
                    out / "round-a" / "search",
                    common=request_args(args.host, args.model, args, extra),
                    args=args,
                    extra=extra,
                    started=started,
                    signals=signals,
                    run_probe=lambda run_dir, locust_args, timeout_s: _locust(
                        "ladder.py",
                        run_dir,
                        args.workers,
                        locust_args,
                        timeout_s,
                        signals,
                        on_error=exit_code_on_error(extra),
                        quiet=args.quiet,
                    ),  # fmt: skip
                )
                verdict = getattr(first.ladder, "verdict", None)
                if verdict is not None:
                    print(f"Bottleneck (the ladder's verdict, step 4): {verdict.bottleneck.value}")
        except Stopped as stop:  # what was measured stays in --out; nothing further starts
            print(f"llm-locust diagnose: stopped (exit {stop.code}); runs so far are in {out}", file=sys.stderr)
            return stop.code
    comparison, problem = None, ""
    paths = [args.compare_to, out / "round-a"] if args.compare_to else [r.folder for r in rounds]
    if len(paths) > 1 and not any(r.failed for r in rounds):
        print("\n=== 5. A/B: round table and attribution ===")
        try:
            comparison = write_comparison(compare_rounds(paths), out / "compare")
            print_comparison(comparison)
        except (WorkloadMismatch, LoadAxisMismatch) as exc:
            problem = str(exc)
            print(f"llm-locust diagnose: {problem}", file=sys.stderr)
    index = write_index(
        out, [(r.name, r.folder, r.notes) for r in rounds], comparison, compare_to=args.compare_to, problem=problem
    )
    print(f"\nreport (open this page first): {index}")
    if any(r.failed for r in rounds):
        return 1
    if problem:
        return 2
    failed = [r for r in rounds if any(c.failed for c in getattr(r.ladder, "thresholds", ()))]
    for r in failed:
        print(f"llm-locust diagnose: round {r.name} failed a --fail-on threshold", file=sys.stderr)
    return EXIT_THRESHOLD_FAILED if failed else 0
