"""The first request (issue 26, item 7): ``llm-locust run`` sends one request of its own kind
before any load, shows its answer, and stops with the request's message when it fails.

Against a scripted loopback server that answers every request HTTP 400 (a body template adapted
wrongly): exactly one POST reaches it, the run ends with exit 2 within seconds and no run
directory; the ``/v1/models`` warning is not printed, ``--model`` being given. Against the
embedded server's generic flavour the first answer is shown: HTTP 200, ``--max-tokens`` tokens
counted by the server.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from llm_locust.run.demo import start_sim_server
from llm_locust.run.launcher import free_port, stop_process
from llm_locust.simserver.generic_api import PROTOCOL_TOML

pytestmark = pytest.mark.slow

BAD_BODY = '{"error": "prompt must be a string"}'


def run_cli(*argv: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", *argv], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_a_failing_first_request_stops_the_run_before_any_load(scripted_server, tmp_path):
    answer = f"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: {len(BAD_BODY)}\r\n\r\n"
    url, server = scripted_server({"writes": [[0, answer + BAD_BODY]]})
    fmt = tmp_path / "mine.toml"
    fmt.write_text(PROTOCOL_TOML.replace('prompt = "{prompt}"', 'text = "{prompt}"'))  # the field misnamed
    started = time.monotonic()
    done = run_cli("run", "--host", url, "--model", "m", "--protocol", "generic", "--protocol-format", str(fmt),
                   "--ladder", "1,2,4", "--dwell-s", "30", "--workers", "1", "--metrics-url", "none",
                   "--out", str(tmp_path / "run"))  # fmt: skip
    elapsed_s = time.monotonic() - started
    server.kill()
    posts = [line for line in server.stderr.read().splitlines() if line.startswith("REQ POST")]
    assert done.returncode == 2, done.stdout + done.stderr
    assert posts == ["REQ POST /generate HTTP/1.1"]
    assert "llm-locust run: error: the first request failed, nothing else was sent: " in done.stderr
    assert f"POST {url}/generate -> HTTP 400" in done.stderr and "prompt must be a string" in done.stderr
    assert "check --protocol-format" in done.stderr
    assert "pass --model" not in done.stdout + done.stderr
    assert not (tmp_path / "run" / "requests.csv").exists()
    assert elapsed_s < 30


def test_the_first_answer_is_shown(tmp_path):
    fmt = tmp_path / "deepinfer-protocol.toml"
    fmt.write_text(PROTOCOL_TOML)
    port = free_port()
    server = start_sim_server(
        port=port, max_num_seqs=2, log_path=tmp_path / "engine.log", extra=["--flavor", "generic"]
    )
    try:
        done = run_cli("run", "--host", f"http://127.0.0.1:{port}", "--protocol", "generic", "--protocol-format",
                       str(fmt), "--ladder", "1", "--dwell-s", "2", "--warmup-s", "0", "--max-tokens", "12",
                       "--workers", "1", "--no-analyze", "--out", str(tmp_path / "run"))  # fmt: skip
    finally:
        stop_process(server, grace_s=10)
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("first request: "))
    assert line.startswith(f"first request: POST http://127.0.0.1:{port}/generate -> HTTP 200 in ")
    assert ", 12 tokens (usage): " in line
