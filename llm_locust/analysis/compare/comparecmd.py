"""``llm-locust compare RUN_DIR RUN_DIR [...]``: a thin command over :mod:`llm_locust.analysis.compare`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from llm_locust.analysis.compare.changes import WorkloadMismatch
from llm_locust.analysis.compare.report import PNG_NAMES, attribution_lines, compare_rounds, write_comparison
from llm_locust.analysis.compare.table import format_round_table
from llm_locust.analysis.rundir.reader import RunDirError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``compare`` arguments to ``parser`` (reused by the ``llm-locust`` subcommand)."""
    parser.add_argument(
        "rounds",
        nargs="+",
        type=Path,
        metavar="RUN_DIR",
        help="two or more rounds, baseline first: run directories, or round folders "
        "holding baseline/ and ladder/ run directories (as diagnose writes)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="where to write compare.json, rounds.csv, summary.md and the PNGs (default: <first RUN_DIR>/compare)",
    )
    from llm_locust.analysis.analyzecmd import add_quiet_argument

    add_quiet_argument(parser)
    parser.add_argument(
        "--allow-different-workload",
        action="store_true",
        help="compare even when the workload fingerprints differ (listed in the output)",
    )


def print_comparison(comparison) -> None:
    """Print the round table (one column per round), the changes and the attributions."""
    print(format_round_table(comparison.table))
    print()
    for line in comparison.workload_differences:
        print(f"Workloads differ: {line}")
    for line in attribution_lines(comparison):
        print(line)
    if comparison.out_dir is not None:
        print()
        for name in ("summary.md", "compare.json", "rounds.csv", *PNG_NAMES):
            print(f"{name}: {comparison.out_dir / name}")


def run(args: argparse.Namespace) -> int:
    """Compare ``args.rounds``; returns 0, or 2 (one line on stderr) when a run directory cannot be
    read, fewer than two rounds are given, or the workloads differ without
    ``--allow-different-workload``."""
    from llm_locust.analysis.console import Heartbeat

    with Heartbeat("compare", quiet=getattr(args, "quiet", False)) as heartbeat:
        heartbeat.stage = f"loading and analysing {len(args.rounds)} rounds"
        try:
            comparison = compare_rounds(args.rounds, allow_different_workload=args.allow_different_workload)
        except (RunDirError, WorkloadMismatch, ValueError) as exc:
            print(f"llm-locust compare: error: {exc}", file=sys.stderr)
            return 2
        out = args.out if args.out is not None else args.rounds[0] / "compare"
        heartbeat.stage = "writing compare.json, rounds.csv and the figures"
        written = write_comparison(comparison, out)
    print_comparison(written)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``llm-locust compare``; ``argv`` excludes the ``compare`` word."""
    parser = argparse.ArgumentParser(
        prog="llm-locust compare", description="Rounds side by side: round table and attribution."
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
