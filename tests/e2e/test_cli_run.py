"""``llm-locust run`` before and after Locust: argument checks, pre-flight, run-dir reuse, failure
summary, stop on --timeout-s, API key redaction, --help epilog (issue: fresh-clone user report)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llm_locust.cli import main
from llm_locust.client.record import CSV_COLUMNS
from llm_locust.run.demo import SIM_MODEL
from llm_locust.run.launcher import free_port
from llm_locust.run.postrun import failure_summary

REPO = Path(__file__).resolve().parents[2]
SECRET = "sk-test-0123456789abcdef"


def run_cli(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llm_locust.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--ladder", "4,2"], "--ladder"),
        (["--ladder", "x"], "--ladder"),
        (["--warmup-s", "20", "--dwell-s", "20"], "--warmup-s"),
        (["--dwell-s", "0"], "--dwell-s"),
        (["--drain-s", "-1"], "--drain-s"),
        (["--scrape-interval-s", "0"], "--scrape-interval-s"),
        (["--workers", "0"], "--workers"),
        (["--remote-workers", "-1"], "--remote-workers"),
        (["--server-log-cmd", "no-such-program-xyz logs -f"], "no-such-program-xyz"),
        (["--server-log", "/tmp/x.log", "--server-log-cmd", "tail -F /tmp/x.log"], "--server-log-cmd"),
        (["--max-tokens", "0"], "--max-tokens"),
        (["-f", "no_such_locustfile.py"], "no_such_locustfile.py"),
        (["--ladr", "1,2"], "--ladr"),
    ],
)
def test_bad_arguments_exit_2_before_anything_starts(tmp_path, capsys, flags, message):
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as exited:
        main(["run", "--host", "http://127.0.0.1:1", "--run-dir", str(run_dir), *flags])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not run_dir.exists()


def test_unreachable_host_is_one_line_and_exit_2(tmp_path, capsys):
    port = free_port()  # nothing listens there
    with pytest.raises(SystemExit) as exited:
        main(["run", "--host", f"http://127.0.0.1:{port}", "--out", str(tmp_path / "run")])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == f"llm-locust run: error: cannot reach http://127.0.0.1:{port}: connection refused"
    assert not (tmp_path / "run").exists()


def test_unknown_model_and_v1_suffix_are_refused(sim_host, tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["run", "--host", sim_host, "--model", "gpt-nope", "--run-dir", str(tmp_path / "a")])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "gpt-nope" in err and f"it serves: {SIM_MODEL}" in err
    with pytest.raises(SystemExit) as exited:
        main(["run", "--host", sim_host + "/v1", "--run-dir", str(tmp_path / "b")])
    assert exited.value.code == 2
    assert "drop it" in capsys.readouterr().err


def test_a_run_dir_holding_a_run_is_refused_and_left_alone(tmp_path, capsys):
    run_dir = tmp_path / "old"
    run_dir.mkdir()
    (run_dir / "run.json").write_text('{"old": true}\n')
    (run_dir / "requests.csv").write_text("old rows\n")
    with pytest.raises(SystemExit) as exited:
        main(["run", "--host", "http://127.0.0.1:1", "--run-dir", str(run_dir)])
    assert exited.value.code == 2
    assert "already holds a run" in capsys.readouterr().err
    assert (run_dir / "run.json").read_text() == '{"old": true}\n'
    assert (run_dir / "requests.csv").read_text() == "old rows\n"
    assert sorted(p.name for p in run_dir.iterdir()) == ["requests.csv", "run.json"]


def test_failure_summary_counts_kinds_with_one_example_each(tmp_path):
    rows = [("http_error", "HTTP 400: bad model")] * 3 + [("connect_error", "refused")] * 2
    with open(tmp_path / "requests.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for kind, message in rows:
            writer.writerow({"error_kind": kind, "error_message": message})
    assert failure_summary(tmp_path) == (
        "all 5 requests failed:\n  3 x http_error: HTTP 400: bad model\n  2 x connect_error: refused"
    )
    with open(tmp_path / "requests.csv", "a", newline="") as f:
        csv.DictWriter(f, fieldnames=CSV_COLUMNS).writerow({"error_kind": ""})  # one success
    assert failure_summary(tmp_path) is None


def test_run_help_lists_pass_through_flags():
    out = run_cli("run", "--help", timeout=60)
    assert out.returncode == 0
    for flag in (
        "--host",
        "--model",
        "--ladder",
        "--dwell-s",
        "--warmup-s",
        "--max-tokens",
        "--baseline-requests",
        "--server-log",
        "--server-metrics-url",
        "--web",
        "--protocol",
        "--protocol-format",
        "--server-log-format",
        "--metrics-url",
        "llm-locust run --help-locust",
    ):
        assert flag in out.stdout, flag
    assert "locust -f llm_locust/locustfiles/ladder.py --help" not in out.stdout


@pytest.fixture(scope="module")
def stopped_run(sim_host, tmp_path_factory):
    """A 2-step ladder of 30 s steps cut by --timeout-s 12, with the API key given abbreviated."""
    run_dir = tmp_path_factory.mktemp("stopped") / "run"
    started = time.monotonic()
    out = run_cli("run", "--host", sim_host, "--ladder", "1,2", "--dwell-s", "30", "--warmup-s", "1",
                  "--max-tokens", "16", "--workers", "1", "--timeout-s", "12", "--run-dir", str(run_dir),
                  "--api-k", SECRET, timeout=150)  # fmt: skip
    return out, run_dir, time.monotonic() - started


@pytest.mark.slow
def test_timeout_stops_gracefully_and_keeps_the_data(stopped_run):
    from llm_locust.analysis.pipeline import analyze_run

    out, run_dir, elapsed_s = stopped_run
    assert out.returncode == 124, out.stderr
    assert "Traceback" not in out.stderr
    assert "stopping it, keeping the data so far" in out.stdout
    assert elapsed_s < 12 + 25, elapsed_s  # SIGTERM ends the master promptly (not after a 30 s grace)
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["ended_at_s"] is not None
    with open(run_dir / "requests.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    # the request in flight when it was stopped (one user) is kept, as interrupted
    assert len(rows) >= 5 and all(row["error_kind"] in ("", "interrupted") for row in rows)
    assert sum(row["error_kind"] == "interrupted" for row in rows) <= 1
    assert (run_dir / "report" / "summary.md").exists()  # `run` analysed it
    result = analyze_run(run_dir)
    assert len(result.table) == 1  # cut in step 0 (30 s dwell, stopped at 12 s)


@pytest.mark.slow
def test_api_key_given_abbreviated_is_nowhere_in_the_run_directory(stopped_run):
    out, run_dir, _ = stopped_run
    hits = [p.name for p in run_dir.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert hits == []
    # the launcher hands the key to master and workers in their environment: their command lines
    # (recorded in run.json, visible to every local user in /proc) carry no key flag at all
    command_line = json.loads((run_dir / "run.json").read_text())["command_line"]
    assert not [arg for arg in command_line if arg.startswith("--api-k") or SECRET in arg], command_line


@pytest.mark.slow
def test_all_requests_failing_is_reported_and_exit_1(sim_host, tmp_path):
    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps({"model": "not-served", "messages": [{"role": "user", "content": "hi"}],
                                   "stream": True, "max_tokens": 4}))  # fmt: skip
    out = run_cli("run", "--host", sim_host, "--shape", "none", "-u", "1", "-r", "1", "-t", "3s", "--workers", "1",
                  "--payload-file", str(payload), "--out", str(tmp_path / "run"), "--no-analyze",
                  "--no-first-request")  # fmt: skip
    assert out.returncode == 1, out.stderr
    assert "requests failed:" in out.stderr and "all " in out.stderr


@pytest.mark.slow
def test_a_user_failing_in_on_start_is_reported(sim_host, tmp_path):
    locustfile = tmp_path / "bad.py"
    locustfile.write_text(
        "import llm_locust.plugin  # noqa: F401\nfrom llm_locust.client.user import LLMUser\n\n\n"
        "class Bad(LLMUser):\n    def on_start(self):\n        raise RuntimeError('on_start boom')\n"
    )
    run_dir = tmp_path / "run"
    out = run_cli("run", "-f", str(locustfile), "--host", sim_host, "-u", "1", "-r", "1", "-t", "3s",
                  "--workers", "1", "--run-dir", str(run_dir), "--no-analyze")  # fmt: skip
    assert out.returncode == 1, out.stderr
    assert "a user failed" in out.stderr and "on_start boom" in out.stderr
    assert "no request was recorded" in out.stderr
    assert "on_start boom" in (run_dir / "locust_master.log").read_text()
