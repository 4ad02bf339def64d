"""Outages and backoff pauses per step (issue 14), on hand-made requests whose numbers can be
checked by hand; and what the verdict makes of them (an outage step invalid but never the
client's doing; users pausing after 429s counted with the in-flight)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from llm_locust.analysis.perrequest.faults import outage_spells, step_faults
from llm_locust.analysis.pipeline import analyze_run
from tests.analysis_factories import T0, make_request, scenario_ladder, step_spec, write_run_dir

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)


def frame(rows: list[tuple[float, float, str, float]]) -> pd.DataFrame:
    """(t_start_s, e2e_ms, error_kind, backoff_ms) rows."""
    return pd.DataFrame(rows, columns=["t_start_s", "e2e_ms", "error_kind", "backoff_ms"])


def test_an_outage_runs_from_the_first_failure_to_the_first_answer():
    requests = frame([
        (0.0, 1000.0, "", 0.0),          # ends at 1.0
        (0.5, 1000.0, "connection_error", 100.0),  # cut at 1.5: the kill
        (1.6, 1.0, "connection_error", 200.0),     # refused, ends 1.601
        (2.0, 1.0, "connect_timeout", 400.0),      # ends 2.001
        (3.0, 500.0, "", 0.0),            # answered: starts at 3.0
        (4.0, 1.0, "connection_error", 100.0),     # a lone failure: no outage
        (5.0, 100.0, "interrupted", 0.0),
    ])  # fmt: skip
    spells = outage_spells(requests)
    assert spells.to_dict("records") == [
        {"start_s": 1.5, "end_s": 2.001, "span_s": pytest.approx(0.501), "requests": 3, "recovered_s": 3.0}
    ]
    windows = pd.DataFrame({"window_start_s": [0.0, 2.5], "window_end_s": [2.5, 5.0]})
    faults = step_faults(requests, windows, spells)
    # outage [1.5, 3.0]: 1.0 s of the first window, 0.5 s of the second
    assert faults["outage_s"].tolist() == pytest.approx([1.0, 0.5])
    assert faults["outage_failures"].tolist() == [3, 3]
    # pauses [1.5, 1.6], [1.601, 1.801], [2.001, 2.401], [4.001, 4.101] -> 0.1 + 0.2 + 0.4 in the first
    # window (2.5 s), 0.1 in the second
    assert faults["backoff_users"].tolist() == pytest.approx([0.7 / 2.5, 0.1 / 2.5])
    assert faults["backoff_waits"].tolist() == [3, 1]


def test_an_outage_that_never_recovers_lasts_to_the_window_end():
    requests = frame([(0.0, 100.0, "", 0.0), (1.0, 1.0, "connection_error", 0.0), (2.0, 1.0, "connection_error", 0.0)])
    spells = outage_spells(requests)
    assert np.isnan(spells["recovered_s"].iloc[0]) and spells["requests"].iloc[0] == 2
    faults = step_faults(requests, pd.DataFrame({"window_start_s": [0.0], "window_end_s": [4.0]}), spells)
    assert faults["outage_s"].iloc[0] == pytest.approx(4.0 - 1.001)


def test_an_older_run_without_backoff_ms_has_no_pauses():
    requests = frame([(0.0, 100.0, "http_429", 0.0)]).drop(columns="backoff_ms")
    faults = step_faults(
        requests, pd.DataFrame({"window_start_s": [0.0], "window_end_s": [1.0]}), outage_spells(requests)
    )
    assert faults[["backoff_users", "backoff_waits", "outage_s"]].iloc[0].tolist() == [0.0, 0, 0.0]


def test_a_step_overlapping_an_outage_is_invalid_but_not_the_client(tmp_path):
    """Steps 1, 2, 4 users of 10 s; in the 2-user step the server is down from 12 s to 16 s: both
    users' requests are refused every 0.5 s. That step is invalid ('outage: ...'), the verdict
    names the outage with its numbers, and does not say 'client'."""
    requests = []
    for k, users in enumerate((1, 2, 4)):
        for u in range(users):
            t = T0 + 10 * k
            while t < T0 + 10 * (k + 1):
                down = T0 + 12 <= t < T0 + 16
                row = make_request(t, e2e_ms=2.0 if down else 1000.0, output_tokens=0 if down else 64,
                                   error_kind="connection_error" if down else "", request_id=f"{k}-{u}-{t:.3f}")  # fmt: skip
                row["backoff_ms"] = 498.0 if down else 0.0
                if down:
                    row["ttft_ms"] = ""
                requests.append(row)
                t += 0.5 if down else 1.0
    run = write_run_dir(tmp_path / "run", requests=requests, steps=[(u, T0 + 10 * k, T0 + 10 * (k + 1)) for k, u in
                                                                      enumerate((1, 2, 4))])  # fmt: skip
    result = analyze_run(run)
    failed = [r for r in requests if r["error_kind"]]
    first_end = min(r["t_start_s"] + r["e2e_ms"] / 1000 for r in failed)
    last_end = max(r["t_start_s"] + r["e2e_ms"] / 1000 for r in failed)
    recovered = min(r["t_start_s"] for r in requests if not r["error_kind"] and r["t_start_s"] > last_end)
    table = result.verdict.table.set_index("target_users")
    assert not table.loc[2.0, "valid"] and table.loc[2.0, "invalid_reason"].startswith("outage: ")
    assert table.loc[2.0, "outage_s"] == pytest.approx(recovered - first_end)
    assert table.loc[1.0, "valid"] and table.loc[4.0, "valid"]
    assert result.verdict.bottleneck.value != "client"
    data = json.loads((run / "report" / "verdict.json").read_text())
    [outage] = [e for e in data["evidence"] if e["rule"] == "server_outage"]
    assert outage["holds"] and outage["values"]["connection_failures"] == len(failed) == 16
    assert outage["values"]["start_s"] == pytest.approx(first_end - T0)
    assert outage["values"]["recovered_s"] == pytest.approx(recovered - T0)
    assert "server_outage" in {r["because"] for r in data["recommendations"]}


def test_users_pausing_after_429_are_not_a_short_client(tmp_path):
    """8 users, 1 in 4 of each user's requests a 429 (25 % failed: significant, not dominant),
    each followed by a 1 s pause: in-flight alone is short of 90 % of 8, with the pausing users
    it is not - the step stays valid and the rejections evidence gives the share of time paused."""
    run = scenario_ladder(tmp_path / "run", [step_spec(4), step_spec(8, fail_every=4, fail_e2e_ms=10.0)])
    import csv

    with open(run / "requests.csv", newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = [*reader.fieldnames, "backoff_ms"], list(reader)
    for row in rows:
        row["backoff_ms"] = 1000.0 if row["error_kind"] else 0.0
    # the pauses push each later request of the user 1 s on: rebuild the start times per user
    by_user: dict[str, list[dict]] = {}
    for row in rows:
        step, user, _ = row["request_id"].split("-")
        by_user.setdefault(f"{step}-{user}", []).append(row)
    for group in by_user.values():
        t = float(group[0]["t_start_s"])
        for row in group:
            row["t_start_s"] = t
            t += (float(row["e2e_ms"]) + float(row["backoff_ms"])) / 1000.0
    rows = [r for r in rows if float(r["t_start_s"]) < T0 + (10.0 if r["request_id"].startswith("s0") else 20.0)]
    with open(run / "requests.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    result = analyze_run(run)
    row = result.verdict.table.set_index("target_users").loc[8.0]
    lo, hi = T0 + 10.0, T0 + 20.0
    paused = [(float(r["t_start_s"]) + float(r["e2e_ms"]) / 1000, float(r["backoff_ms"]) / 1000) for r in rows
              if r["error_kind"]]  # fmt: skip
    pausing = sum(max(0.0, min(s + d, hi) - max(s, lo)) for s, d in paused) / (hi - lo)
    assert row["backoff_users"] == pytest.approx(pausing)
    assert row["client_inflight"] < 0.9 * 8 <= row["client_inflight"] + pausing
    assert row["valid"], row["invalid_reason"]
    [rejections] = [e for e in result.verdict.evidence if e.rule == "rejections"]
    assert rejections.holds and rejections.values["backoff_share"] == pytest.approx(pausing / 8)
    assert f"{pausing / 8:.0%} at 8 users" in rejections.text


def cut_frame(rows: list[tuple[float, float, str, int]]) -> pd.DataFrame:
    """(t_start_s, e2e_ms, error_kind, status_code) rows, no pauses."""
    frame_ = pd.DataFrame(rows, columns=["t_start_s", "e2e_ms", "error_kind", "status_code"])
    frame_["backoff_ms"] = 0.0
    return frame_


def test_streams_cut_after_their_200_are_no_outage_however_many_end_together():
    """A gateway's read timeout (nginx proxy_read_timeout) cuts 4 streams it had answered 200 for,
    at 1.6 s, while 4 others are answered: no request failed to reach the server, so no outage;
    the window counts the 4 cut streams (those ending in [0, 2))."""
    requests = cut_frame(
        [(0.0, 1200.0, "", 200) for _ in range(4)]                      # answered, end at 1.2
        + [(1.0, 600.0, "connection_error", 200) for _ in range(4)]     # cut at 1.6
        + [(1.2, 1200.0, "", 200) for _ in range(4)]                    # answered, end at 2.4
        + [(1.6, 600.0, "connection_error", 200)]                       # cut at 2.2: next window
    )  # fmt: skip
    spells = outage_spells(requests)
    assert spells.empty
    windows = pd.DataFrame({"window_start_s": [0.0, 2.0], "window_end_s": [2.0, 4.0]})
    faults = step_faults(requests, windows, spells)
    assert faults["cut_streams"].tolist() == [4, 1]
    assert faults["outage_s"].tolist() == [0.0, 0.0]


def test_streams_cut_when_the_server_dies_start_the_outage_its_refusals_make():
    """The server dies at 1.5 s: two streams in flight are cut (status 200, then closed), the next
    two connections are refused (status 0), then it answers a request sent at 3.0. One spell of
    4 failures from the first cut stream's end to 3.0; with only the cut streams (no refusal)
    there would be none."""
    requests = cut_frame([
        (0.0, 1000.0, "", 200),                     # ends 1.0
        (0.5, 1000.0, "connection_error", 200),     # cut at 1.5
        (0.6, 900.0, "connection_error", 200),      # cut at 1.5
        (1.7, 1.0, "connection_error", 0),          # refused, ends 1.701
        (2.0, 1.0, "connect_timeout", 0),           # ends 2.001
        (3.0, 500.0, "", 200),                      # answered again
    ])  # fmt: skip
    spells = outage_spells(requests)
    assert spells.to_dict("records") == [
        {"start_s": 1.5, "end_s": 2.001, "span_s": pytest.approx(0.501), "requests": 4, "recovered_s": 3.0}
    ]
    only_cut = requests[requests["status_code"] > 0]
    assert outage_spells(only_cut).empty


def test_504_answers_are_counted_per_window_where_they_end():
    """nginx's 504 Gateway Timeout (proxy_read_timeout before the response header) on 3 requests
    ending at 1.5 s and one at 2.5; a 503 and a success beside them are no 504s."""
    requests = cut_frame(
        [(0.3, 1200.0, "http_5xx", 504) for _ in range(3)]   # end at 1.5
        + [(1.3, 1200.0, "http_5xx", 504)]                   # ends at 2.5: next window
        + [(0.1, 10.0, "http_5xx", 503), (0.0, 900.0, "", 200)]
    )  # fmt: skip
    windows = pd.DataFrame({"window_start_s": [0.0, 2.0], "window_end_s": [2.0, 4.0]})
    faults = step_faults(requests, windows, outage_spells(requests))
    assert faults["http_504"].tolist() == [3, 1]
