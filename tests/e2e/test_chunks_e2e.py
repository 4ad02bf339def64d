"""Multi-token chunks end to end: the embedded server writes 4 tokens per SSE chunk
(``--tokens-per-chunk 4``, a server that batches its flushes); ``llm-locust run`` records them,
``analyze`` reports ITL per token and per chunk apart and flags the run. A server streaming token
by token (the same server, 1 token per chunk) is not flagged.

Every expected figure is recomputed here from ``requests.csv`` with numpy (the chunks' raw gaps,
each divided by the tokens the chunk carried), not read from the code under test.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from tests.e2e.conftest import embedded_server

pytestmark = pytest.mark.slow

PER_CHUNK = 4


@pytest.fixture(scope="module")
def chunked_host(tmp_path_factory):
    """The embedded server writing 4 tokens per chunk, stopped by PID afterwards."""
    with embedded_server(tmp_path_factory, max_num_seqs=4, extra=["--tokens-per-chunk", str(PER_CHUNK)]) as host:
        yield host


def _run(host: str, run_dir, *extra: str) -> subprocess.CompletedProcess:
    completed = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "run", "--host", host, "--workers", "1", "--out", str(run_dir),
         "--timeout-s", "60", "--ladder", "2", "--dwell-s", "4", "--warmup-s", "0.5", "--max-tokens", "30",
         *extra],
        capture_output=True, text=True, timeout=150,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return completed


def _successes(run_dir) -> pd.DataFrame:
    text = {"error_kind": str, "event_tokens": str, "token_times_us": str, "tokens_source": str}
    requests = pd.read_csv(run_dir / "requests.csv", dtype=text, keep_default_na=False)
    return requests[requests["error_kind"] == ""]


def _numbers(cell) -> np.ndarray:
    return np.array(str(cell).split(), dtype=float) if isinstance(cell, str) and cell.strip() else np.zeros(0)


def test_four_tokens_per_chunk_stated_by_continuous_usage(chunked_host, tmp_path):
    completed = _run(chunked_host, tmp_path / "run", "--continuous-usage", "true")
    ok = _successes(tmp_path / "run")
    assert len(ok) >= 4
    for row in ok.itertuples():
        n = int(row.output_tokens)
        expected = [PER_CHUNK] * (n // PER_CHUNK) + ([n % PER_CHUNK] if n % PER_CHUNK else [])
        assert row.content_events == len(expected)
        assert _numbers(row.event_tokens).astype(int).tolist() == expected  # the server's running totals

    steps = pd.read_csv(tmp_path / "run" / "report" / "steps.csv")
    ended = ok["t_start_s"] + ok["e2e_ms"] / 1000.0
    window = steps.iloc[0]
    inside = ok[(ended >= window["window_start_s"]) & (ended < window["window_end_s"])]
    assert window["tokens_per_chunk_mean"] == pytest.approx(
        inside["output_tokens"].sum() / inside["content_events"].sum()
    )
    # recomputed: every gap between chunks, and each gap over its chunk's tokens (one value per token)
    gaps, per_token = [], []
    for row in inside.itertuples():
        times_ms = _numbers(row.token_times_us) / 1000.0
        counts = _numbers(row.event_tokens)
        ends = times_ms.copy()
        ends[-1] = max(row.e2e_ms, times_ms[-1])
        gaps += np.diff(times_ms).tolist()
        step_gaps = np.diff(np.concatenate([[times_ms[0]], ends[1:]]))
        per_token += [0.0] * int(counts[0] - 1)
        for gap, k in zip(step_gaps, counts[1:]):
            per_token += [gap / k] * int(k)
    assert window["chunk_gap_p50_ms"] == pytest.approx(np.percentile(gaps, 50))
    assert window["itl_p50_ms"] == pytest.approx(np.sort(per_token)[math.ceil(0.5 * len(per_token)) - 1])
    # a chunk's gap is 4 engine steps: the two figures stand about 4 apart
    assert 3.0 < window["chunk_gap_p50_ms"] / window["itl_p50_ms"] < 5.0
    assert "Chunks carry several tokens (mean 3." in completed.stdout or "(mean 4.0" in completed.stdout
    summary = (tmp_path / "run" / "report" / "summary.md").read_text()
    assert "## Tokens per chunk" in summary


def test_without_stated_counts_the_mean_still_flags_the_run(chunked_host, tmp_path):
    completed = _run(chunked_host, tmp_path / "run")
    ok = _successes(tmp_path / "run")
    assert (ok["tokens_source"] == "usage").all()
    assert (ok["event_tokens"] == "").all()  # nothing per chunk from the server
    assert (ok["content_events"] == np.ceil(ok["output_tokens"] / PER_CHUNK)).all()
    assert "Chunks carry several tokens" in completed.stdout


def test_one_token_per_chunk_is_not_flagged(sim_host, tmp_path):
    completed = _run(sim_host, tmp_path / "run", "--continuous-usage", "true")
    steps = pd.read_csv(tmp_path / "run" / "report" / "steps.csv")
    assert steps["tokens_per_chunk_mean"].iloc[0] == pytest.approx(1.0)
    assert steps["itl_p50_ms"].iloc[0] == pytest.approx(steps["chunk_gap_p50_ms"].iloc[0], rel=0.1)
    assert "Chunks carry several tokens" not in completed.stdout
    assert "## Tokens per chunk" not in (tmp_path / "run" / "report" / "summary.md").read_text()
