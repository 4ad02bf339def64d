"""The real-server rounds shared by several test modules (one server start serves many checks).

A vLLM start costs 30-90 s on a 2-core machine (eager: ``real_servers.VLLM_TEST_ARGS``; 75 s to
/health in CI) and a llama.cpp ladder several; the suite must stay under 30 minutes. Both vLLMs
(``--max-num-seqs 2`` and ``8``) are started at idle priority during the end-to-end tests
(``real_servers.Prestart``; idle, each uses ~2 % of a core) and claimed here. Each server configuration is started once for the package
(stopped after its last test here, not kept up through the rest of the suite) and its run
directories are read by every module that asserts on that configuration. The modules run in
name order, so the session's vLLM ``--max-num-seqs 8`` starts with ``test_real_vllm`` and serves
the vLLM modules after it only (never measured beside a llama.cpp run; pre-started, it sits idle
through them):

- ``vllm_seqs_ab``: ``llm-locust diagnose`` against vLLM ``--max-num-seqs 2``, then against
  ``--max-num-seqs 8`` (``vllm_seqs8``, which also serves ``test_real_vllm_inputs``) with
  ``--compare-to`` the first round. ``test_real_vllm`` asserts the scheduler ceiling on the first
  round's ladder; ``test_real_vllm_ab`` the attribution.
- ``llamacpp_quant_ab``: ``diagnose --host f32 --host-b q4_0`` (4 slots each).
  ``test_real_llamacpp`` asserts the server-side truth on the f32 round's ladder;
  ``test_real_quant_ab`` the round table and attribution.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.real_servers import PRESTART_KEY, VLLM_SEQS2, VLLM_SEQS8, real_server

VLLM_AB_ARGS = [
    "--model", "slow-llama", "--ladder", "1,2,4,8", "--max-users", "8", "--dwell-s", "12",
    "--warmup-s", "3", "--baseline-requests", "6", "--max-tokens", "64", "--ignore-eos", "true",
]  # fmt: skip
"""Both vLLM rounds: the same script and inputs (the playbook's one change is the server's)."""

LLAMACPP_SLOTS = 4


@dataclass(frozen=True)
class DiagnoseRounds:
    """Where a two-round ``diagnose`` wrote its output.

    Attributes
    ----------
    round_a, round_b : Path
        Each round's folder (``baseline/`` and ``ladder/`` run directories inside).
    compare_json : Path
        ``compare/compare.json`` of the second round against the first.
    stdout : str
        The console output of the command that printed the attribution.
    """

    round_a: Path
    round_b: Path
    compare_json: Path
    stdout: str


def _diagnose(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "diagnose", *args], capture_output=True, text=True, timeout=900
    )


def _check(completed: subprocess.CompletedProcess) -> None:
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]


@dataclass(frozen=True)
class RunningServer:
    """A real server up for the whole session: its base URL and the log it writes."""

    url: str
    log: Path


@pytest.fixture(scope="package")
def vllm_seqs8(tmp_path_factory, request):
    """vLLM ``--max-num-seqs 8`` (``slow`` model), up for the session: the A/B's second round and
    the input-length runs of ``test_real_vllm_inputs`` share it (one start instead of two)."""
    tmp = tmp_path_factory.mktemp("vllm-seqs8")
    seqs8, prestarted = VLLM_SEQS8, request.config.stash.get(PRESTART_KEY, [])
    with real_server(seqs8.name, list(seqs8.serve_args), seqs8.env, tmp / "seqs8.log", prestarted=prestarted) as url:
        yield RunningServer(url, tmp / "seqs8.log")


@pytest.fixture(scope="package")
def vllm_seqs_ab(tmp_path_factory, request) -> DiagnoseRounds:
    """vLLM ``--max-num-seqs 2`` (claimed or started, and stopped here), then the package's
    ``--max-num-seqs 8`` server (idle until then when pre-started: one vLLM measured at a time), the
    second round compared with the first."""
    tmp = tmp_path_factory.mktemp("vllm-ab")
    prestarted = request.config.stash.get(PRESTART_KEY, [])
    seqs2 = VLLM_SEQS2
    with real_server(seqs2.name, list(seqs2.serve_args), seqs2.env, tmp / "seqs2.log", prestarted=prestarted) as url:
        first = _diagnose(
            "--host", url, *VLLM_AB_ARGS, "--server-log", str(tmp / "seqs2.log"), "--out", str(tmp / "seqs2")
        )
    _check(first)
    vllm_seqs8 = request.getfixturevalue("vllm_seqs8")
    second = _diagnose(
        "--host", vllm_seqs8.url, *VLLM_AB_ARGS, "--server-log", str(vllm_seqs8.log), "--out", str(tmp / "seqs8"),
        "--compare-to", str(tmp / "seqs2" / "round-a"),
    )  # fmt: skip
    _check(second)
    return DiagnoseRounds(
        tmp / "seqs2" / "round-a", tmp / "seqs8" / "round-a", tmp / "seqs8" / "compare" / "compare.json", second.stdout
    )


@pytest.fixture(scope="package")
def llamacpp_quant_ab(tmp_path_factory) -> DiagnoseRounds:
    """llama.cpp f32 vs q4_0 of the same model, 4 slots each, both rounds by one ``diagnose``.

    Both servers run with ``--no-repack``: on this machine (AMX-capable CPU in a sandbox) the
    repacked q4_0 kernels die with SIGILL at load; plain q4_0 kernels work, and the flag is the
    same on both sides, so the quantization stays the only change.
    """
    tmp = tmp_path_factory.mktemp("quant-ab")
    env = {"MODEL": "slow", "SLOTS": str(LLAMACPP_SLOTS)}
    with (
        real_server("llama-cpp", ["--no-repack"], env, tmp / "f32.log") as url_a,
        real_server("llama-cpp", ["--no-repack"], {**env, "QUANT": "q4_0"}, tmp / "q4_0.log") as url_b,
    ):
        out = tmp / "out"
        completed = _diagnose(
            "--host", url_a, "--host-b", url_b, "--model", "slow-llama", "--ladder", "1,2,4,8", "--max-users", "8",
            "--dwell-s", "12", "--warmup-s", "3", "--baseline-requests", "8", "--max-tokens", "64",
            "--ignore-eos", "true", "--label", "quant=f32", "--label-b", "quant=q4_0",
            "--server-log", str(tmp / "f32.log"), "--server-log-b", str(tmp / "q4_0.log"), "--out", str(out),
        )  # fmt: skip
    _check(completed)
    (tmp / "stdout.txt").write_text(completed.stdout)
    return DiagnoseRounds(out / "round-a", out / "round-b", out / "compare" / "compare.json", completed.stdout)
