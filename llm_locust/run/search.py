"""``diagnose --slo ... --search``: after a round's ladder and verdict, probe one concurrency at a
time for the largest that meets the SLOs (:mod:`llm_locust.analysis.capacity`), each probe one step of the
ladder locustfile held ``--dwell-s``; a probe too short to decide is held once more for the
window the verdict's step rule asks for (within ``--time-budget-s``). Prints each probe and the
capacity line; writes ``capacity.json`` beside the round's runs.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path


def add_search_arguments(parser: argparse.ArgumentParser) -> None:
    """The search's flags on ``diagnose``'s parser."""
    from llm_locust.argtypes import positive_float, positive_int

    parser.add_argument(
        "--search",
        action="store_true",
        help="With --slo: after the ladder, search the largest concurrency whose requests meet the SLOs "
        "(bracket by doubling, then bisect; at most --search-max-probes one-step probes)",
    )
    parser.add_argument(
        "--search-met-share", type=positive_float, default=0.9, metavar="SHARE",
        help="Share of a probe's requests that must meet every SLO (default 0.9)",
    )  # fmt: skip
    parser.add_argument(
        "--search-max-probes", type=positive_int, default=8, metavar="N", help="Probes at most (default 8)"
    )
    parser.add_argument(
        "--search-resolution", type=positive_int, default=1, metavar="USERS",
        help="Stop bisecting when the bracket is this narrow, users (default 1)",
    )  # fmt: skip


def slo_text(extra: list[str]) -> str:
    """The ``--slo`` value among the pass-through flags ("" for none)."""
    for i, arg in enumerate(extra):
        if arg == "--slo" and i + 1 < len(extra):
            return extra[i + 1]
        if arg.startswith("--slo="):
            return arg.split("=", 1)[1]
    return ""


def search_capacity(
    folder: Path, *, common: list[str], args: argparse.Namespace, extra: list[str], started: float, signals, run_probe
):
    """Run the search for one round; returns the :class:`llm_locust.analysis.capacity.CapacitySearch`.

    ``run_probe(run_dir, locust_args, timeout_s) -> bool`` runs one Locust ladder run (True when
    it measured).
    """
    from llm_locust.analysis.capacity import CapacitySearch, judge_probe
    from llm_locust.analysis.perstep.goodput import parse_slo
    from llm_locust.analysis.pipeline import analyze_run
    from llm_locust.analysis.verdict import RULES
    from llm_locust.analysis.verdict.undetermined import window_needed_s

    text = slo_text(extra)
    slos = parse_slo(text)
    search = CapacitySearch(
        start=1, max_users=args.max_users, resolution=args.search_resolution, max_probes=args.search_max_probes
    )
    print(f"-- 5. capacity search at SLO {text} ({args.search_met_share:.0%} of requests)")
    while (users := search.next_users()) is not None:
        dwell_s, lengthened = args.dwell_s, False
        while True:
            run_dir = folder / f"probe-{users}" if not lengthened else folder / f"probe-{users}-long"
            measured = run_probe(
                run_dir,
                [*common, "--ladder", str(users), "--dwell-s", f"{dwell_s:g}", "--warmup-s", str(args.warmup_s)],
                dwell_s + 180.0,
            )
            if not measured:
                return search
            result = analyze_run(run_dir, slo=text)
            row = result.table.iloc[0]
            probe = judge_probe(row, result.run.requests, slos, users=users, met_share=args.search_met_share)
            if probe.short and not lengthened:
                needed = max(window_needed_s(row, RULES) + args.warmup_s, dwell_s * 2)
                if time.monotonic() - started + needed + 30.0 <= args.time_budget_s:
                    print(f"   {users} users: too short to decide ({probe.short}); holding {needed:.0f} s")
                    dwell_s, lengthened = math.ceil(needed), True
                    continue
            break
        search.record(probe)
        state = "meets" if probe.met else ("undecided" if probe.short else "misses")
        print(
            f"   {users} users: {probe.met_share:.0%} met the SLOs -> {state}"
            + (f" ({probe.limiting})" if probe.shares and not probe.met else "")
        )
        if time.monotonic() - started > args.time_budget_s:
            print("   time budget spent: the search stops here")
            break
    line = search.line(text, args.search_met_share)
    print(line)
    probes = [
        {"users": p.users, "met_share": _number(p.met_share), "met": p.met, "short": p.short,
         "shares": {k: _number(v) for k, v in p.shares.items()}}
        for p in search.probes
    ]  # fmt: skip
    summary = {"slo": text, "met_share": args.search_met_share, "capacity_users": search.capacity,
               "failing_users": search.failing, "line": line, "probes": probes}  # fmt: skip
    (folder / "capacity.json").write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n")
    return search


def _number(value: float) -> float | None:
    """A float for JSON: None for NaN (not measured)."""
    return None if value != value else float(value)
