"""Lost workers (issue 14): recorded with when they were last heard from and their last shipped
record, withdrawn when they come back; the shapes dispatch their users again; the client report
counts outages and says what a lost worker cost."""

from __future__ import annotations

import argparse
import math
import time
from types import SimpleNamespace

import numpy as np
import pytest
from locust.env import Environment
from locust.runners import STATE_MISSING, STATE_RUNNING, WorkerNode, WorkerNodes

from llm_locust.analysis.perrequest.faults import outages
from llm_locust.client.record import RequestRecord
from llm_locust.master.clientreport import ClientReport, format_summary
from llm_locust.master.shapes import LadderShape
from llm_locust.master.shipping import LAST_END_KEY, REPORT_KEY
from llm_locust.master.workerloss import WorkerLossWatch


def master_with(*worker_ids: str):
    environment = Environment()
    clients = WorkerNodes()
    for worker in worker_ids:
        clients[worker] = WorkerNode(worker, state=STATE_RUNNING)
    environment.runner = SimpleNamespace(clients=clients, shape_last_tick=None, environment=environment)
    return environment, clients


def row(worker: str, t_start_s: float, e2e_ms: float) -> tuple:
    return RequestRecord(request_id="r", worker_id=worker, name="chat", t_start_s=t_start_s, e2e_ms=e2e_ms).to_row()


def test_a_missing_worker_is_recorded_once_with_its_last_heartbeat_and_record():
    environment, clients = master_with("w1", "w2")
    watch = WorkerLossWatch(environment)
    events = environment.events
    now = time.time()
    events.heartbeat_sent.fire(client_id="w1", timestamp=now - 3.0)
    events.heartbeat_sent.fire(client_id="w2", timestamp=now - 2.5)
    events.worker_report.fire(client_id="w1", data={REPORT_KEY: [row("w1", now - 10.0, 2500.0),
                                                                 row("w1", now - 5.0, 1000.0)]})  # fmt: skip
    events.heartbeat_sent.fire(client_id="w1", timestamp=now + 0.5)  # its last heartbeat, after the report

    assert watch.check() is False and watch.losses() == []
    clients["w1"].state = STATE_MISSING  # what Locust's heartbeat checker does after 3 missed beats
    assert watch.check() is True
    assert watch.check() is False  # recorded once
    [loss] = watch.losses()
    assert loss == {"worker": "w1", "lost_at_s": now + 0.5, "last_record_s": pytest.approx(now - 4.0)}
    assert now <= watch.last_report_s["w1"] <= time.time()


def test_a_packed_batch_gives_its_last_record_from_the_end_its_worker_read():
    environment, clients = master_with("w1")
    watch = WorkerLossWatch(environment)
    environment.events.worker_report.fire(client_id="w1", data={LAST_END_KEY: 480.5})
    environment.events.worker_report.fire(client_id="w1", data={LAST_END_KEY: None})  # a batch without ends
    clients["w1"].state = STATE_MISSING
    watch.check()
    [loss] = watch.losses()
    assert loss["last_record_s"] == 480.5


def test_a_worker_lost_before_shipping_anything_has_no_last_record():
    environment, clients = master_with("w1")
    watch = WorkerLossWatch(environment)
    environment.events.heartbeat_sent.fire(client_id="w1", timestamp=500.0)
    clients["w1"].state = STATE_MISSING
    watch.check()
    assert watch.losses() == [{"worker": "w1", "lost_at_s": 500.0, "last_record_s": None}]


def test_a_worker_that_heartbeats_again_is_not_lost():
    environment, clients = master_with("w1", "w2")
    watch = WorkerLossWatch(environment)
    clients["w2"].state = STATE_MISSING
    watch.check()
    assert [loss["worker"] for loss in watch.losses()] == ["w2"]
    clients["w2"].state = STATE_RUNNING  # Locust: "self-healed with heartbeat"
    assert watch.check() is True and watch.losses() == []


def ladder_on(environment):
    shape = LadderShape()
    shape.runner = environment.runner
    shape.get_run_time = lambda: 3.0
    environment.parsed_options = argparse.Namespace(
        ladder="2,4", dwell_s=10.0, warmup_s=2.0, drain_s=0.0, max_tokens=8, scrape_interval_s=1.0, baseline_requests=1
    )
    return shape


