"""docs/own-server.md, run as written (issue 26, item 7): the page's two format files and its two
commands are read from the page itself, so the page cannot drift from what the tool does.

The embedded server plays the in-house server the page describes (``POST /generate`` JSON lines,
static batching with a batch timer, its own log, 404 on ``/metrics``); the page's ``llm-locust
run`` loads it. Checked, each against something the code under test does not compute:

- the run exits 0 and its verdict is the kind the page shows, with the critical concurrency at
  the server's own ``--max-num-seqs`` from the page's server command;
- every ``evidence [rule]`` the page shows holds in ``verdict.json``;
- every line of the page's output appears on the console, numbers and the answer's text aside;
- the format file's per-pattern counts are printed, and each equals the lines of the followed
  log that the page's pattern matches (counted here with ``re`` on the page's TOML, read with
  ``tomllib``), zero where the page shows zero.

About 40 s (5 steps of 5 s, one server, a master and 2 workers).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import requests

from llm_locust.run.launcher import free_port, stop_process

pytestmark = pytest.mark.slow

PAGE = Path(__file__).resolve().parents[2] / "docs" / "own-server.md"
FENCE_RE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
NUMBER_RE = re.compile(r"\d+(?:\.\d+)?")
TABLES = ("series", "batches", "config", "errors")


def page_blocks() -> list[tuple[str, str]]:
    """The page's fenced blocks as (language, text)."""
    return FENCE_RE.findall(PAGE.read_text())


def page_files() -> dict[str, str]:
    """The TOML blocks whose first line names their file (``# deepinfer-log.toml``)."""
    out = {}
    for lang, text in page_blocks():
        first = text.splitlines()[0]
        if lang == "toml" and first.startswith("# ") and first.endswith(".toml"):
            out[first[2:]] = text
    return out


def page_commands() -> list[list[str]]:
    """Every ``.venv/bin/llm-locust`` command of the page's bash blocks, continuations joined."""
    out = []
    for lang, text in page_blocks():
        if lang != "bash":
            continue
        for line in text.replace("\\\n", " ").splitlines():
            if line.startswith(".venv/bin/llm-locust "):
                out.append(shlex.split(line.rstrip(" &")))
    return out


def page_output() -> list[str]:
    """The lines of the page's console output block (the one with the verdict)."""
    block = next(text for lang, text in page_blocks() if lang == "" and "Bottleneck:" in text)
    return block.splitlines()


def line_pattern(line: str) -> re.Pattern:
    """A shown line as a pattern: any numbers, any quoted answer text, any run of spaces."""
    parts = re.split(r'("[^"]*"$)', line.strip())
    regex = ""
    for part in parts:
        if part.startswith('"') and part.endswith('"'):
            regex += '".*"'
            continue
        words = re.split(r"(\s+)", part)
        regex += "".join(
            r"\s+" if word.isspace() else r"\d+(?:\.\d+)?".join(map(re.escape, NUMBER_RE.split(word))) for word in words
        )
    return re.compile(regex)


def _with_port(command: list[str], port: int) -> list[str]:
    out = [sys.executable, "-m", "llm_locust.cli", *command[1:]]
    out = [a.replace("127.0.0.1:8000", f"127.0.0.1:{port}") for a in out]
    if "--port" in out:
        out[out.index("--port") + 1] = str(port)
    return out


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("own-server")
    files = page_files()
    assert set(files) == {"deepinfer-protocol.toml", "deepinfer-log.toml"}, files.keys()
    for name, text in files.items():
        (tmp / name).write_text(text)
    server_cmd, run_cmd = page_commands()
    assert server_cmd[1] == "sim-server" and run_cmd[1] == "run", (server_cmd, run_cmd)
    port = free_port()
    server = subprocess.Popen(
        _with_port(server_cmd, port), cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(0.2)
        else:
            pytest.fail("the page's server did not answer /health within 30 s")
        completed = subprocess.run(_with_port(run_cmd, port), cwd=tmp, capture_output=True, text=True, timeout=150)
    finally:
        stop_process(server, grace_s=10)
    out_dir = tmp / run_cmd[run_cmd.index("--out") + 1]
    return completed, out_dir, server_cmd, files


def test_the_run_works_and_gives_the_verdict_the_page_shows(example):
    completed, out_dir, server_cmd, _ = example
    console = completed.stdout + completed.stderr
    assert completed.returncode == 0, console[-3000:]
    shown = "\n".join(page_output())
    kind = re.search(r"^Bottleneck: (\w+) ", shown, re.MULTILINE).group(1)
    verdict = json.loads((out_dir / "report" / "verdict.json").read_text())
    assert verdict["bottleneck"] == kind == "scheduler_ceiling", console[-3000:]
    # a static batcher of max batch size N saturates at N users: the server's own setting
    assert verdict["critical_concurrency"] == int(server_cmd[server_cmd.index("--max-num-seqs") + 1]) == 8
    holds = {e["rule"] for e in verdict["evidence"] if e["holds"]}
    for rule in re.findall(r"evidence \[(\w+)\]", shown):
        assert rule in holds, (rule, holds)
    assert "static_batch" in holds


def test_every_line_the_page_shows_is_printed(example):
    completed, _, _, _ = example
    printed = [line.strip() for line in completed.stdout.splitlines()]
    missing = [
        line
        for line in page_output()
        if line.strip() not in ("", "...") and not any(line_pattern(line).fullmatch(p) for p in printed)
    ]
    assert not missing, "\n".join(missing) + "\n--- printed:\n" + completed.stdout[-4000:]


def test_the_per_pattern_counts_are_printed_and_match_the_log(example):
    completed, out_dir, _, files = example
    fmt = tomllib.loads(files["deepinfer-log.toml"])
    log_lines = (out_dir / "server.log").read_text().splitlines()
    expected = {}
    for table in TABLES:
        patterns = [entry["pattern"] for entry in fmt["log"].get(table, [])]
        expected[table] = [sum(1 for line in log_lines if re.search(p, line)) for p in patterns]
    shown = next(line for line in page_output() if line.startswith("Format file "))
    printed = next(line for line in completed.stdout.splitlines() if line.startswith("Format file "))

    def counts(line: str) -> dict[str, list[int]]:
        return {
            table: [int(n) for n in re.findall(r"#\d+ (\d+)", part)]
            for table, part in re.findall(r"\[\[log\.(\w+)\]\] ([^;]*)", line)
        }

    assert line_pattern(shown).fullmatch(printed), (shown, printed)
    assert counts(printed) == {t: n for t, n in expected.items() if n}, (printed, expected)
    # the page's zeros (no refusal, no queue timeout) and its config lines found once are this run's too
    for table, numbers in counts(shown).items():
        if table != "batches":
            assert counts(printed)[table] == numbers, (table, shown, printed)
    assert counts(printed)["batches"][0] > 0
    assert "warning:" not in completed.stdout
