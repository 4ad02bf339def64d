"""Exact input lengths against a real vLLM (CPU build, ``slow`` model, prefix caching on by default;
the session's ``--max-num-seqs 8`` server of ``conftest.vllm_seqs8``, shared with the A/B).

Expected values come from the server, not from this project's code: vLLM's own
``usage.prompt_tokens`` must be within 1 % of ``--input-tokens`` on every request, whether the
prompts were sized by the model's tokenizer (``--tokenizer``: its ``tokenizer.json`` and chat
template) or by probing the server; and vLLM's own prefix-cache counters must show hits when the
prompts share a prefix, and next to none when they do not.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from llm_locust.analysis.pipeline import analyze_run

pytestmark = [pytest.mark.slow, pytest.mark.real_server]

INPUT_TOKENS = 256
SHARED_PREFIX_TOKENS = 192
TOKENIZER = Path.home() / ".cache/llm-locust/vllm-cpu/models/slow-llama"


def _run(url: str, run_dir: Path, *extra: str) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "run", "--host", url, "--workers", "1", "--run-dir", str(run_dir),
         "--no-analyze", "--timeout-s", "120", "--ladder", "2", "--dwell-s", "16", "--warmup-s", "2",
         "--max-tokens", "16", "--input-tokens", str(INPUT_TOKENS), *extra],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr


@pytest.fixture(scope="module")
def runs(tmp_path_factory, vllm_seqs8):
    """Two runs on one server: sized by probing the server, then by the tokenizer with a shared prefix."""
    tmp = tmp_path_factory.mktemp("vllm-inputs")
    _run(vllm_seqs8.url, tmp / "server-sized")
    _run(vllm_seqs8.url, tmp / "tokenizer-sized", "--tokenizer", str(TOKENIZER), "--shared-prefix-tokens",
         str(SHARED_PREFIX_TOKENS))  # fmt: skip
    return tmp / "server-sized", tmp / "tokenizer-sized"


@pytest.mark.parametrize("which", [0, 1], ids=["server-sized", "tokenizer-sized"])
def test_every_prompt_is_the_asked_length_as_vllm_counts_it(runs, which):
    requests = pd.read_csv(runs[which] / "requests.csv")
    ok = requests[requests["error_kind"].isna()]
    assert len(ok) >= 10 and len(ok) == len(requests), requests["error_kind"].value_counts()
    assert (ok["prompt_tokens"] - INPUT_TOKENS).abs().max() <= 0.01 * INPUT_TOKENS, ok["prompt_tokens"].describe()
    assert (ok["prompt_tokens_target"] == INPUT_TOKENS).all()


def _expected_hit_ratio(run_dir: Path) -> float:
    """Hits / queries vLLM's block-wise prefix cache should report once the prefix is cached: every
    whole block of the common start (template + start + shared words) hits, nothing else does."""
    metrics = pd.read_csv(run_dir / "server_metrics.csv")
    info = metrics[metrics["metric"] == "vllm:cache_config_info"]["labels"].iloc[-1]
    block = int(json.loads(info)["block_size"])
    base = json.loads((run_dir / "run.json").read_text())["workload"]["input_calibration"]["base_tokens"]
    return (base + SHARED_PREFIX_TOKENS) // block * block / INPUT_TOKENS


def test_shared_prefix_shows_prefix_cache_hits_and_distinct_prompts_do_not(runs):
    distinct, shared = (analyze_run(run).table for run in runs)
    assert distinct["prompt_off_share"].iloc[0] == 0 and shared["prompt_off_share"].iloc[0] == 0
    expected = _expected_hit_ratio(runs[1])  # 0.5 with vLLM CPU's 128-token blocks
    # the first request of the run computes the prefix, every later one hits it
    assert 0.9 * expected <= shared["prefix_cache_hit_ratio"].iloc[0] <= expected, shared.T
    assert distinct["prefix_cache_hit_ratio"].iloc[0] < 0.02, distinct.T  # random words share no whole block
    assert "prefix cache hits / queries" in (runs[1] / "report" / "summary.md").read_text()
