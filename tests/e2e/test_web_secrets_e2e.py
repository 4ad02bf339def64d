"""The API key never leaves the places it must be (issue 14): a unique key, required by the embedded
server (``VLLM_API_KEY``: without it every ``/v1`` request would fail 401, so the successes prove
the key was sent), given once through ``LLM_LOCUST_API_KEY`` and once as ``--api-key``. It is in no
byte of the run directories, the processes' output, the web UI's pages (routes, the LLM tab's
HTML, text and screenshot), nor in ``/proc/<pid>/cmdline`` of any process llm-locust runs, read
every 50 ms while they run (``/proc/<pid>/environ``, readable by the owner only, is where it
travels). The web UI listens on 127.0.0.1 only when no ``--web-host`` is given.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest
import requests

from llm_locust.run.demo import SIM_MODEL, start_sim_server
from llm_locust.run.launcher import free_port, stop_process
from tests.e2e.test_live_browser import CHROMIUM_ARGS, need

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]
ROUTES = ("/", "/?tab=llm", "/llm/", "/llm/data", "/llm/stats.csv", "/llm/series.csv", "/llm/steps.csv",
          "/llm/requests.csv", "/llm/static/llm_live.js", "/stats/requests", "/stats/report", "/stats/requests/csv",
          "/stats/failures/csv", "/stats/requests_full_history/csv", "/exceptions", "/exceptions/csv", "/tasks",
          "/logs", "/worker-count")  # fmt: skip


def new_key() -> str:
    return f"sk-e2e-{uuid.uuid4().hex}"


def rows(path: Path) -> int:
    try:
        with open(path, newline="") as f:
            return max(0, sum(1 for _ in csv.reader(f)) - 1)
    except OSError:
        return 0


def files_holding(root: Path, secret: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


class CmdlineWatch:
    """Reads ``/proc/<pid>/cmdline`` of the given processes and all their descendants every 50 ms
    on a thread, until :meth:`stop`; ``hits`` lists the command lines holding ``secret`` other than
    ``typed`` (the command the test itself started, before llm-locust re-executes itself);
    ``last`` is each process's last command line seen."""

    def __init__(self, secret: str, *pids: int, typed: bytes = b"") -> None:
        self.secret, self.roots, self.typed = secret.encode(), list(pids), typed
        self.seen: set[int] = set()
        self.last: dict[int, bytes] = {}
        self.hits: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for root in self.roots:
                try:
                    procs = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
                except psutil.Error:
                    continue
                for proc in procs:
                    try:
                        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
                    except OSError:
                        continue
                    self.seen.add(proc.pid)
                    if cmdline:
                        self.last[proc.pid] = cmdline
                    if self.secret in cmdline and cmdline != self.typed:
                        self.hits.append(cmdline)
            self._stop.wait(0.05)

    def stop(self) -> CmdlineWatch:
        self._stop.set()
        self._thread.join(timeout=5)
        return self


