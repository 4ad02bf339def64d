"""A compute-bound server whose requests span steps: the verdict judges the tokens generated in
each window by their arrival times (``token_times_us``), not spread evenly over each request.

Found against the embedded server (``sim-server --decode-base-ms 5 --decode-per-seq-ms 10``,
ladder 2, 4, 8, 16, 18 s a step): the server generated 79.8, 88.7, 93.9, 96.9 tokens/s (x1.03
at the last doubling) but the evenly spread figure read 79.0, 86.5, 88.7, 103.2 (x1.16): a
request begun at 8 users decodes fast, then slowly once 16 run, and spread evenly its fast
tokens were credited to the 16-user step. The verdict said ``none`` (still scaling).
"""

import csv
import json

import pytest

from llm_locust.analysis.perstep.table import step_table, step_windows
from llm_locust.analysis.pipeline import analyze_run
from llm_locust.analysis.rundir.reader import LAZY_REQUEST_COLUMNS, load_run
from tests.analysis_factories import T0, make_request, server_row, write_run_dir

DWELL_S = 10.0
USERS = (2, 4, 8)
RATES = (80.0, 88.0, 90.0)  # tokens/s the server generates at each step (all users together)
TOKENS = 300  # per request: one request lasts 3.75 to 26.7 s, so most span a step boundary
TTFT_S = 0.1


def user_rate(t_s):
    k = min(int((t_s - T0) // DWELL_S), len(USERS) - 1)
    return RATES[k] / USERS[k]


def stream_requests():
    """Closed-loop users, each request ``TOKENS`` one-token events at the step's per-user rate
    (the rate changes mid-request when the step changes)."""
    out = []
    end_of_ladder = T0 + len(USERS) * DWELL_S
    for u in range(USERS[-1]):
        t = T0 + DWELL_S * next(k for k, n in enumerate(USERS) if n > u)
        j = 0
        while t < end_of_ladder:
            times, arrival = [], t + TTFT_S
            for i in range(TOKENS):
                times.append(arrival)
                if i < TOKENS - 1:
                    arrival += 1.0 / user_rate(arrival)
            out.append((t, times, f"u{u}-{j}"))
            t, j = arrival, j + 1
    return out


def write(path):
    requests = []
    for start, times, rid in stream_requests():
        row = make_request(
            start,
            ttft_ms=(times[0] - start) * 1000.0,
            e2e_ms=(times[-1] - start) * 1000.0,
            output_tokens=TOKENS,
            request_id=rid,
        )
        row["token_times_us"] = " ".join(str(round((x - start) * 1e6)) for x in times)
        row["event_tokens"] = ""
        requests.append(row)
    server = []
    for k, users in enumerate(USERS):
        for second in range(int(DWELL_S)):
            t_s = T0 + k * DWELL_S + second
            server += [
                server_row(t_s, "vllm:num_requests_running", float(users)),
                server_row(t_s, "vllm:num_requests_waiting", 0.0),
                server_row(t_s, "vllm:kv_cache_usage_perc", 0.1),
            ]
    bounds = [(u, T0 + k * DWELL_S, T0 + (k + 1) * DWELL_S) for k, u in enumerate(USERS)]
    return write_run_dir(path, requests=requests, steps=bounds, server=server)


def by_hand(path):
    """Tokens/s per window from requests.csv with the csv module: arrival-time count, and the
    even spread over [first token, end]."""
    with open(path / "requests.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    exact, spread = [], []
    for k in range(len(USERS)):
        a, b = T0 + k * DWELL_S, T0 + (k + 1) * DWELL_S
        n, s = 0, 0.0
        for r in rows:
            t0 = float(r["t_start_s"])
            stamps = [t0 + int(x) / 1e6 for x in r["token_times_us"].split()]
            n += sum(a <= x < b for x in stamps)
            first, last = t0 + float(r["ttft_ms"]) / 1000, t0 + float(r["e2e_ms"]) / 1000
            s += float(r["output_tokens"]) * max(0.0, min(last, b) - max(first, a)) / (last - first)
        exact.append(n / DWELL_S)
        spread.append(s / DWELL_S)
    return exact, spread


def test_the_scenario_misleads_an_even_spread(tmp_path):
    exact, spread = by_hand(write(tmp_path / "run"))
    assert exact[2] / exact[1] < 1.05  # the server: flat at 8 users
    assert spread[2] / spread[1] > 1.15  # spread evenly: still rising


@pytest.mark.parametrize("lazy", [True, False])
def test_step_table_counts_tokens_at_their_arrival(tmp_path, lazy):
    run_dir = write(tmp_path / "run")
    exact, _ = by_hand(run_dir)
    run = load_run(run_dir, unread=LAZY_REQUEST_COLUMNS if lazy else ())
    windows = step_windows(run.steps, run.warmup_s)
    if lazy:  # the pipeline's path: the per-event times read from the file in blocks
        from llm_locust.analysis.perstep.table import window_tokens_from_file

        table = step_table(run.requests, windows, None, window_tokens_from_file(run_dir / "requests.csv", windows))
    else:
        table = step_table(run.requests, windows, None)
    assert table["output_tps_prorated"].tolist() == pytest.approx(exact)


def test_verdict_reads_compute_at_the_flat_doubling_but_the_steps_are_too_short(tmp_path):
    # the token-timed reading is compute at 8 users (x1.02 per doubling, no queue); but 10 s
    # windows hold less than one request's 12-17 s in service, so the verdict does not decide:
    # it names compute and none (the evenly spread reading) and asks for a longer dwell
    run_dir = write(tmp_path / "run")
    exact, _ = by_hand(run_dir)
    analyze_run(run_dir)
    data = json.loads((run_dir / "report" / "verdict.json").read_text())
    assert data["bottleneck"] == "undetermined" and data["critical_concurrency"] is None
    assert data["candidates"] == ["compute", "none"]
    short = next(e for e in data["evidence"] if e["rule"] == "steps_too_short")
    assert short["holds"] and short["values"]["short_steps"] == 2
    compute = next(e for e in data["evidence"] if e["rule"] == "compute")
    assert compute["values"]["gain_per_doubling"] == pytest.approx(exact[2] / exact[1])
