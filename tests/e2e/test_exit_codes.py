"""``llm-locust run`` honours Locust's ``--exit-code-on-error`` and still writes the client report and
the analysis (issue 14): a run where some requests fail (TTFT timeouts behind a batch of one)
exits with Locust's code, 1 by default, 0 when the user asked for 0."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from llm_locust.run.demo import start_sim_server
from llm_locust.run.launcher import free_port, stop_process

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def one_slot_host(tmp_path_factory):
    """The embedded server with a batch of one: a second user's request waits ~0.7 s for its first token."""
    log = tmp_path_factory.mktemp("sim") / "server.log"
    port = free_port()
    server = start_sim_server(port=port, max_num_seqs=1, log_path=log)
    yield f"http://127.0.0.1:{port}"
    stop_process(server, grace_s=10)


@pytest.mark.parametrize(
    ("flag", "expected"), [([], 1), (["--exit-code-on-error", "3"], 3), (["--exit-code-on-error", "0"], 0)]
)
def test_some_requests_failing_gives_locusts_code_after_report_and_analysis(one_slot_host, tmp_path, flag, expected):
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "run", "--host", one_slot_host, "--shape", "none", "-u", "2", "-r", "2",
         "-t", "6s", "--workers", "1", "--max-tokens", "32", "--ttft-timeout-s", "0.2", "--run-dir", str(run_dir), *flag],
        capture_output=True, text=True, timeout=180, cwd=REPO,
    )  # fmt: skip
    with open(run_dir / "requests.csv", newline="") as f:
        kinds = [row["error_kind"] for row in csv.DictReader(f)]
    assert "ttft_timeout" in kinds and "" in kinds, kinds  # some failed, some succeeded
    assert out.returncode == expected, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    assert f"LLM requests: {len(kinds)}" in out.stdout  # the client report, printed
    assert (run_dir / "client_report.json").is_file()
    assert (run_dir / "report" / "summary.md").is_file()  # the analysis, written
    if expected:
        assert f"locust exited with code {expected}: some requests failed" in out.stderr
