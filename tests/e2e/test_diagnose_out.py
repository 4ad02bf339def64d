"""``llm-locust diagnose`` never prints an earlier run's answer as new (issue 27, item 0).

Found by a user who ran the README's ``--out`` example twice: the second diagnosis sent its load,
its master refused to record (``requests.csv`` exists), and the first run's baseline, table and
verdict were printed again with exit 0, after its ``locust_master.log`` had been overwritten.
Now a folder that holds anything is refused before any load, and a Locust run that fails
(here: a flag Locust does not know) fails the command with the master's own words.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ARGS = [
    "--ladder", "1,2", "--max-users", "2", "--dwell-s", "4", "--warmup-s", "1", "--baseline-requests", "3",
    "--max-tokens", "16", "--workers", "1",
]  # fmt: skip


def diagnose(host: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "diagnose", "--host", host, *ARGS, "--out", str(out), *extra],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def tree_digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with the SHA-256 of its bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


def served_requests(host: str) -> float:
    """The embedded server's finished requests so far (``vllm:request_success_total``, all reasons)."""
    text = urllib.request.urlopen(f"{host}/metrics", timeout=10).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("vllm:request_success_total")
    )


def test_reused_out_is_refused_before_any_load_and_the_earlier_run_is_kept(sim_host, tmp_path):
    out = tmp_path / "out"
    first = diagnose(sim_host, out)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    before, served = tree_digest(out), served_requests(sim_host)
    second = diagnose(sim_host, out)
    assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-2000:]
    assert f"--out {out} already holds files" in second.stderr
    assert "Bottleneck" not in second.stdout  # no verdict, old or new
    assert tree_digest(out) == before  # nothing of the first run overwritten
    assert served_requests(sim_host) == served  # no load sent


def test_a_failed_locust_run_fails_the_command_with_the_masters_words(sim_host, tmp_path):
    completed = diagnose(sim_host, tmp_path / "out", "--no-such-locust-flag", "3")
    assert completed.returncode != 0
    assert "the Locust run failed (exit 2)" in completed.stderr
    assert "unrecognized arguments: --no-such-locust-flag" in completed.stderr
    assert "Bottleneck" not in completed.stdout
