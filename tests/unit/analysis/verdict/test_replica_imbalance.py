"""Rule ``replica_imbalance`` (llm_locust/analysis/verdict/replicaimbalance.py) on hand-built step tables.

Two llama.cpp replicas behind round robin, 1 and 3 slots: each gets half of the users, so
replica ``one`` runs ``min(c/2, 1)`` and queues ``max(c/2 - 1, 0)``, ``three`` runs ``min(c/2, 3)``.
At 4 users ``one`` runs 1 of 1 with 1 waiting while ``three`` runs 2 of 3: imbalanced. Throughput
follows the slower replica: round robin sends it half the requests, so the total rate is twice
``one``'s, flat from 2 users on.
"""

from __future__ import annotations

from llm_locust.analysis.perstep.table import replica_column
from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.verdict import BottleneckKind, ClientSide, ServerSide, diagnose
from llm_locust.analysis.verdict.jsonout import verdict_json
from tests.unit.analysis.verdict.test_verdict_rules import ev, table
from tests.verdict_contract import contract_problems

USERS = [1, 2, 4, 8]


def with_replicas(tab, slots):
    for name, n in slots.items():
        share = [u / 2 for u in USERS]
        tab[replica_column("server_running", name)] = [min(s, n) for s in share]
        tab[replica_column("server_waiting", name)] = [max(s - n, 0.0) for s in share]
    tab["server_running"] = sum(tab[replica_column("server_running", n)] for n in slots)
    tab["server_waiting"] = sum(tab[replica_column("server_waiting", n)] for n in slots)
    return tab


def judge(slots, tput, ceilings):
    tab = with_replicas(table(USERS, tput, ttft=[50, 52, 400, 1500]), slots)
    config = ServerConfig(engine="llamacpp", batch_ceiling=sum(slots.values()), batch_ceiling_name="n_slots")
    server = ServerSide(family="llamacpp", replica_ceilings=ceilings)
    return diagnose(tab, server, config, ClientSide())


def test_one_slot_beside_three_queues_while_the_other_has_slots_to_spare():
    verdict = judge({"one": 1, "three": 3}, [30, 60, 62, 63], {"one": 1, "three": 3})
    e = ev(verdict, "replica_imbalance")
    assert e.holds
    assert e.values["users"] == 4  # the first saturated step: one runs 1 of 1, 1 waits; three runs 2 of 3
    assert (e.values["queued_running"], e.values["queued_waiting"], e.values["queued_ceiling"]) == (1, 1, 1)
    assert (e.values["spare_running"], e.values["spare_ceiling"]) == (2, 3)
    assert "replica one queues at its configured ceiling" in e.text and "replica three has slots" in e.text
    assert verdict.bottleneck is BottleneckKind.SCHEDULER_CEILING and verdict.evidence[0] is e
    assert verdict.critical_concurrency == 2
    assert verdict.recommendations[0].because == "replica_imbalance"
    assert "least_conn" in verdict.recommendations[0].flag
    assert contract_problems(verdict_json(verdict)) == []


def test_equal_replicas_that_fill_together_are_balanced():
    verdict = judge({"a": 2, "b": 2}, [30, 60, 115, 118], {"a": 2, "b": 2})
    assert not ev(verdict, "replica_imbalance").holds
    assert verdict.bottleneck is BottleneckKind.SCHEDULER_CEILING
    assert verdict.critical_concurrency == 4


def test_without_configured_ceilings_each_replicas_highest_running_stands_for_it():
    verdict = judge({"one": 1, "three": 3}, [30, 60, 62, 63], {"one": None, "three": None})
    e = ev(verdict, "replica_imbalance")
    assert e.holds and "its highest observed ceiling" in e.text
    assert e.values["spare_ceiling"] == 3  # three's highest step-average running (at 8 users)


def test_a_replica_queueing_at_its_ceiling_saturates_the_whole_while_throughput_still_rises():
    """The CI run of tests/real/test_real_replicas.py that read ``none``: behind round robin the
    users pile up at the 1-slot replica (each replica gets every other request, the slow one
    finishes fewer), so the aggregate runs 2.5 then 3.5 of 4 while one's queue grows - and the
    throughput of a noisy 12 s step still rose x1.3 from 4 to 8 users. One replica at its own
    configured ceiling with its own queue from a step on is a saturation there, never ``none``."""
    tab = table(USERS, [30, 55, 66, 86], ttft=[50, 60, 900, 2600])
    piles = {"one": ([1.0, 1.0, 1.0, 1.0], [0.0, 0.3, 1.5, 4.5]), "three": ([0.0, 0.7, 1.5, 2.5], [0.0] * 4)}
    for name, (running, waiting) in piles.items():
        tab[replica_column("server_running", name)] = running
        tab[replica_column("server_waiting", name)] = waiting
    tab["server_running"] = [sum(piles[n][0][i] for n in piles) for i in range(len(USERS))]
    tab["server_waiting"] = [sum(piles[n][1][i] for n in piles) for i in range(len(USERS))]
    config = ServerConfig(engine="llamacpp", batch_ceiling=4, batch_ceiling_name="n_slots")
    verdict = diagnose(
        tab, ServerSide(family="llamacpp", replica_ceilings={"one": 1, "three": 3}), config, ClientSide()
    )
    assert verdict.bottleneck is BottleneckKind.SCHEDULER_CEILING, verdict.headline
    assert verdict.critical_concurrency == 2  # one queues (1.5 > 0.5 waiting) from 4 users on
    assert verdict.critical.saturated_users == 4
    assert any("replica one runs 1.00 of its configured ceiling 1" in line for line in verdict.critical.evidence)
    assert verdict.evidence[0].rule == "replica_imbalance" and verdict.evidence[0].holds
    assert contract_problems(verdict_json(verdict)) == []
