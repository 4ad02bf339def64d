"""Prefix-cache rounds for the tests that run one shared-prefix workload with and without a
prefix cache and compare them: ``tests/real/test_real_vllm_prefix.py`` (a real vLLM) and its
mirror ``tests/e2e/test_prefix_cache_e2e.py`` (the embedded server).

Each round scrapes the server's own counters itself, before and after the run (with
prometheus_client's parser), so the tests check the analysis against the server's figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from prometheus_client.parser import text_string_to_metric_families

COUNTERS = ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total", "vllm:prompt_tokens_total")


def prefix_counters(url: str) -> dict[str, float]:
    """The server's :data:`COUNTERS` (summed over their labels; 0 where absent) and, where it
    exposes ``vllm:cache_config_info``, its ``block_size``."""
    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    out = dict.fromkeys(COUNTERS, 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in COUNTERS:
                out[sample.name] += sample.value
            if sample.name == "vllm:cache_config_info":
                out["block_size"] = float(sample.labels["block_size"])
    return out


@dataclass(frozen=True)
class Round:
    run_dir: Path
    stdout: str
    delta: dict[str, float]
    """Increase of each of :data:`COUNTERS` over the run, from the test's own scrapes."""
    block_size: int | None
    """The server's ``vllm:cache_config_info`` block size, None where it exposes none."""


def prefix_round(url: str, run_dir: Path, run_args: Sequence[str], *, timeout_s: float) -> Round:
    """``llm-locust run --host url --workers 1 --out run_dir *run_args`` between two scrapes."""
    before = prefix_counters(url)
    completed = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "run", "--host", url, "--workers", "1", "--out", str(run_dir),
         *run_args],
        capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    after = prefix_counters(url)
    delta = {name: after[name] - before[name] for name in COUNTERS}
    block = after.get("block_size")
    return Round(run_dir, completed.stdout, delta, None if block is None else int(block))


@dataclass(frozen=True)
class PrefixRounds:
    off: Round
    on: Round
    compare_json: Path
    compare_stdout: str


def compare_rounds(off: Round, on: Round, out: Path, *, timeout_s: float) -> PrefixRounds:
    """``llm-locust compare`` of the round without caching (first) and the one with it."""
    completed = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "compare", str(off.run_dir), str(on.run_dir), "--out", str(out), "-q"],
        capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    return PrefixRounds(off, on, out / "compare.json", completed.stdout)


def round_steps(r: Round) -> pd.DataFrame:
    """The round's ``report/steps.csv``."""
    return pd.read_csv(r.run_dir / "report" / "steps.csv")


def round_verdict(r: Round) -> dict:
    """The round's ``report/verdict.json``."""
    return json.loads((r.run_dir / "report" / "verdict.json").read_text())
