"""Multi-turn sessions end to end against the embedded server (``--session-turns 4
--think-time-s 0.3 --input-tokens 64``): each turn sends the history, so the server's own
prompt count grows by the new user message plus the previous answer; a session's turns come
from one user, in order, a think time apart; the step table and summary report them.

Expected values come from the embedded server's documented counting rule
(``llm_locust/simserver/openai_request.py``: a chat prompt is its messages' words + 4 per
message + 3), applied here, and from ``requests.csv`` itself.
"""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

pytestmark = pytest.mark.slow

TURNS, THINK_S, USER_TOKENS = 4, 0.3, 64


def test_sessions_grow_their_prompts_turn_by_turn(sim_host, tmp_path):
    run_dir = tmp_path / "run"
    completed = subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", "run", "--host", sim_host, "--workers", "1", "--out", str(run_dir),
         "--timeout-s", "60", "--ladder", "3", "--dwell-s", "8", "--warmup-s", "0.5", "--max-tokens", "12",
         "--session-turns", str(TURNS), "--think-time-s", str(THINK_S), "--input-tokens", str(USER_TOKENS)],
        capture_output=True, text=True, timeout=150,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr
    text = {"error_kind": str, "session_id": str}
    requests = pd.read_csv(run_dir / "requests.csv", dtype=text, keep_default_na=False)
    requests = requests.sort_values("t_start_s")
    ok = requests[requests["error_kind"] == ""]
    assert (requests["turn"] >= 1).all() and (requests["session_id"] != "").all()
    assert requests["turn"].max() == TURNS and requests["session_id"].nunique() >= 3
    full = 0
    for _, session in requests.groupby("session_id"):
        assert session["turn"].tolist() == list(range(1, len(session) + 1))  # in order, none skipped
        assert session["worker_id"].nunique() == 1
        if len(session) == TURNS:
            full += 1
        rows = session.to_dict("records")
        assert rows[0]["prompt_tokens"] == USER_TOKENS  # the first turn is the built prompt alone
        for before, after in zip(rows, rows[1:]):
            if before["error_kind"] or after["error_kind"]:
                continue
            # + the answer (its words, at least 1, at most its tokens, + 4) + the user message (64 - 3)
            answer_words = after["prompt_tokens"] - before["prompt_tokens"] - 4 - (USER_TOKENS - 3)
            assert 1 <= answer_words <= before["output_tokens"]
            sent_after_s = after["t_start_s"] - (before["t_start_s"] + before["e2e_ms"] / 1000.0)
            assert sent_after_s >= THINK_S * 0.95  # the think time, in no latency
    assert full >= 3
    # prompts grow by turn: the server's count, mean per turn index, strictly increasing
    by_turn = ok.groupby("turn")["prompt_tokens"].mean()
    assert by_turn.is_monotonic_increasing and by_turn.iloc[-1] > by_turn.iloc[0] + 3 * (USER_TOKENS - 3)

    steps = pd.read_csv(run_dir / "report" / "steps.csv")
    window = steps.iloc[0]
    ended = requests["t_start_s"] + requests["e2e_ms"] / 1000.0
    inside = requests[(ended >= window["window_start_s"]) & (ended < window["window_end_s"])]
    assert window["sessions"] == inside["session_id"].nunique()
    assert window["turns_per_session_mean"] == pytest.approx(len(inside) / inside["session_id"].nunique())
    summary = (run_dir / "report" / "summary.md").read_text()
    assert "## Sessions" in summary
    assert f"| {TURNS} | {int((requests['turn'] == TURNS).sum())} |" in summary
