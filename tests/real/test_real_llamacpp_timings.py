"""llama.cpp's own per-request ``timings`` against a real ``llama-server`` (``SLOTS=2``, the tiny
random-weight model, one thread; ``../shared/real-servers/llama-cpp``), and the report's split of
TTFT into the server's prefill and the time outside it.

Expected from llama.cpp's definitions (``tools/server/server-common.h``, ``server_slot_stats``),
not from this project's code: ``predicted_n`` is the answer's token count (= ``usage
.completion_tokens``); ``prompt_ms`` is inside the client's TTFT and ``prompt_ms + predicted_ms`` inside its
E2E; at one user no request waits for a slot, so the time outside the server's
timings before the first token (TTFT - prompt_ms) is the same network and HTTP overhead as the
whole request's time outside them (E2E - prompt_ms - predicted_ms): the split adds up to the
client's TTFT within that measured outside time.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from llm_locust.analysis.pipeline import analyze_run
from tests.real_servers import real_server

pytestmark = [pytest.mark.slow, pytest.mark.real_server]

MAX_TOKENS = 16


@pytest.fixture(scope="module")
def timings_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("llamacpp-timings")
    log = tmp / "llama-server.log"
    with real_server("llama-cpp", [], {"MODEL": "tiny", "SLOTS": "2"}, log) as url:
        completed = subprocess.run(
            [sys.executable, "-m", "llm_locust.cli", "run", "--host", url, "--model", "tiny-llama",
             "--workers", "1", "--run-dir", str(tmp / "run"), "--no-analyze", "--timeout-s", "60",
             "--ladder", "1,4", "--dwell-s", "6", "--warmup-s", "1", "--max-tokens", str(MAX_TOKENS),
             "--ignore-eos", "true"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert completed.returncode in (0, 1), completed.stdout + completed.stderr
    return tmp / "run"


def test_timings_recorded_for_every_answer(timings_run):
    with open(timings_run / "requests.csv", newline="") as f:
        ok = [r for r in csv.DictReader(f) if r["error_kind"] == ""]
    first_step_end_s = json.loads((timings_run / "run.json").read_text())["shape"]["steps"][0]["end_s"]

    assert len(ok) >= 10
    for r in ok:
        assert float(r["server_decode_tokens"]) == float(r["output_tokens"]) == MAX_TOKENS, r
        assert float(r["server_prompt_ms"]) > 0 and float(r["server_decode_ms"]) > 0, r
        assert r["server_queue_ms"] == ""  # llama.cpp does not report the wait for a slot
    alone = [r for r in ok if float(r["t_start_s"]) + float(r["e2e_ms"]) / 1000 < first_step_end_s]
    assert len(alone) >= 5 and len(ok) > len(alone)
    for r in ok:  # at every step the server's whole time is inside the client's view: llama.cpp
        # times a request from its slot's first prompt batch to its last sampled token, both after
        # the request arrived and before the last chunk left, and the client stamps each read with
        # the kernel's arrival time (llm_locust.client.reader), never earlier. (Its decode may
        # look longer than E2E - TTFT: the first tokens can reach the client with later ones.)
        assert 0 < float(r["server_prompt_ms"]) <= float(r["ttft_ms"]), r
        assert float(r["server_prompt_ms"]) + float(r["server_decode_ms"]) <= float(r["e2e_ms"]), r


def test_split_agrees_with_ttft_within_the_measured_outside_time(timings_run):
    result = analyze_run(timings_run)
    one = result.table.set_index("target_users").loc[1]
    four = result.table.set_index("target_users").loc[4]

    assert one["server_timed"] >= 5
    # server prefill + outside = the client's TTFT (means over the same requests)
    assert one["ttft_server_prefill_ms"] + one["ttft_outside_ms"] == pytest.approx(one["ttft_timed_mean_ms"])
    # at one user, the outside part before the first token is the measured outside time of the
    # whole request (network and HTTP), within half that time (and 2 ms of scheduling)
    assert abs(one["ttft_outside_ms"] - one["e2e_outside_ms"]) <= 2.0 + 0.5 * one["e2e_outside_ms"]
    assert one["ttft_outside_ms"] >= 0
    # at 4 users on 2 slots the unreported wait for a slot lands outside the server's timings
    assert four["ttft_outside_ms"] > one["ttft_outside_ms"]
    assert "## TTFT: server vs outside" in (timings_run / "report" / "summary.md").read_text()
