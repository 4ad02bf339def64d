"""One ready locustfile per protocol, run with plain ``locust -f`` against a scripted server."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from tests.conftest import REPO, server_log, stop
from tests.scripted_server import sse_script
from tests.sse_payloads import DONE, chat, sse, tgi, usage_chunk

pytestmark = pytest.mark.slow

COMPLETION = [
    sse({"id": "cmpl-1", "choices": [{"text": t, "finish_reason": f}]}) for t, f in (("a", None), ("b", "length"))
]
STREAMS = {
    "chat_stream.py": ("/v1/chat/completions", [sse(chat("a")), sse(chat("b", finish="length")), sse(usage_chunk(3, 2)), DONE]),
    "openai_completions.py": ("/v1/completions", [*COMPLETION, sse(usage_chunk(3, 2)), DONE]),
    "tgi.py": ("/generate_stream", [sse(tgi("a", index=1)), sse(tgi("b", index=2, details={"finish_reason": "length",
                                                                                         "generated_tokens": 2}))]),
}  # fmt: skip


@pytest.mark.parametrize("locustfile", sorted(STREAMS))
def test_protocol_locustfile(scripted_server, tmp_path, locustfile):
    path, events = STREAMS[locustfile]
    url, process = scripted_server(sse_script([(0.01, e) for e in events], keep_alive=True))
    completed = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(REPO / "llm_locust" / "locustfiles" / locustfile), "--headless", "-u", "1",
         "-r", "1", "-t", "2s", "--host", url, "--model", "m", "--max-tokens", "2", "--metrics-url", "none",
         "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    stop(process)
    log = server_log(process)

    assert completed.returncode == 0, completed.stderr[-2000:]
    with open(tmp_path / "run" / "requests.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    done = [r for r in rows if r["error_kind"] != "interrupted"]  # the one in flight at the stop, if any
    assert len(rows) - len(done) <= 1
    assert len(done) > 5 and all(r["error_kind"] == "" and r["output_tokens"] == "2" for r in done)
    assert all(r["tokens_source"] == "usage" for r in done)
    assert sum(1 for r in rows if r["connect_ms"]) == 1  # one kept-alive connection for the whole run
    assert len(done) <= sum(1 for line in log["requests"] if line == f"POST {path} HTTP/1.1") <= len(rows)
    assert (tmp_path / "run" / "client_report.json").is_file()
    assert all(r["name"] == {"chat_stream.py": "chat", "tgi.py": "generate_stream"}.get(locustfile, "completions")
               for r in rows)  # fmt: skip