@pytest.fixture
def key_server(tmp_path):
    """The embedded server requiring a fresh key (given in its environment): (base URL, key)."""
    key = new_key()
    os.environ["VLLM_API_KEY"] = key
    try:
        port = free_port()
        server = start_sim_server(port=port, max_num_seqs=4, log_path=tmp_path / "server.log")
    finally:
        del os.environ["VLLM_API_KEY"]
    host = f"http://127.0.0.1:{port}"
    assert requests.get(host + "/v1/models", timeout=5).status_code == 401
    assert requests.get(host + "/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=5).ok
    yield host, key
    stop_process(server, grace_s=10)
    assert files_holding(tmp_path, key) == []  # its own log included


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LLM_LOCUST_API_KEY", "VLLM_API_KEY", "LOCUST_WEB_HOST")}
    return {**env, **extra}


def test_run_with_api_key_flag_web_ui_and_analyze(tmp_path, key_server):
    """``llm-locust run --web --api-key KEY`` (master + 1 worker), the LLM tab in Chromium during
    the run (or the UI's linger after it), then ``llm-locust analyze``. llm-locust takes the key off its own command line at
    once (re-executed, same PID) and hands it to the master and worker in their environment."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    need(sync_playwright is not None, "Playwright is not installed (pip install -e '.[test]')")
    need(shutil.which("chromium") is not None, "Debian's chromium is not installed (apt-get install chromium)")
    host, secret = key_server
    web_port, run_dir = free_port(), tmp_path / "run"
    command = [sys.executable, "-m", "llm_locust.cli", "run", "--host", host, "--model", SIM_MODEL, "--api-key", secret,
               "--ladder", "1,2", "--dwell-s", "3", "--warmup-s", "0.5", "--max-tokens", "8", "--workers", "1",
               "--run-dir", str(run_dir), "--no-analyze", "--timeout-s", "60", "--web", "--web-port", str(web_port),
               "--web-linger-s", "60"]  # fmt: skip
    out = tmp_path / "run.out"
    shot = tmp_path / "llm_tab.png"
    with open(out, "w") as f:
        run = subprocess.Popen(command, stdout=f, stderr=subprocess.STDOUT, env=clean_env(), cwd=tmp_path)
        watch = CmdlineWatch(secret, run.pid, typed=b"\0".join(a.encode() for a in command) + b"\0")
        try:
            deadline = time.monotonic() + 60
            while rows(run_dir / "requests.csv") < 2:
                assert run.poll() is None and time.monotonic() < deadline, out.read_text()[-2000:]
                time.sleep(0.2)
            master = next(p for p in psutil.Process(run.pid).children() if "--master" in p.cmdline())
            listening = {(c.laddr.ip, c.laddr.port) for c in master.net_connections("tcp")
                         if c.status == psutil.CONN_LISTEN}  # fmt: skip
            assert [ip for ip, port in listening if port == web_port] == ["127.0.0.1"]
            base = f"http://127.0.0.1:{web_port}"
            served = {}
            for route in ROUTES:
                response = requests.get(base + route, timeout=10)
                served[route] = response.status_code
                assert secret.encode() not in response.content, route
            assert served["/"] == served["/llm/data"] == served["/llm/requests.csv"] == 200, served
            with sync_playwright() as api:
                browser = api.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
                try:
                    page = browser.new_page(viewport={"width": 1400, "height": 1000})
                    page.goto(base + "/?tab=llm")
                    page.wait_for_function(
                        "() => document.querySelector('th[data-sortkey=\"ttftP50Ms\"]') !== null", timeout=20_000
                    )
                    page.screenshot(path=shot, full_page=True)
                    html, text = page.content(), page.inner_text("body")
                finally:
                    browser.close()
        finally:  # the UI lingers after the ladder: stopped (SIGTERM, Locust's graceful stop) once looked at
            watch.stop()
            stop_process(run, grace_s=30)
    analyze_out, _ = run_cli(["analyze", str(run_dir)], secret, tmp_path, "analyze", 60)

    assert "TTFT" in text  # the tab rendered
    assert secret not in html and secret not in text and secret.encode() not in shot.read_bytes()
    requests_csv = list(csv.DictReader(open(run_dir / "requests.csv", newline="")))
    # the key was sent: no 401; the stop may interrupt the requests in flight when the ladder was not over
    assert sum(r["error_kind"] == "" for r in requests_csv) >= 2
    assert {r["error_kind"] for r in requests_csv} <= {"", "interrupted"}
    assert (run_dir / "report" / "summary.md").is_file() and "step" in analyze_out
    assert secret not in out.read_text() and secret not in analyze_out
    assert files_holding(run_dir, secret) == []
    # the CLI, the master and the worker were each seen, and no command line held the key
    assert len(watch.seen) >= 3 and watch.hits == []
    assert secret.encode() not in watch.last[run.pid] and b"llm_locust.cli" in watch.last[run.pid]


def run_cli(
    args: list[str], secret: str, tmp_path: Path, name: str, timeout_s: float, env: dict[str, str] | None = None
) -> tuple[str, CmdlineWatch]:
    """``python -m llm_locust.cli ARGS`` with ``env`` added to a key-free environment; returns its
    output (stdout and stderr) and the command-line watch of it and everything it started."""
    out = tmp_path / f"{name}.out"
    command = [sys.executable, "-m", "llm_locust.cli", *args]
    with open(out, "w") as f:
        process = subprocess.Popen(
            command, stdout=f, stderr=subprocess.STDOUT, env=clean_env(**(env or {})), cwd=tmp_path
        )
        watch = CmdlineWatch(secret, process.pid, typed="\0".join(command).encode() + b"\0")
        try:
            process.wait(timeout=timeout_s)
        finally:
            watch.stop()
            stop_process(process, grace_s=10)
    return out.read_text(), watch


def test_diagnose_with_the_key_in_the_environment(tmp_path, key_server):
    """``llm-locust diagnose`` (baseline, ladder, verdict), the key in ``LLM_LOCUST_API_KEY``."""
    host, secret = key_server
    out_dir = tmp_path / "diagnose"
    output, watch = run_cli(
        ["diagnose", "--host", host, "--model", SIM_MODEL, "--max-tokens", "8", "--warmup-s", "0.5", "--ladder", "1",
         "--max-users", "1", "--dwell-s", "2", "--baseline-requests", "2", "--workers", "1", "--out", str(out_dir)],
        secret, tmp_path, "diagnose", 120, env={"LLM_LOCUST_API_KEY": secret},
    )  # fmt: skip

    assert (out_dir / "report" / "index.html").is_file(), output[-2000:]
    rows_ok = [r["error_kind"] for p in out_dir.rglob("requests.csv") for r in csv.DictReader(open(p, newline=""))]
    assert len(rows_ok) >= 3 and set(rows_ok) == {""}  # baseline and ladder: the key was sent
    assert secret not in output
    assert files_holding(out_dir, secret) == []
    assert len(watch.seen) >= 3 and watch.hits == []  # the CLI, masters and workers