def test_the_ladder_dispatches_its_step_again_when_a_worker_goes_missing():
    environment, clients = master_with("w1", "w2")
    shape = ladder_on(environment)
    runner = environment.runner
    tick = shape.tick()
    runner.shape_last_tick = tick  # Locust's shape worker: start() ran for this tick

    assert shape.tick() == tick and runner.shape_last_tick == tick  # nothing changed: no new dispatch
    clients["w2"].state = STATE_MISSING
    assert shape.tick() == tick and runner.shape_last_tick is None  # Locust will start() it again
    runner.shape_last_tick = tick
    assert shape.tick() == tick and runner.shape_last_tick == tick  # once per lost worker
    clients["w1"].state = STATE_MISSING  # the last one: nothing to dispatch to
    shape.tick()
    assert runner.shape_last_tick == tick


def test_outages_are_runs_of_connection_failures_in_end_order():
    # ends:      1    2    3    4    5    6    7
    ends = np.array([5.0, 1.0, 2.0, 3.0, 4.0, 7.0, 6.0])
    failed = np.array([True, False, True, True, False, True, True])
    result = outages(ends, failed)
    # in end order: 1 ok, 2 x, 3 x, 4 ok, 5 x, 6 x, 7 x
    assert result == [{"start_s": 2.0, "end_s": 3.0, "span_s": 1.0, "requests": 2},
                      {"start_s": 5.0, "end_s": 7.0, "span_s": 2.0, "requests": 3}]  # fmt: skip


def test_client_report_counts_outages_interruptions_and_lost_workers():
    environment, _ = master_with()
    report = ClientReport(environment)
    rows = [RequestRecord(request_id=str(i), worker_id="w", name="chat", t_start_s=100.0 + i, e2e_ms=500.0,
                          error_kind=kind).to_row()
            for i, kind in enumerate(["", "connection_error", "connect_timeout", "connection_error", "",
                                      "interrupted"])]  # fmt: skip
    report.add_rows(rows)
    loss = {"worker": "w9", "lost_at_s": 110.0, "last_record_s": 107.5, "last_report_s": 108.0}
    summary = report.summary(workers_lost=[loss])

    assert summary["outages"] == [{"start_s": 101.5, "end_s": 103.5, "span_s": 2.0, "requests": 3}]
    assert summary["interrupted"] == 1 and summary["successes"] == 2
    assert summary["workers_lost"] == [{**loss, "unshipped_s": 2.0}]
    text = format_summary(summary)
    assert "server unreachable: 1 spell(s), 3 requests" in text
    assert "interrupted: 1 requests" in text
    assert "worker lost: w9" in text and "2.0 s before" in text and "only loss" in text


def test_client_report_without_faults_says_nothing_of_them():
    environment, _ = master_with()
    report = ClientReport(environment)
    report.add_rows([row("w", 1.0, 100.0)])
    summary = report.summary()
    assert summary["outages"] == [] and summary["workers_lost"] == [] and summary["interrupted"] == 0
    text = format_summary(summary)
    assert "unreachable" not in text and "interrupted" not in text and "lost" not in text
    assert math.isnan(
        report.summary(workers_lost=[{"worker": "x", "lost_at_s": 1.0, "last_record_s": None, "last_report_s": None}])[
            "workers_lost"
        ][0]["unshipped_s"]
    )


def test_client_report_counts_no_outage_for_streams_cut_after_their_answer():
    """Three streams a gateway cut after their 200 (nginx proxy_read_timeout) end in a row: the
    server was reached each time, so the console says no outage; a refused connection after them
    makes them one spell of 4 (the cut streams join it)."""
    environment, _ = master_with()
    report = ClientReport(environment)
    cut = [RequestRecord(request_id=str(i), worker_id="w", name="chat", t_start_s=100.0 + i, e2e_ms=500.0,
                         error_kind="connection_error", status_code=200).to_row() for i in range(3)]  # fmt: skip
    report.add_rows([row("w", 99.0, 100.0), *cut])
    summary = report.summary()
    assert summary["outages"] == []
    assert "server unreachable" not in format_summary(summary)
    report.add_rows([RequestRecord(request_id="r", worker_id="w", name="chat", t_start_s=103.0, e2e_ms=1.0,
                                   error_kind="connection_error").to_row()])  # fmt: skip
    assert report.summary()["outages"] == [{"start_s": 100.5, "end_s": 103.001, "span_s": pytest.approx(2.501),
                                            "requests": 4}]  # fmt: skip
