"""A plain time limit (``locust -f … -t``) at 256 streams (issue 14: 768 of 1,024 requests were
recorded, the 256 in flight at the stop vanished): every request the server received is a row of
requests.csv and in Locust's count; the ones in flight at the stop are ``interrupted``, with the
tokens they had received, in no success statistic; and no request is sent once the stop began."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from llm_locust.run.launcher import LocustRun, stop_process
from tests.conftest import TESTS
from tests.e2e.fault_helpers import LOCUSTFILES, locust_request_count, read_requests, start_locust
from tests.scripted_server import sse_script
from tests.sse_payloads import DONE, chat, sse

pytestmark = pytest.mark.slow

USERS, SPAWN_RATE = 256, 50
RUN_TIME_S = 8
EVENTS, EVENT_GAP_S = 20, 0.1
"""Each answer streams 20 token events 0.1 s apart (2 s) and the users start over 5 s: at the stop
nearly every user is mid-stream, and requests keep completing while the users are being stopped
(each of those users would send its next request then, were it not for the stop check)."""


@pytest.fixture(scope="module")
def time_limited_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("timelimit")
    script = sse_script(
        [(EVENT_GAP_S, sse(chat(f"t{i} "))) for i in range(EVENTS - 1)]
        + [(EVENT_GAP_S, sse(chat("end", finish="length"))), (0.0, DONE)],
        keep_alive=True,
    )
    (base / "script.json").write_text(json.dumps(script))
    server_log = open(base / "server.log", "w")  # a file, not a pipe: thousands of lines
    server = subprocess.Popen([sys.executable, str(TESTS / "scripted_server.py"), str(base / "script.json")],
                              stdout=subprocess.PIPE, stderr=server_log, text=True)  # fmt: skip
    port = int(server.stdout.readline().split()[1])
    run_dir = base / "run"
    run = LocustRun(locustfile=LOCUSTFILES / "chat_stream.py", run_dir=run_dir, workers=1, locust_args=[
        "--host", f"http://127.0.0.1:{port}", "--model", "m", "--metrics-url", "none", "--max-tokens", str(EVENTS),
        "-u", str(USERS), "-r", str(SPAWN_RATE), "-t", f"{RUN_TIME_S}s"])  # fmt: skip
    master, workers, logs = start_locust(run)
    try:
        master.wait(timeout=90)
    finally:
        for process in [master, *workers]:
            stop_process(process, grace_s=10)
        stop_process(server, grace_s=2)
        server_log.close()
        for log in logs:
            log.close()
    received = sum(
        1 for line in (base / "server.log").read_text().splitlines() if line.startswith("REQ POST /v1/chat/completions")
    )  # not the master's GET /props, /info
    return run_dir, received, master.returncode


def test_every_request_sent_is_a_row_and_in_locusts_count(time_limited_run):
    run_dir, received, returncode = time_limited_run
    assert returncode == 0  # interrupted requests alone are no error for Locust's exit code
    requests = read_requests(run_dir)
    assert received >= 2 * USERS
    assert len(requests) == locust_request_count(run_dir) == received


def test_requests_in_flight_at_the_stop_are_interrupted_with_their_tokens(time_limited_run):
    run_dir, _, _ = time_limited_run
    requests = read_requests(run_dir)
    interrupted = requests[requests["error_kind"] == "interrupted"]
    assert set(requests["error_kind"]) <= {"", "interrupted"}
    # nearly every user had one in flight when the stop began: it was interrupted, or it completed
    # while the worker was stopping its 256 users (~0.1 s, ~1 s on a busy machine: seen 160
    # interrupted + 96 completed in that spell). The stop began after the last send (no think
    # time: a request completed before the stop would have been followed by another), and before
    # the first interruption
    stop_began_s = requests["t_start_s"].max()
    completed_in_stop = requests[(requests["error_kind"] == "") & (requests["end_s"] >= stop_began_s)]
    assert USERS * 0.9 <= len(interrupted) + len(completed_in_stop) <= USERS, (len(interrupted), len(completed_in_stop))
    assert len(interrupted) >= USERS / 2
    streaming = interrupted[interrupted["content_events"] > 0]
    assert len(streaming) >= len(interrupted) * 0.9 and (streaming["content_events"] <= EVENTS).all()
    # partial answers, mostly: one whose last token event came before the stop but not its [DONE]
    # (the one 0.0 s gap of the script) is interrupted too; seen once in CI, 1 of 173
    assert (streaming["content_events"] < EVENTS).mean() >= 0.9
    assert (streaming["output_tokens"] > 0).all() and streaming["ttft_ms"].notna().all()  # kept
    # they all end at the stop: within a fraction of a second of each other
    assert interrupted["end_s"].max() - interrupted["end_s"].min() < 1.0
    # no request was sent after the stop began (the first interruption)
    assert requests["t_start_s"].max() <= interrupted["end_s"].min() + 0.01

    report = json.loads((run_dir / "client_report.json").read_text())
    ok = requests[requests["error_kind"] == ""]
    assert report["interrupted"] == len(interrupted) and "interrupted" not in report["failures_by_kind"]
    assert report["failures"] == int(((requests["error_kind"] != "") & (requests["error_kind"] != "interrupted")).sum())
    assert report["successes"] == len(ok) and report["latency_ms"]["ttft"]["count"] == len(ok)
    assert report["output_tokens"] == pytest.approx(ok["output_tokens"].sum())
    console = (run_dir / "locust_master.log").read_text()
    assert f"interrupted: {len(interrupted)} requests were in flight when the test stopped" in console
