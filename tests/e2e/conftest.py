"""Fixtures shared by the end-to-end tests."""

from __future__ import annotations

import pytest

from llm_locust.run.demo import start_sim_server
from llm_locust.run.launcher import free_port, stop_process


@pytest.fixture(scope="module")
def sim_host(tmp_path_factory):
    """An embedded server (max_num_seqs 4) on a free loopback port, one per test module;
    yields its base URL and stops it by PID afterwards."""
    log = tmp_path_factory.mktemp("sim") / "server.log"
    port = free_port()
    server = start_sim_server(port=port, max_num_seqs=4, log_path=log)
    yield f"http://127.0.0.1:{port}"
    stop_process(server, grace_s=10)
