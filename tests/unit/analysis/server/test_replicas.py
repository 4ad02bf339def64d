"""Several scraped sources (llm_locust/analysis/server/replicas.py): replicas get their own step-table columns
beside the summed aggregate and their ceilings add up; one server reached by two URLs is counted
once, whether the scraper said so (run.json), its process start time says so, or its counters do.

The synthetic servers: a ladder 1, 2, 4, 8 of 10 s steps, scraped every second. Replica ``a`` has
1 slot, ``b`` 3; round robin gives each half of the users, so ``a`` runs ``min(c/2, 1)`` and
queues the rest, ``b`` runs ``min(c/2, 3)``; each one's token counter grows by 10 tokens/s per
running request.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from llm_locust.analysis.perstep.table import replica_column
from llm_locust.analysis.pipeline import analyze_run
from llm_locust.analysis.server.replicas import counters_agree
from tests.analysis_factories import T0, make_request, server_row, write_run_dir

A, B = "http://127.0.0.1:9001/metrics", "http://127.0.0.1:9002/metrics"
LADDER = (1, 2, 4, 8)
DWELL_S = 10.0
SLOTS = {A: 1, B: 3}


def replica_rows(url: str, slots: int, *, offset_s: float = 0.0, start_time: float | None = None) -> list[dict]:
    rows, tokens = [], 0.0
    for k, users in enumerate(LADDER):
        share = users / 2
        running, waiting = min(share, slots), max(share - slots, 0.0)
        for i in range(int(DWELL_S)):
            t = T0 + k * DWELL_S + i + offset_s
            rows += [
                server_row(t, "llamacpp:requests_processing", running, "{}", url),
                server_row(t, "llamacpp:requests_deferred", waiting, "{}", url),
                server_row(t, "llamacpp:tokens_predicted_total", tokens + 10.0 * running * offset_s, "{}", url),
            ]
            if start_time is not None:
                rows.append(server_row(t, "process_start_time_seconds", start_time, "{}", url))
            tokens += 10.0 * running
    return rows


def requests_for_ladder() -> list[dict]:
    out = []
    for k, users in enumerate(LADDER):
        for i in range(int(DWELL_S)):
            out += [make_request(T0 + k * DWELL_S + i + 0.01 * u, e2e_ms=900.0) for u in range(users)]
    return out


def run_dir(tmp_path, server, **meta):
    steps = [(u, T0 + k * DWELL_S, T0 + (k + 1) * DWELL_S) for k, u in enumerate(LADDER)]
    path = write_run_dir(tmp_path / "run", requests=requests_for_ladder(), steps=steps, server=server, **meta)
    return path


def test_replicas_get_their_own_columns_and_the_aggregate_sums_them(tmp_path):
    path = run_dir(
        tmp_path,
        replica_rows(A, 1) + replica_rows(B, 3),
        metrics_urls=[A, B],
        metrics_sources=[
            {"name": "one", "url": A, "origin": "--server-metrics-url"},
            {"name": "three", "url": B, "origin": "--server-metrics-url"},
        ],  # fmt: skip
    )
    (path / "server_info.json").write_text(
        json.dumps(
            {
                "http://127.0.0.1:8000/props": {"total_slots": 1},  # the gateway's: one replica or the other
                "http://127.0.0.1:9001/props": {"total_slots": 1},
                "http://127.0.0.1:9002/props": {"total_slots": 3},
            }
        )
    )
    result = analyze_run(path, write=False)
    table = result.table.set_index("target_users")
    for users in LADDER:
        share = users / 2
        assert table.loc[users, replica_column("server_running", "one")] == pytest.approx(min(share, 1))
        assert table.loc[users, replica_column("server_waiting", "one")] == pytest.approx(max(share - 1, 0))
        assert table.loc[users, replica_column("server_running", "three")] == pytest.approx(min(share, 3))
        assert table.loc[users, "server_running"] == pytest.approx(min(share, 1) + min(share, 3))
    assert replica_column("kv_usage_ratio", "one") not in table.columns  # llama.cpp of today reports no KV
    assert result.evidence.config.batch_ceiling == 4
    assert result.evidence.config.sources["batch_ceiling"] == "sum over replicas: one 1 + three 3"
    assert "2 replicas summed: one, three" in result.server_source_line
    assert not result.evidence.duplicates


@pytest.mark.parametrize(
    ("second", "meta", "by"),
    [
        # an old run directory: the same counters scraped 0.4 s later by another URL
        (replica_rows(B, 3, offset_s=0.4), {}, "counters"),
        (replica_rows(B, 3, offset_s=0.4, start_time=T0 - 50.0), {}, "process_start_time_seconds"),
        (
            replica_rows(B, 3, offset_s=0.4),
            {"metrics_duplicates": [{"url": B, "same_as": A, "by": "_created"}]},
            "_created",
        ),
    ],
)
def test_one_server_scraped_by_two_urls_is_counted_once(tmp_path, second, meta, by):
    start = T0 - 50.0 if by == "process_start_time_seconds" else None
    path = run_dir(tmp_path, replica_rows(A, 3, start_time=start) + second, metrics_urls=[A, B], **meta)
    result = analyze_run(path, write=False)
    table = result.table.set_index("target_users")
    for users in LADDER:  # one 3-slot server with half the users: never the double
        assert table.loc[users, "server_running"] == pytest.approx(min(users / 2, 3), abs=0.05)
    (dup,) = result.evidence.duplicates
    assert (dup.url, dup.same_as, dup.by) == (B, A, by)
    assert not result.evidence.replicas
    assert any("is the same server as" in note and "counted once" in note for note in result.evidence.notes)
    assert "127.0.0.1:9002 is the same server as 127.0.0.1:9001, counted once" in result.server_source_line


def test_two_servers_with_their_own_start_times_are_two_even_when_idle_alike(tmp_path):
    idle = [
        server_row(T0 + i, name, 0.0, "{}", url)
        for url in (A, B)
        for i in range(40)
        for name in ("llamacpp:requests_processing", "llamacpp:requests_deferred", "llamacpp:tokens_predicted_total")
    ]
    starts = [
        server_row(T0 + i, "process_start_time_seconds", T0 - s, "{}", u)
        for u, s in ((A, 9), (B, 7))
        for i in range(40)
    ]
    path = run_dir(tmp_path, idle + starts, metrics_urls=[A, B])
    result = analyze_run(path, write=False)
    assert not result.evidence.duplicates
    assert [r.url for r in result.evidence.replicas] == [A, B]


def test_counters_of_two_busy_replicas_disagree():
    frame = pd.DataFrame
    a, b = frame(replica_rows(A, 1)), frame(replica_rows(B, 3, offset_s=0.4))
    assert counters_agree(a, b, ("llamacpp:tokens_predicted_total",)) is False
    same = frame(replica_rows(B, 1, offset_s=0.4))
    assert counters_agree(a, same, ("llamacpp:tokens_predicted_total",)) is True
    still = frame([server_row(T0 + i, "llamacpp:tokens_predicted_total", 5.0, "{}", A) for i in range(5)])
    assert counters_agree(still, still.assign(t_s=still["t_s"] + 0.5), ("llamacpp:tokens_predicted_total",)) is None


def test_a_duplicate_the_scraper_dropped_before_its_first_row_is_still_said(tmp_path):
    # the scraper recognised B before any of its rows was kept: run.json names it, the CSV has none
    meta = {"metrics_urls": [A, B], "metrics_duplicates": [{"url": B, "same_as": A, "by": "_created"}]}
    result = analyze_run(run_dir(tmp_path, replica_rows(A, 3), **meta), write=False)
    (dup,) = result.evidence.duplicates
    assert (dup.url, dup.same_as, dup.by) == (B, A, "_created")
    assert "127.0.0.1:9002 is the same server as 127.0.0.1:9001, counted once" in result.server_source_line
