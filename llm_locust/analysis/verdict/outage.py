"""Rule ``server_outage``: the server could not be reached for a while during the run.

An outage (:func:`llm_locust.analysis.perrequest.faults.outage_spells`: a run of at least two connection-level failures
in a row - refused, reset, closed mid-stream - ended when the server answers again) is no
verdict on the server's scaling: requests then fail in well under a millisecond and users pause
between tries (``llm_locust.client.backoff``), so the step it falls in measures neither the
client nor the server's capacity. Every step whose steady window overlaps an outage is
**invalid** (:func:`llm_locust.analysis.verdict.client.client_validity`, reason ``outage: ...``) and left out
of the knee and of every other rule, but is never evidence that the *client* was the limit.

The rule holds when the run had an outage; its values give the longest one (start, the moment the
server answered again, the connection failures in it), how many there were and how many steps
they made invalid.
"""

from __future__ import annotations

import math

import pandas as pd

from llm_locust.analysis.verdict.knee import fmt_users
from llm_locust.analysis.verdict.types import BottleneckKind, Evidence


def outage_reason(row, spells: tuple[dict, ...], run_start_s: float) -> str:
    """The ``invalid_reason`` of a step whose window overlaps an outage ("" when none does).

    Parameters
    ----------
    row : pandas.Series
        A step-table row with ``outage_s``, ``outage_failures``, ``window_start_s``, ``window_end_s``.
    spells : tuple of dict
        :func:`llm_locust.analysis.perrequest.faults.outage_spells` records.
    run_start_s : float
        Start of the run (Unix s): times are given from it, as on the timeline.
    """
    seconds = float(row.get("outage_s", 0.0) or 0.0)
    if not seconds > 0:
        return ""
    overlapping = [s for s in spells if _overlaps(s, row["window_start_s"], row["window_end_s"])]
    spans = ", ".join(_span_text(s, run_start_s) for s in overlapping)
    return (
        f"outage: the server was unreachable for {seconds:.1f} s of this window (outage {spans}, "
        f"{int(row.get('outage_failures', 0))} connection failures), so it is not judged"
    )


def server_outage(table: pd.DataFrame, spells: tuple[dict, ...], run_start_s: float) -> Evidence:
    """Rule ``server_outage`` (module docstring).

    Parameters
    ----------
    table : pandas.DataFrame
        Step table with ``step``, ``target_users``, ``outage_s``.
    spells : tuple of dict
        :func:`llm_locust.analysis.perrequest.faults.outage_spells` records (``start_s``, ``end_s``, ``span_s``,
        ``requests``, ``recovered_s``; Unix s).
    run_start_s : float
        Start of the run (Unix s).
    """
    if not spells:
        return Evidence(
            rule="server_outage",
            kind=BottleneckKind.REJECTIONS,
            holds=False,
            values={"outages": 0},
            units={"outages": "outages"},
            text="the server stayed reachable (no run of connection failures)",
        )
    longest = max(spells, key=lambda s: _down_s(s))
    hit = table[table.get("outage_s", pd.Series(0.0, index=table.index)).fillna(0.0) > 0].sort_values("target_users")
    values = {
        "outages": len(spells),
        "start_s": longest["start_s"] - run_start_s,
        "recovered_s": longest["recovered_s"] - run_start_s,
        "down_s": _down_s(longest),
        "connection_failures": int(longest["requests"]),
        "connection_failures_total": int(sum(s["requests"] for s in spells)),
        "invalid_steps": len(hit),
    }
    units = {
        "outages": "outages",
        "start_s": "s",
        "recovered_s": "s",
        "down_s": "s",
        "connection_failures": "requests",
        "connection_failures_total": "requests",
        "invalid_steps": "steps",
    }
    steps = ", ".join(f"step {r.step} ({fmt_users(r.target_users)} users)" for r in hit.itertuples(index=False))
    more = f" (of {len(spells)} outages)" if len(spells) > 1 else ""
    down = f" ({_down_s(longest):.1f} s)" if math.isfinite(longest["recovered_s"]) else ""
    overlap = "overlaps it and is" if len(hit) == 1 else "overlap it and are"
    text = (
        f"server outage: unreachable {_span_text(longest, run_start_s)}{down}{more}, "
        f"{int(longest['requests'])} requests failed at the connection level"
        + (f"; {steps} {overlap} left out of the verdict" if steps else "; no step window overlaps it")
    )
    return Evidence(rule="server_outage", kind=BottleneckKind.REJECTIONS, holds=True, values=values, units=units,
                    text=text)  # fmt: skip


def _down_s(spell: dict) -> float:
    """From the first failure to the server's first answer (to the last failure when it never answered)."""
    end = spell["recovered_s"] if math.isfinite(spell["recovered_s"]) else spell["end_s"]
    return float(end - spell["start_s"])


def _overlaps(spell: dict, lo: float, hi: float) -> bool:
    end = spell["recovered_s"] if math.isfinite(spell["recovered_s"]) else hi
    return min(hi, end) > max(lo, spell["start_s"])


def _span_text(spell: dict, run_start_s: float) -> str:
    start = spell["start_s"] - run_start_s
    if math.isfinite(spell["recovered_s"]):
        return f"{start:.1f}-{spell['recovered_s'] - run_start_s:.1f} s into the run"
    return f"from {start:.1f} s into the run, never answered again"
