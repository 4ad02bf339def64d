"""``--protocol generic`` end to end: ``llm-locust run`` (master + 1 worker) against the embedded
server's generic flavour speaking its own ``POST /generate`` (JSON lines), with ``--slo``, then
the report (analysed in the test's process: the SLOs come from run.json).

Expected from the server's configuration, not from the code under test: 2 batch slots, so at 1
user no request waits, at 4 users two of them wait for a slot (the server's own ``queue_ms``
rises well above 0); every answer is ``max_new_tokens`` long (``ignore_eos`` sent); the server's
queue + prefill is a part of the client's TTFT, and all its time a part of the client's E2E.
"""

from __future__ import annotations

import csv
import math
import subprocess
import sys

import pytest

from llm_locust.analysis.pipeline import analyze_run
from llm_locust.run.demo import start_sim_server
from llm_locust.run.launcher import free_port, stop_process
from llm_locust.simserver.generic_api import PROTOCOL_TOML

pytestmark = pytest.mark.slow

MAX_TOKENS = 16


@pytest.fixture(scope="module")
def generic_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("generic")
    (tmp / "deepinfer-protocol.toml").write_text(PROTOCOL_TOML)
    port = free_port()
    server = start_sim_server(port=port, max_num_seqs=2, log_path=tmp / "engine.log", extra=["--flavor", "generic"])
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "llm_locust.cli", "run", "--host", f"http://127.0.0.1:{port}",
             "--protocol", "generic", "--protocol-format", str(tmp / "deepinfer-protocol.toml"),
             "--workers", "1", "--run-dir", str(tmp / "run"), "--timeout-s", "60", "--no-analyze",
             "--ladder", "1,4", "--dwell-s", "2.5", "--warmup-s", "0.5", "--max-tokens", str(MAX_TOKENS),
             "--slo", "ttft_ms<=200,tpot_ms<=100", "--metrics-url", "none"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        stop_process(server, grace_s=10)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return tmp / "run"


def test_every_request_streamed_and_counted_by_the_server(generic_run):
    run_dir = generic_run
    with open(run_dir / "requests.csv", newline="") as f:
        rows = list(csv.DictReader(f))

    ok = [r for r in rows if r["error_kind"] == ""]
    assert len(ok) >= 15 and all(r["error_kind"] in ("", "interrupted") for r in rows)
    for r in ok:
        assert (float(r["output_tokens"]), r["tokens_source"], r["finish_reason"]) == (MAX_TOKENS, "usage", "length")
        assert int(r["content_events"]) == MAX_TOKENS
        ttft, queue, prefill = float(r["ttft_ms"]), float(r["server_queue_ms"]), float(r["server_prompt_ms"])
        assert 0 <= queue + prefill <= ttft, r
        assert queue + prefill + float(r["server_decode_ms"]) <= float(r["e2e_ms"]), r
    waited = [float(r["server_queue_ms"]) for r in ok if float(r["server_queue_ms"]) > 20]
    assert waited, "at 4 users on 2 slots some requests must wait for a slot"


def test_report_has_goodput_and_the_server_split(generic_run):
    run_dir = generic_run
    result = analyze_run(run_dir)  # the --slo given to run, from run.json
    with open(run_dir / "report" / "steps.csv", newline="") as f:
        steps = {float(s["target_users"]): s for s in csv.DictReader(f)}

    assert [str(s) for s in result.slos] == ["ttft_ms<=200", "tpot_ms<=100"]
    for step in steps.values():
        assert 0 <= float(step["goodput_tps"]) <= float(step["output_tps"]) + 1e-9
        parts = (
            float(step["ttft_server_queue_ms"]) + float(step["ttft_server_prefill_ms"]) + float(step["ttft_outside_ms"])
        )
        assert parts == pytest.approx(float(step["ttft_timed_mean_ms"]))
        assert not math.isnan(float(step["e2e_outside_ms"]))
    assert float(steps[4.0]["ttft_server_queue_ms"]) > float(steps[1.0]["ttft_server_queue_ms"])
    summary = (run_dir / "report" / "summary.md").read_text()
    assert "Knee by goodput (SLO ttft_ms<=200,tpot_ms<=100)" in summary
    assert "## Goodput" in summary and "## TTFT: server vs outside" in summary
