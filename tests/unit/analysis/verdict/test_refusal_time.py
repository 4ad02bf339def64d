"""Refusals judged by the users' time they take: the verdict is the same whether the users pause
after a 429 (``--backoff``, the default) or retry at once.

The run is built by hand: a closed loop against a server with 4 batch slots and a queue of 2
(the e2e "rejections" scenario). At U users ``served = min(U, 6)`` users are answered - each
request lasts ``1000 * served / 4`` ms, 4 at a time - and the other ``U - served`` are refused
(429 in 20 ms). With backoff a refused user pauses 100, 200, 400, ... ms (at most 2 s) after
each refusal; without, it sends again 5 ms later. Every user's time is its own requests, pauses
and gaps, so the share of the users' time refused at a step is ``(U - served) / U`` whatever
the pause: 0, 0, 0, 2/8, 10/16. Counted in requests the two runs differ wildly (a refused user
without a pause sends 40 requests a second, with it about one every 2 s).
"""

from __future__ import annotations

import pytest

from llm_locust.analysis.pipeline import analyze
from llm_locust.analysis.rundir.reader import load_run
from tests.analysis_factories import T0, make_request, server_row, write_run_dir

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)

LADDER, SLOTS, QUEUE, DWELL_S = (1, 2, 4, 8, 16), 4, 2, 10.0


def refused_run(path, *, backoff: bool):
    requests, server, steps, next_t, streak = [], [], [], {}, {}
    for k, users in enumerate(LADDER):
        start, end = T0 + k * DWELL_S, T0 + (k + 1) * DWELL_S
        steps.append((users, start, end))
        served = min(users, SLOTS + QUEUE)
        e2e_ms = 1000.0 * max(served, SLOTS) / SLOTS
        for u in range(users):
            t = max(start, next_t.get(u, start))
            while t < end:
                if u < served:
                    row = make_request(t, e2e_ms=e2e_ms, ttft_ms=e2e_ms - 900.0, request_id=f"s{k}-u{u}-{t:.4f}")
                    row["backoff_ms"] = 0.0
                    streak[u] = 0
                    t += e2e_ms / 1000.0
                else:
                    row = make_request(t, e2e_ms=20.0, output_tokens=0, error_kind="http_429",
                                       request_id=f"s{k}-u{u}-{t:.4f}")  # fmt: skip
                    row["ttft_ms"] = ""
                    pause_ms = min(2000.0, 100.0 * 2 ** streak.get(u, 0)) if backoff else 0.0
                    streak[u] = streak.get(u, 0) + 1
                    row["backoff_ms"] = pause_ms
                    t += (20.0 + (pause_ms if backoff else 5.0)) / 1000.0
                requests.append(row)
            next_t[u] = t
        for second in range(int(DWELL_S)):
            server += [
                server_row(start + second, "vllm:num_requests_running", min(users, SLOTS)),
                server_row(start + second, "vllm:num_requests_waiting", max(served - SLOTS, 0)),
                server_row(start + second, "vllm:kv_cache_usage_perc", 0.1),
            ]
    return write_run_dir(path, requests=requests, steps=steps, server=server)


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    base = tmp_path_factory.mktemp("refused")
    return {mode: analyze(load_run(refused_run(base / str(mode), backoff=mode)), fail_on=()) for mode in (True, False)}


def test_the_share_of_user_time_refused_is_the_same_with_and_without_backoff(both):
    expected = [max(u - (SLOTS + QUEUE), 0) / u for u in LADDER]  # 0, 0, 0, 0.25, 0.625
    for mode, result in both.items():
        table = result.verdict.table.sort_values("target_users")
        assert table["failed_time_share"].tolist() == pytest.approx(expected, abs=0.01), mode
    # counted in requests the two runs disagree: at 8 users nearly every request fails without
    # a pause, a small part with it
    by_count = {mode: r.verdict.table.set_index("target_users")["failed_share"][8.0] for mode, r in both.items()}
    assert by_count[False] > 0.9 and by_count[True] < 0.5


def test_the_verdict_is_rejections_at_4_both_ways(both):
    for mode, result in both.items():
        verdict = result.verdict
        # at 8 users the batch is full (4 of 4), 2 wait and a quarter of the users' time is
        # refused (>= 5 %: significant where throughput stops rising): the refusals come first
        assert verdict.bottleneck.value == "rejections", (mode, verdict.line)
        assert verdict.critical_concurrency == 4, mode
        assert verdict.table["valid"].all(), verdict.table[["target_users", "invalid_reason"]]
        rejections = next(e for e in verdict.evidence if e.rule == "rejections")
        assert rejections.values["users"] == 8
        assert rejections.values["failed_time_share"] == pytest.approx(0.25, abs=0.01)
        assert "25% of the users' time went to failed requests" in rejections.text
        assert "scheduler_ceiling" in {k.value for k in verdict.secondary}
    with_pause, without = both[True].verdict, both[False].verdict
    assert (with_pause.bottleneck, with_pause.secondary, with_pause.critical_concurrency) == (
        without.bottleneck,
        without.secondary,
        without.critical_concurrency,
    )
