"""The capacity search's order of probes and its answer, for servers whose SLO limit is known."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from llm_locust.analysis.capacity import CapacitySearch, Probe, judge_probe
from llm_locust.analysis.perstep.goodput import parse_slo


def _search(limit_users: int | None, **kwargs) -> CapacitySearch:
    search = CapacitySearch(**kwargs)
    while (users := search.next_users()) is not None:
        met = limit_users is not None and users <= limit_users
        search.record(Probe(users=users, met_share=1.0 if met else 0.0, met=met))
    return search


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 7, 12, 31, 40])
def test_the_capacity_is_the_limit_within_eight_probes(limit):
    search = _search(limit, max_users=64)
    assert search.capacity <= limit < search.failing  # the interval holds the true capacity
    assert len(search.probes) <= 8
    if len(search.probes) < 8:  # the bisection ran out of bracket, not of probes
        assert (search.capacity, search.failing) == (limit, limit + 1)
    else:  # 31: 1..32 bracketed in 6, two bisections: [28, 32); 40: 1..64 in 7, one: [32, 48)
        assert search.failing - search.capacity <= 16
    assert len({p.users for p in search.probes}) == len(search.probes)  # no level probed twice


def test_none_met_and_all_met():
    none = _search(None, start=2)
    assert (none.capacity, none.failing, [p.users for p in none.probes]) == (None, 2, [2])
    assert "below 2 users" in none.line("ttft_ms<=100")
    every = _search(1000, max_users=20)
    assert [p.users for p in every.probes] == [1, 2, 4, 8, 16, 20]
    assert (every.capacity, every.failing) == (20, None)
    assert "at least 20 users" in every.line("ttft_ms<=100")


def test_the_probe_limit_stops_the_bisection_with_a_wider_interval():
    search = _search(40, max_users=128, max_probes=7)  # 1..64 brackets (7 probes), no bisection left
    assert (search.capacity, search.failing, len(search.probes)) == (32, 64, 7)
    assert "interval [32, 64) users" in search.line("e2e_ms<=1000")


def test_judge_probe_shares_and_the_limiting_metric():
    # 10 requests in the window: TTFT 100..1000 ms, E2E 1000 ms each, one failed
    requests = pd.DataFrame({
        "t_start_s": [0.0] * 10, "e2e_ms": [1000.0] * 10, "ttft_ms": [100.0 * (i + 1) for i in range(10)],
        "output_tokens": [11.0] * 10, "error_kind": [""] * 9 + ["http_5xx"],
    })  # fmt: skip
    row = pd.Series({"window_start_s": 0.0, "window_end_s": 60.0, "window_s": 60.0,
                     "e2e_p50_ms": 1000.0, "ttft_p50_ms": 500.0})  # fmt: skip
    slos = parse_slo("ttft_ms<=500,e2e_ms<=1000")
    probe = judge_probe(row, requests, slos, users=4, met_share=0.5)
    assert probe.shares == {"ttft_ms<=500": 0.5, "e2e_ms<=1000": 0.9}  # the failure meets neither
    assert probe.met_share == 0.5 and probe.met and probe.limiting == "ttft_ms<=500"
    short = judge_probe(row.replace(60.0, 1.0), requests.assign(t_start_s=-0.5), slos, users=4, met_share=0.5)
    assert short.short and not short.met and not math.isnan(short.met_share)
