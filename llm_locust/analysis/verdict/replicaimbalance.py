"""Rule ``replica_imbalance``: one replica queues at its ceiling while another has slots to spare.

With several replicas scraped (``--server-metrics-url`` per replica,
:mod:`llm_locust.analysis.server.replicas`), the step table has each replica's running and waiting beside
the aggregate (``server_running[name]``, ``server_waiting[name]``). A gateway that spreads
requests without looking at free slots (nginx's default round-robin, a Kubernetes Service)
sends every replica the same share: a replica with fewer slots fills and queues while another
still has free slots, and the aggregate saturates below the sum of the replicas' ceilings.
Written here: the field's rule, no library has it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from llm_locust.analysis.loadaxis import load_axis
from llm_locust.analysis.perstep.table import replica_column, replica_names
from llm_locust.analysis.verdict.types import BottleneckKind, Evidence, Recommendation, Rules

RULE = "replica_imbalance"


def slack(ceiling: float, rules: Rules) -> float:
    """How far below its ceiling a replica's step-average running still counts as full (and
    beyond which it has slots to spare): ``max(0.5, (1 - rules.running_ceiling) x ceiling)``
    requests.

    >>> from llm_locust.analysis.verdict.types import RULES
    >>> slack(1.0, RULES), round(slack(64.0, RULES), 2)
    (0.5, 6.4)
    """
    return max(0.5, (1.0 - rules.running_ceiling) * ceiling)


def _ceilings(usable: pd.DataFrame, names: list[str], configured: Mapping[str, int | None]) -> dict[str, float]:
    """Each replica's ceiling: its own configured one, else its highest step-average running."""
    out = {}
    for name in names:
        value = configured.get(name)
        if value:
            out[name] = float(value)
        else:
            running = usable[replica_column("server_running", name)].astype(float)
            out[name] = float(running.max()) if running.notna().any() else math.nan
    return out


def replica_imbalance(
    usable: pd.DataFrame, ceilings: Mapping[str, int | None], rules: Rules, *, from_users: float | None = None
) -> Evidence:
    """Rule ``replica_imbalance``: at some usable step a replica runs at its ceiling with a queue
    while another has a slot free and none waiting.

    A replica *queues at its ceiling* when its waiting > ``rules.waiting_threshold`` and its
    running is within :func:`slack` of its ceiling (its configured one, else its highest
    step-average running); another *has slots to spare* when its waiting <=
    ``rules.waiting_threshold`` and its running is more than :func:`slack` below its ceiling. (A
    server queues only with its slots full, so a replica's own waiting already says it is full;
    the slack absorbs how coarsely scrapes sample a small ceiling: a 1-slot replica that queues
    all along still reads a little below 1 running over a step, in the gaps between one request's
    end and the next one's start.)

    Parameters
    ----------
    usable : pandas.DataFrame
        Usable steps with the replicas' columns (:func:`llm_locust.analysis.perstep.table.replica_step_means`).
    ceilings : mapping
        ``{replica name: configured ceiling or None}``.
    rules : Rules
    from_users : float, optional
        The first saturated step's load: the evidence names the first imbalanced step at or
        after it when there is one (the step the aggregate stopped scaling at), else the first.

    Returns
    -------
    Evidence
        Kind ``scheduler_ceiling`` (the ceiling of the replica that fills first); values: the
        step's load, the queued replica's running, waiting and ceiling, the spare one's
        running and ceiling, their number (``queued_replica``, ``spare_replica``: index in
        name order).
    """
    kind = BottleneckKind.SCHEDULER_CEILING
    names = replica_names(usable)
    if len(names) < 2 or usable.empty:
        return Evidence(rule=RULE, kind=kind, holds=False, text="fewer than two replicas scraped")
    axis = load_axis(usable)
    ordered = usable.sort_values(axis.column, kind="stable")
    top = _ceilings(ordered, names, ceilings)
    found = []
    for _, row in ordered.iterrows():
        running = {n: float(row[replica_column("server_running", n)]) for n in names}
        waiting = {n: float(row[replica_column("server_waiting", n)]) for n in names}
        full = [
            n for n in names if waiting[n] > rules.waiting_threshold and running[n] >= rules.running_ceiling * top[n]
        ]
        spare = [
            n
            for n in names
            if np.isfinite(running[n]) and waiting[n] <= rules.waiting_threshold and top[n] - running[n] >= 1.0
        ]
        if full and spare:
            q = max(full, key=lambda n: waiting[n])
            s = max(spare, key=lambda n: top[n] - running[n])
            found.append((row, q, s, running, waiting))
    if not found:
        return Evidence(
            rule=RULE,
            kind=kind,
            holds=False,
            text="no step had one replica queueing at its ceiling while another had a slot free",
        )
    later = [f for f in found if from_users is not None and float(f[0][axis.column]) >= from_users]
    row, q, s, running, waiting = (later or found)[0]
    values = {
        axis.value_key: float(row[axis.column]),
        "queued_running": running[q],
        "queued_waiting": waiting[q],
        "queued_ceiling": top[q],
        "spare_running": running[s],
        "spare_ceiling": top[s],
        "queued_replica": float(names.index(q)),
        "spare_replica": float(names.index(s)),
        "imbalanced_steps": float(len(found)),
    }
    units = {
        axis.value_key: axis.value_unit,
        "queued_running": "requests",
        "queued_waiting": "requests",
        "queued_ceiling": "requests",
        "spare_running": "requests",
        "spare_ceiling": "requests",
        "queued_replica": "index",
        "spare_replica": "index",
        "imbalanced_steps": "steps",
    }
    said = "its configured" if ceilings.get(q) else "its highest observed"
    text = (
        f"at {axis.fmt(row[axis.column])} replica {q} queues at {said} ceiling (running {running[q]:.2f} of "
        f"{top[q]:g}, {waiting[q]:.2f} waiting) while replica {s} has slots to spare (running {running[s]:.2f} "
        f"of {top[s]:g}, {waiting[s]:.2f} waiting): the gateway gives each replica the same share, so the "
        f"replicas together saturate below the sum of their ceilings ({sum(top.values()):g})"
    )
    return Evidence(rule=RULE, kind=kind, holds=True, values=values, units=units, text=text)


def balance_recommendation(evidence: Evidence) -> Recommendation:
    """Spread requests by free slots (the recommendation a holding :func:`replica_imbalance` adds)."""
    return Recommendation(
        change="let the gateway send each request to the replica with the fewest in flight, or weight "
        "each replica by its slots (or give every replica the same slots)",
        flag="nginx upstream: least_conn; or server ... weight=<slots>",
        because=evidence.rule,
        verify="rerun the same ladder with the same script and inputs, only this change, and check that "
        "no replica's waiting rises above zero while another has a free slot, and that the critical "
        "concurrency moves toward the sum of the replicas' ceilings",
    )
