"""A real nginx (Debian's package) in front of the embedded server, on loopback (issue 25, items
7 and 8): nginx's own behaviour the gateway verdicts rely on.

``limit_conn 4`` keyed on ``$binary_remote_addr`` with ``limit_conn_status 503``: of six
concurrent streams four are served and two refused at once, each refusal one ``limiting
connections by zone`` line in nginx's error log (the 503 comes from nginx, no upstream).
"""

from __future__ import annotations

import concurrent.futures
import re

import pytest
import requests

from llm_locust.run.demo import SIM_MODEL, start_sim_server
from llm_locust.run.launcher import free_port, stop_process
from tests.nginx import GatewaySite, nginx_gateway

pytestmark = pytest.mark.slow

LIMIT = 4


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    """The embedded server, max_num_seqs 16 (well above the gateway's limit)."""
    port = free_port()
    server = start_sim_server(port=port, max_num_seqs=16, log_path=tmp_path_factory.mktemp("sim") / "engine.log")
    yield f"127.0.0.1:{port}"
    stop_process(server, grace_s=10)


def _stream(url: str) -> int:
    body = {"model": SIM_MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 32, "stream": True}
    with requests.post(f"{url}/v1/chat/completions", json=body, stream=True, timeout=30) as response:
        response.content  # noqa: B018  (read to the end: the connection is held until then)
        return response.status_code


def test_limit_conn_refuses_what_is_over_the_limit_with_one_error_line_each(backend, tmp_path):
    site = GatewaySite(port=free_port(), upstreams=(backend,), limit_conn=LIMIT)
    with nginx_gateway(tmp_path / "nginx", [site]) as gateway:
        with concurrent.futures.ThreadPoolExecutor(LIMIT + 2) as pool:
            statuses = sorted(pool.map(lambda _: _stream(site.url), range(LIMIT + 2)))
        assert requests.get(f"{site.url}/health", timeout=5).status_code == 200
    assert statuses == [200] * LIMIT + [503] * 2
    lines = gateway.error_log.read_text().splitlines()
    limited = [line for line in lines if re.search(r'limiting connections by zone "perclient"', line)]
    assert len(limited) == 2, lines
    refused = [line for line in gateway.access_log.read_text().splitlines() if '" 503 ' in line]
    assert len(refused) == 2 and all("upstream=-" in line for line in refused), refused
