"""Fixtures shared by the end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from llm_locust.run.demo import start_sim_server
from llm_locust.run.launcher import free_port, stop_process


@contextmanager
def embedded_server(tmp_path_factory, *, max_num_seqs: int, extra: list[str] = ()) -> Iterator[str]:
    """An embedded server on a free loopback port (its log in a fresh temporary folder): yields
    its base URL, stops it by PID afterwards. For module fixtures with their own settings."""
    log = tmp_path_factory.mktemp("sim") / "server.log"
    port = free_port()
    server = start_sim_server(port=port, max_num_seqs=max_num_seqs, log_path=log, extra=list(extra))
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(server, grace_s=10)


@pytest.fixture(scope="module")
def sim_host(tmp_path_factory):
    """An embedded server (max_num_seqs 4) on a free loopback port, one per test module;
    yields its base URL and stops it by PID afterwards."""
    with embedded_server(tmp_path_factory, max_num_seqs=4) as host:
        yield host
