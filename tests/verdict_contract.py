"""The verdict's contract (DESIGN.md), checked on any ``verdict.json`` object.

Used by the generated step tables of ``tests/unit/analysis/verdict/test_verdict_contract.py``,
the embedded-server scenarios and the real-server runs: whatever the run, the primary kind's own
evidence holds and no sentence of it denies the kind, an ``undetermined`` names its candidates
and what tells them apart, secondaries hold, and the critical concurrency is not at or past the
step the primary's evidence names.
"""

from __future__ import annotations

import re

NOT = re.compile(r"\bnot\b", re.IGNORECASE)
SERVER_KINDS = {"batching_off", "scheduler_ceiling", "kv_cache", "compute", "timeouts", "rejections"}


def contract_problems(verdict: dict) -> list[str]:
    """Every way ``verdict`` (a ``verdict.json`` object of a ladder) breaks the contract; [] when none."""
    problems = []
    kind = verdict["bottleneck"]
    evidence = verdict["evidence"]
    primary = evidence[0]
    if not primary["holds"]:
        problems.append(f"primary {kind}: its first evidence ({primary['rule']}) does not hold: {primary['text']}")
    if NOT.search(primary["text"]):
        problems.append(f"primary {kind}: its evidence says 'not': {primary['text']}")
    if primary["rule"] != "server_outage" and primary["kind"] != kind:
        problems.append(f"primary {kind}: its first evidence speaks for {primary['kind']}")
    if kind == "undetermined":
        if not 2 <= len(verdict["candidates"]) <= 3 or not verdict["tells_apart"]:
            problems.append(f"undetermined without 2-3 candidates and what tells them apart: {verdict['candidates']}")
    elif verdict["candidates"] or verdict["tells_apart"]:
        problems.append(f"{kind} with candidates {verdict['candidates']}")
    for other in verdict["secondary"]:
        holding = [e for e in evidence if e["kind"] == other and e["holds"]]
        if not holding:
            problems.append(f"secondary {other} without holding evidence")
    if kind == "client" and set(verdict["secondary"]) & SERVER_KINDS:
        problems.append(f"client primary beside server kinds {verdict['secondary']}")
    named = primary["values"].get("users")
    critical = verdict["critical_concurrency"]
    # (failures: their evidence names the first step where they were significant, which can lie
    # below a saturation further up when they were sprinkled; tested on its own in test_verdict_rules)
    ceiling_kinds = SERVER_KINDS - {"timeouts", "rejections"}
    if critical is not None and named is not None and kind in ceiling_kinds and named <= critical:
        problems.append(
            f"critical concurrency {critical} at or past the step its {kind} evidence names ({named} users): "
            f"{primary['text']}"
        )
    return problems


def assert_verdict_contract(verdict: dict, context: str = "") -> None:
    """Fail the calling test with every way ``verdict`` breaks the contract (:func:`contract_problems`).

    ``context`` (e.g. the console's tail) is added to the message.
    """
    problems = contract_problems(verdict)
    assert not problems, "\n".join(problems) + (f"\n{context}" if context else "")
