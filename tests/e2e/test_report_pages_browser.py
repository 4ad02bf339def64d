"""The report pages in a real browser at 1,280 px: a diagnose of two rounds (its page), a ladder
run's page and a baseline-only run's page, all from one ``llm-locust diagnose --host-b`` run
against two embedded servers (``--max-num-seqs`` 2 and 4, ladder 1, 2, 4, 8 x 5 s).

Each page, opened from the file system in Debian's chromium (Playwright, as in
``tests/e2e/test_live_browser.py``): no horizontal overflow, the verdict card within the first
screen (800 px), no literal ``None``/``nan`` in the visible text, every image loaded. The expected
verdicts come from the servers' settings: ``scheduler_ceiling`` with the critical concurrency at each
server's ``--max-num-seqs``. Screenshots go to the test's temporary folder.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llm_locust.run.demo import start_sim_server
from llm_locust.run.launcher import free_port, stop_process
from tests.e2e.test_live_browser import CHROMIUM_ARGS, need

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

WIDTH_PX, HEIGHT_PX = 1280, 800
SEQS_A, SEQS_B = 2, 4


@pytest.fixture(scope="module")
def diagnosis(tmp_path_factory) -> Path:
    """One diagnose of two rounds; returns its --out folder."""
    tmp = tmp_path_factory.mktemp("pages")
    servers, hosts = [], []
    try:
        for name, seqs in (("a", SEQS_A), ("b", SEQS_B)):
            port = free_port()
            servers.append(start_sim_server(port=port, max_num_seqs=seqs, log_path=tmp / f"{name}.log", extra=[]))
            hosts.append(f"http://127.0.0.1:{port}")
        completed = subprocess.run(
            [sys.executable, "-m", "llm_locust.cli", "diagnose", "--host", hosts[0], "--host-b", hosts[1],
             "--model", "sim-llama", "--ladder", "1,2,4,8", "--max-users", "8", "--dwell-s", "5", "--warmup-s", "1.5",
             "--baseline-requests", "3", "--max-tokens", "16", "--workers", "1",
             "--server-log", str(tmp / "a.log"), "--server-log-b", str(tmp / "b.log"), "--out", str(tmp / "out")],
            capture_output=True, text=True, timeout=360,
        )  # fmt: skip
    finally:
        for server in servers:
            stop_process(server, grace_s=5)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return tmp / "out"


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        need(False, "Playwright is not installed (pip install -e '.[test]')")
    need(shutil.which("chromium") is not None, "Debian's chromium is not installed (apt-get install chromium)")
    with sync_playwright() as api:
        chromium = api.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def open_page(browser, path: Path, shot: Path) -> dict:
    """Open ``path`` at 1,280 x 800, screenshot it to ``shot``; returns what the checks read."""
    page = browser.new_page(viewport={"width": WIDTH_PX, "height": HEIGHT_PX})
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    try:
        page.goto(path.as_uri())
        page.screenshot(path=str(shot))
        return page.evaluate("""() => ({
            scroll_width: document.documentElement.scrollWidth,
            client_width: document.documentElement.clientWidth,
            card_top: document.querySelector('.card') ? document.querySelector('.card').getBoundingClientRect().top : null,
            card_text: document.querySelector('.card') ? document.querySelector('.card').innerText : '',
            text: document.body.innerText,
            broken_images: [...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src),
        })""") | {"requests": requests}  # fmt: skip
    finally:
        page.close()


def check_page(found: dict) -> None:
    assert found["scroll_width"] <= found["client_width"] == WIDTH_PX, "horizontal overflow"
    assert found["card_top"] is not None and 0 <= found["card_top"] < HEIGHT_PX - 100, found["card_top"]
    words = set(re.findall(r"[A-Za-z]+", found["text"]))
    assert not words & {"None", "nan", "NaN", "undefined"}, words & {"None", "nan", "NaN", "undefined"}
    assert not found["broken_images"], found["broken_images"]
    assert all(url.startswith("file://") for url in found["requests"]), found["requests"]  # no network


def _critical(text: str) -> str:
    match = re.search(r"Critical concurrency: (.+)", text)
    assert match, text[:500]
    return match.group(1).strip()


def test_the_diagnose_page(browser, diagnosis, tmp_path):
    found = open_page(browser, diagnosis / "report" / "index.html", tmp_path / "diagnose.png")
    check_page(found)
    # the first card holds both rounds' ladder verdicts and the attribution (the baseline's
    # verdict.json has bottleneck null and is never the page's first word)
    card = found["card_text"]
    for name, seqs in (("a", SEQS_A), ("b", SEQS_B)):
        verdict = json.loads((diagnosis / f"round-{name}" / "ladder" / "report" / "verdict.json").read_text())
        assert verdict["bottleneck"] == "scheduler_ceiling" and verdict["critical_concurrency"] == seqs, verdict
        assert f"Round {name}: round-{name}: scheduler_ceiling, critical concurrency {seqs} users" in card, card
    assert "Attribution (round 2 vs round 1): batching_or_scheduling" in card, card
    text = found["text"]
    assert text.index("Round a: ladder") < text.index("Round a: single-request baseline")


def test_a_ladder_runs_page(browser, diagnosis, tmp_path):
    found = open_page(browser, diagnosis / "round-a" / "ladder" / "report" / "index.html", tmp_path / "ladder.png")
    check_page(found)
    assert found["card_text"].startswith("Bottleneck: scheduler_ceiling"), found["card_text"][:200]
    assert _critical(found["card_text"]) == f"{SEQS_A} users"
    assert "verify:" in found["card_text"]


def test_a_baseline_runs_page(browser, diagnosis, tmp_path):
    found = open_page(browser, diagnosis / "round-a" / "baseline" / "report" / "index.html", tmp_path / "baseline.png")
    check_page(found)
    assert found["card_text"].startswith("Single-request baseline"), found["card_text"][:200]
    assert "3 requests, one at a time: TTFT p50" in found["card_text"]
