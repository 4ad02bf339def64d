"""``diagnose --slo ... --search``: after a round's ladder and verdict, probe one concurrency at a
time for the largest that meets the SLOs (:mod:`llm_locust.analysis.capacity`), each probe one step of the
ladder locustfile held ``--dwell-s``; a probe too short to decide is held once more for the
window the verdict's step rule asks for (within ``--time-budget-s``). Prints each probe, the
capacity line and the verdict at the first failing probe (the lowest concurrency that missed the
SLOs: what limits there, from a two-step ladder of the capacity and that level run after the
search, :func:`failing_verdict`); writes ``capacity.json`` beside the round's runs.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llm_locust.analysis.verdict.types import Verdict


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
    dwell_by_users: dict[int, float] = {}  # users -> the dwell that decided its probe, s
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
        dwell_by_users[users] = dwell_s
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
    failing = None
    if search.failing is not None and time.monotonic() - started + 2 * dwell_by_users[search.failing] + 60.0 <= (
        args.time_budget_s
    ):
        levels = [u for u in (search.capacity, search.failing) if u is not None]
        dwell_s = dwell_by_users[search.failing]
        run_dir = folder / ("verdict-" + "-".join(map(str, levels)))
        ladder = ",".join(map(str, levels))
        print(f"   the verdict at the first failing probe: ladder {ladder}, {dwell_s:g} s a step")
        if run_probe(
            run_dir,
            [*common, "--ladder", ladder, "--dwell-s", f"{dwell_s:g}", "--warmup-s", str(args.warmup_s)],
            len(levels) * dwell_s + 180.0,
        ):
            failing = failing_verdict(search.failing, levels, run_dir, analyze_run(run_dir, slo=text).verdict)
    if failing is not None:
        print(failing_verdict_line(failing))
    probes = [
        {"users": p.users, "met_share": _number(p.met_share), "met": p.met, "short": p.short,
         "shares": {k: _number(v) for k, v in p.shares.items()}}
        for p in search.probes
    ]  # fmt: skip
    summary = {"slo": text, "met_share": args.search_met_share, "capacity_users": search.capacity,
               "failing_users": search.failing, "line": line, "probes": probes,
               "failing_verdict": failing}  # fmt: skip
    (folder / "capacity.json").write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n")
    return search


def failing_verdict(users: int, levels: list[int], run_dir: Path, verdict: Verdict | None) -> dict | None:
    """The verdict at the search's first failing probe, for ``capacity.json``.

    A one-level probe cannot show where throughput stopped rising, so the verdict comes from a
    ladder of the capacity then the first failing level (``levels``; the failing one alone when
    even the first probe failed), run after the search with the failing probe's dwell.

    Parameters
    ----------
    users : int
        The first failing probe's users (``CapacitySearch.failing``).
    levels : list of int
        The verdict run's ladder, users.
    run_dir : Path
        Its run directory.
    verdict : Verdict or None
        Its verdict (None when the run held none).

    Returns
    -------
    dict or None
        ``users``, ``ladder`` (``levels``), ``run_dir`` (the folder's name), ``bottleneck`` (the
        kind), ``headline``, ``critical_users`` (None when not reached), ``candidates`` (with
        ``undetermined``) and ``recommendations`` (each ``change`` and ``flag``); None without a
        verdict.
    """
    if verdict is None:
        return None
    return {
        "users": users,
        "ladder": list(levels),
        "run_dir": run_dir.name,
        "bottleneck": verdict.bottleneck.value,
        "headline": verdict.headline,
        "critical_users": verdict.critical_concurrency,
        "candidates": [k.value for k in verdict.candidates],
        "recommendations": [{"change": r.change, "flag": r.flag} for r in verdict.recommendations],
    }


def failing_verdict_line(failing: dict) -> str:
    """The console line of :func:`failing_verdict`'s dict."""
    flags = ", ".join(r["flag"] for r in failing["recommendations"] if r["flag"])
    return (
        f"Bottleneck at the first failing probe ({failing['users']} users, ladder "
        f"{','.join(map(str, failing['ladder']))}): {failing['bottleneck']} - "
        f"{failing['headline']}" + (f" [{flags}]" if flags else "") + f" ({failing['run_dir']}/report/verdict.json)"
    )


def _number(value: float) -> float | None:
    """A float for JSON: None for NaN (not measured)."""
    return None if value != value else float(value)
