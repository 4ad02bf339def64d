"""One server reached through a real nginx and directly is scraped once, never summed (issue 25
item 7): ``--host`` at the gateway (nginx proxies every path, ``/metrics`` too, to the one
embedded server) and ``--server-metrics-url`` given for the gateway's ``/metrics`` and the
server's own.

Expected from the server's configuration: the embedded server (``max_num_seqs`` 4) runs
``min(c, 4)`` requests at c users of a closed loop, whatever path a scrape took to reach it. Summed
over both URLs, the 2-user step would read 4 running (what the issue saw: 3.93 at 2 users). The
scraper recognises the second URL by the counters' ``_created`` times (the server's start, the
same on both paths), says so once (console, run.json ``metrics_duplicates``) and scrapes it no
further; the analysis leaves out what it scraped before that. The web UI's LLM tab (``--web``,
read at its ``/llm/data`` while the run goes) counts it once too: its running never the double.
The same with the embedded server's llama.cpp flavour, which (as llama-server) exposes no
identity: the scraper cannot tell and scrapes both URLs; the analysis and the tab recognise the
duplicate by its counters (one curve through both URLs' scrapes). ~55 s for both runs.
~25 s.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import pandas as pd
import pytest
import requests

from llm_locust.analysis.pipeline import analyze_run
from llm_locust.run.demo import SIM_MODEL, start_sim_server
from llm_locust.run.launcher import free_port, stop_process
from tests.nginx import GatewaySite, nginx_gateway

pytestmark = pytest.mark.slow

MAX_NUM_SEQS = 4
LADDER = (2, 4)


def _live_server_series(run: subprocess.Popen, url: str, *, deadline_s: float) -> dict:
    """The LLM tab's server series (``/llm/data`` ``server``) as last read before the run ended
    (polled every 0.5 s; the tab lingers 3 s after the run)."""
    last: dict = {}
    deadline = time.monotonic() + deadline_s
    while run.poll() is None:
        if time.monotonic() > deadline:
            stop_process(run, grace_s=10)
            pytest.fail("the run did not end in time")
        try:
            last = requests.get(url, timeout=2).json().get("server") or last
        except (requests.RequestException, ValueError):
            pass
        time.sleep(0.5)
    return last


def _gateway_run(tmp, flavor: str):
    """The embedded server (``--flavor``) behind nginx, scraped through it and directly, with the
    web UI; yields (run dir, gateway URL, direct URL, console, the LLM tab's server series)."""
    port = free_port()
    server = start_sim_server(
        port=port, max_num_seqs=MAX_NUM_SEQS, log_path=tmp / "engine.log", extra=["--flavor", flavor]
    )
    try:
        site = GatewaySite(port=free_port(), upstreams=(f"127.0.0.1:{port}",))
        with nginx_gateway(tmp / "nginx", [site]):
            direct = f"http://127.0.0.1:{port}/metrics"
            web_port = free_port()
            log = open(tmp / "run.out", "w+")
            run = subprocess.Popen(
                [sys.executable, "-m", "llm_locust.cli", "run", "--host", site.url, "--model", SIM_MODEL,
                 "--ladder", ",".join(map(str, LADDER)), "--dwell-s", "8", "--warmup-s", "2", "--max-tokens", "32",
                 "--server-metrics-url", f"gateway={site.url}/metrics", "--server-metrics-url", f"direct={direct}",
                 "--out", str(tmp / "run"), "--no-analyze", "--web", "--web-port", str(web_port),
                 "--web-linger-s", "3"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
            live = _live_server_series(run, f"http://127.0.0.1:{web_port}/llm/data", deadline_s=180)
            log.seek(0)
            console = log.read()
            log.close()
        assert run.returncode == 0, console[-6000:]
        yield tmp / "run", site.url + "/metrics", direct, console, live
    finally:
        stop_process(server, grace_s=10)


@pytest.fixture(scope="module")
def gateway_run(tmp_path_factory):
    yield from _gateway_run(tmp_path_factory.mktemp("dup"), "vllm")


@pytest.fixture(scope="module")
def llamacpp_run(tmp_path_factory):
    """The llama.cpp flavour exposes no process start time and no ``_created`` (as llama-server):
    the scraper cannot tell, both URLs are scraped the whole run."""
    yield from _gateway_run(tmp_path_factory.mktemp("dup-llamacpp"), "llamacpp")


def test_the_second_url_of_one_server_is_said_once_and_scraped_no_further(gateway_run):
    run_dir, via_gateway, direct, console, _ = gateway_run
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
    run_dir, via_gateway, direct, _, _ = gateway_run
    result = analyze_run(run_dir, write=False)
    table = result.table.set_index("target_users")
    for users in LADDER:
        assert table.loc[users, "server_running"] == pytest.approx(min(users, MAX_NUM_SEQS), abs=0.4), table
    assert not result.evidence.replicas
    assert [(d.url, d.same_as) for d in result.evidence.duplicates] == [(direct, via_gateway)]
    assert "direct is the same server as gateway, counted once" in result.server_source_line


@pytest.mark.parametrize("run", ["gateway_run", "llamacpp_run"])
def test_the_live_tab_counts_the_one_server_once(run, request):
    """The embedded server runs at most its 4 slots; the tab's running, summed over both URLs,
    would reach 8 at 4 users (and 4 at 2)."""
    *_, live = request.getfixturevalue(run)
    running = [r for r in live.get("running", []) if r is not None and math.isfinite(r)]
    assert len(running) >= 8, live
    assert max(running) <= MAX_NUM_SEQS, running
    assert max(running) >= MAX_NUM_SEQS - 1, running  # it did see the 4-user step


def test_without_identity_the_counters_tell_and_the_report_counts_it_once(llamacpp_run):
    run_dir, via_gateway, direct, _, _ = llamacpp_run
    assert "metrics_duplicates" not in json.loads((run_dir / "run.json").read_text())
    result = analyze_run(run_dir, write=False)
    assert [(d.url, d.same_as, d.by) for d in result.evidence.duplicates] == [(direct, via_gateway, "counters")]
    table = result.table.set_index("target_users")
    for users in LADDER:
        # the llama.cpp flavour frees a slot between a user's requests (its requests_processing
        # read 3.6 at 4 users in one run); summed over both URLs it would be about twice that
        running = table.loc[users, "server_running"]
        assert min(users, MAX_NUM_SEQS) - 0.8 <= running <= min(users, MAX_NUM_SEQS) + 0.4, table["server_running"]
