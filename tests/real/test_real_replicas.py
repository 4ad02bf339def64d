"""Two real llama.cpp replicas behind a real nginx round robin, each one's ``/metrics`` scraped.

Four ``llama-server`` (``MODEL=slow``, one thread each, from ``../shared/real-servers/llama-cpp``)
start at once: 2 + 2 slots behind one nginx site, 1 + 3 slots behind another (nginx from
Debian's package, its config written here: ``tests/nginx.py``). One ladder 1, 2, 4, 8 per site,
``--host`` at the gateway and ``--server-metrics-url`` once per replica (which replaces the
default ``HOST/metrics``: the gateway's ``/metrics`` is one replica's or the other's).

Expected from the servers' configuration, not from this project's code: a replica never runs
more requests than its slots (``--parallel``), so each replica's running reads at most its slots
and, at 8 users, where nginx's round robin gives each replica 4 requests, reads its slots; the
replicas together run at most 2 + 2 = 4, so the aggregate's critical concurrency is 4 (the
highest step below 8, where requests queue at both full replicas). Behind 1 + 3 slots round robin
gives both replicas the same share: at 4 users the 1-slot replica holds 2 requests (1 runs, 1
waits) while the other runs 2 of its 3 slots - the ``replica_imbalance`` evidence. Each
replica's figures are also checked against its own samples in ``server_metrics.csv`` (the raw
``llamacpp:requests_processing`` of that source, averaged here without the analysis' code).

One module, one start of the four servers and nginx, two ladders of 4 x 12 s: ~2.5 min.
"""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import ExitStack

import pandas as pd
import pytest

from llm_locust.analysis.perstep.table import replica_column
from llm_locust.analysis.pipeline import analyze_run
from llm_locust.run.launcher import free_port
from tests.nginx import GatewaySite, nginx_gateway
from tests.real_servers import real_server

pytestmark = [pytest.mark.slow, pytest.mark.real_server]

LADDER = [1, 2, 4, 8]
EVEN = {"a": 2, "b": 2}
UNEVEN = {"one": 1, "three": 3}
ARGS = [
    "--model", "slow-llama", "--ladder", ",".join(map(str, LADDER)), "--dwell-s", "12", "--warmup-s", "3",
    "--max-tokens", "32", "--ignore-eos", "true", "--max-users", "8",
]  # fmt: skip


@pytest.fixture(scope="module")
def replica_runs(tmp_path_factory):
    """``{"even": run_dir, "uneven": run_dir}`` and each replica's base URL by name."""
    tmp = tmp_path_factory.mktemp("replicas")
    with ExitStack() as stack:
        urls = {}
        for name, slots in {**EVEN, **UNEVEN}.items():
            urls[name] = stack.enter_context(
                real_server(
                    "llama-cpp", [], {"MODEL": "slow", "SLOTS": str(slots), "THREADS": "1"}, tmp / f"{name}.log"
                )
            )
        sites = {
            group: GatewaySite(
                port=free_port(),
                upstreams=tuple(urls[n].removeprefix("http://") for n in names),
                upstream_keepalive=0,  # llama-server closes kept-alive connections itself (tests/nginx.py)
            )
            for group, names in (("even", EVEN), ("uneven", UNEVEN))
        }
        stack.enter_context(nginx_gateway(tmp / "nginx", list(sites.values())))
        runs = {}
        for group, names in (("even", EVEN), ("uneven", UNEVEN)):
            run_dir = tmp / group
            metrics = [arg for n in names for arg in ("--server-metrics-url", f"{n}={urls[n]}/metrics")]
            out = subprocess.run(
                [sys.executable, "-m", "llm_locust.cli", "run", "--host", sites[group].url, *ARGS, *metrics,
                 "--out", str(run_dir)],
                capture_output=True, text=True, timeout=400,
            )  # fmt: skip
            assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
            runs[group] = (run_dir, out.stdout + out.stderr)
        yield runs, urls


def own_running(run_dir, url: str, start_s: float, end_s: float) -> float:
    """Mean of one source's raw ``llamacpp:requests_processing`` samples scraped in a window."""
    samples = pd.read_csv(run_dir / "server_metrics.csv")
    mine = samples[
        (samples["source"] == url)
        & (samples["metric"] == "llamacpp:requests_processing")
        & (samples["t_s"] >= start_s)
        & (samples["t_s"] < end_s)
    ]
    return float(mine["value"].mean())


def test_each_replica_is_scraped_instead_of_the_gateway_and_named(replica_runs):
    runs, urls = replica_runs
    run_dir, console = runs["even"]
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["metrics_urls"] == [f"{urls[n]}/metrics" for n in EVEN]  # not the gateway's /metrics
    assert [s["name"] for s in meta["metrics_sources"]] == list(EVEN)
    assert "server metrics: scraping a = " in console and "--server-metrics-url replaces the default" in console
    sources = set(pd.read_csv(run_dir / "server_metrics.csv")["source"])
    assert sources == {f"{urls[n]}/metrics" for n in EVEN}


def test_per_replica_columns_follow_each_servers_own_metrics_and_slots(replica_runs):
    runs, urls = replica_runs
    run_dir, _ = runs["even"]
    result = analyze_run(run_dir, write=False)
    table = result.table.set_index("target_users")
    for name, slots in EVEN.items():
        running, waiting = table[replica_column("server_running", name)], table[replica_column("server_waiting", name)]
        assert (running <= slots + 0.05).all(), table
        assert running[8] == pytest.approx(slots, abs=0.15), table  # 4 requests each, 2 slots: full
        assert waiting[8] > 0.5, table
        for users, row in table.iterrows():
            raw = own_running(run_dir, f"{urls[name]}/metrics", row["window_start_s"], row["window_end_s"])
            assert running[users] == pytest.approx(raw, abs=0.35), (name, users, table)
    total = table[[replica_column("server_running", n) for n in EVEN]].sum(axis=1)
    assert table["server_running"].to_numpy() == pytest.approx(total.to_numpy(), abs=0.05)
    assert result.evidence.config.batch_ceiling == sum(EVEN.values())


def test_aggregate_critical_concurrency_is_the_sum_of_the_slots(replica_runs):
    runs, _ = replica_runs
    result = analyze_run(runs["even"][0], write=False)
    slots = sum(EVEN.values())
    # within one ladder step of the sum of the slots
    assert result.verdict.critical_concurrency in (slots // 2, slots, 2 * slots), "\n".join(result.critical.evidence)
    assert result.verdict.bottleneck.value == "scheduler_ceiling", result.verdict.line
    assert not next(e for e in result.verdict.evidence if e.rule == "replica_imbalance").holds


def test_one_slot_beside_three_behind_round_robin_is_a_replica_imbalance(replica_runs):
    runs, _ = replica_runs
    result = analyze_run(runs["uneven"][0], write=False)
    table = result.table.set_index("target_users")
    one, three = (replica_column("server_running", n) for n in UNEVEN)
    assert (table[one] <= 1.05).all() and (table[three] <= 3.05).all(), table
    imbalance = next(e for e in result.verdict.evidence if e.rule == "replica_imbalance")
    assert imbalance.holds, (imbalance.text, table.filter(like="server_").to_string())
    assert imbalance.values["queued_replica"] == 0 and imbalance.values["spare_replica"] == 1  # "one", "three"
    assert imbalance.values["queued_ceiling"] == 1 and imbalance.values["spare_ceiling"] == 3
    assert result.verdict.bottleneck.value == "scheduler_ceiling", result.verdict.line
    assert any("least_conn" in r.flag for r in result.verdict.recommendations)
