"""One server reached through a real nginx and directly is scraped once, never summed (issue 25
item 7): ``--host`` at the gateway (nginx proxies every path, ``/metrics`` too, to the one
embedded server) and ``--server-metrics-url`` given for the gateway's ``/metrics`` and the
server's own.

Expected from the server's configuration: the embedded server (``max_num_seqs`` 4) runs
``min(c, 4)`` requests at c users of a closed loop, whatever path a scrape took to reach it. Summed
over both URLs, the 2-user step would read 4 running (what the issue saw: 3.93 at 2 users). The
scraper recognises the second URL by the counters' ``_created`` times (the server's start, the
same on both paths), says so once (console, run.json ``metrics_duplicates``) and scrapes it no
further; the analysis leaves out what it scraped before that. ~20 s.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from llm_locust.analysis.pipeline import analyze_run
from llm_locust.run.demo import SIM_MODEL, start_sim_server
from llm_locust.run.launcher import free_port, stop_process
from tests.nginx import GatewaySite, nginx_gateway

pytestmark = pytest.mark.slow

MAX_NUM_SEQS = 4
LADDER = (2, 4)


@pytest.fixture(scope="module")
def gateway_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dup")
    port = free_port()
    server = start_sim_server(port=port, max_num_seqs=MAX_NUM_SEQS, log_path=tmp / "engine.log")
    try:
        site = GatewaySite(port=free_port(), upstreams=(f"127.0.0.1:{port}",))
        with nginx_gateway(tmp / "nginx", [site]):
            direct = f"http://127.0.0.1:{port}/metrics"
            out = subprocess.run(
                [sys.executable, "-m", "llm_locust.cli", "run", "--host", site.url, "--model", SIM_MODEL,
                 "--ladder", ",".join(map(str, LADDER)), "--dwell-s", "8", "--warmup-s", "2", "--max-tokens", "32",
                 "--server-metrics-url", f"gateway={site.url}/metrics", "--server-metrics-url", f"direct={direct}",
                 "--out", str(tmp / "run"), "--no-analyze"],
                capture_output=True, text=True, timeout=180,
            )  # fmt: skip
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        yield tmp / "run", site.url + "/metrics", direct, out.stdout + out.stderr
    finally:
        stop_process(server, grace_s=10)


def test_the_second_url_of_one_server_is_said_once_and_scraped_no_further(gateway_run):
    run_dir, via_gateway, direct, console = gateway_run
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["metrics_urls"] == [via_gateway, direct]  # the default HOST/metrics replaced, not added
    assert meta["metrics_duplicates"] == [{"url": direct, "same_as": via_gateway, "by": "_created"}]
    assert (
        f"server metrics: scraping gateway = {via_gateway}, direct = {direct} (--server-metrics-url replaces" in console
    )
    master_log = (run_dir / "locust_master.log").read_text()
    assert master_log.count("reaches the same server as") == 1, master_log[-2000:]
    scrapes = pd.read_csv(run_dir / "server_scrapes.csv")
    assert (scrapes["source"] == direct).sum() <= 2 < (scrapes["source"] == via_gateway).sum()


def test_running_is_the_one_servers_never_the_double(gateway_run):
    run_dir, via_gateway, direct, _ = gateway_run
    result = analyze_run(run_dir, write=False)
    table = result.table.set_index("target_users")
    for users in LADDER:
        assert table.loc[users, "server_running"] == pytest.approx(min(users, MAX_NUM_SEQS), abs=0.4), table
    assert not result.evidence.replicas
    assert [(d.url, d.same_as) for d in result.evidence.duplicates] == [(direct, via_gateway)]
    assert "direct is the same server as gateway, counted once" in result.server_source_line
