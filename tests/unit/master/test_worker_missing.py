"""Missing spells (issue 13 item 5): each time Locust marks a worker missing, run.json's
``workers_missing`` keeps from when the master last heard from it to its next heartbeat (or null:
never back); workers name their host and pid; the client report and its console table show it."""

from __future__ import annotations

import json
import os
import socket

import pytest
from locust.runners import STATE_MISSING, STATE_RUNNING

from llm_locust.analysis.schema import RUN_JSON
from llm_locust.client.record import CSV_COLUMNS
from llm_locust.master.clientreport import ClientReport, format_summary
from llm_locust.master.workerloss import PROCESS_KEY, WorkerLossWatch, install_process_reporting
from llm_locust.wallclock import local_wall_s
from tests.analysis_factories import T0, client_load_row, make_request, write_client_load, write_run_dir
from tests.unit.master.test_worker_loss import master_with


def test_a_worker_back_after_a_spell_keeps_the_spell_but_is_not_lost():
    environment, clients = master_with("w1", "w2")
    watch = WorkerLossWatch(environment)
    heartbeat = environment.events.heartbeat_sent
    heard_s = local_wall_s() - 10.0
    heartbeat.fire(client_id="w2", timestamp=heard_s)
    clients["w2"].state = STATE_MISSING
    before = local_wall_s()
    assert watch.check() is True
    [spell] = watch.missing_intervals()
    assert spell["worker"] == "w2" and spell["from_s"] == heard_s and spell["to_s"] is None
    assert before <= spell["noticed_s"] <= local_wall_s()
    assert [loss["worker"] for loss in watch.losses()] == ["w2"]

    back_s = local_wall_s()
    heartbeat.fire(client_id="w2", timestamp=back_s)  # Locust heals it on this heartbeat, then fires the event
    heartbeat.fire(client_id="w2", timestamp=back_s + 0.5)  # a later one does not move the return
    clients["w2"].state = STATE_RUNNING
    assert watch.check() is True
    assert watch.losses() == []
    assert watch.missing_intervals() == [{**spell, "to_s": back_s}]


def test_every_spell_of_a_worker_is_kept_from_its_last_word():
    environment, clients = master_with("w1")
    watch = WorkerLossWatch(environment)
    heartbeat = environment.events.heartbeat_sent
    now = local_wall_s()
    heartbeat.fire(client_id="w1", timestamp=now - 30.0)
    clients["w1"].state = STATE_MISSING
    watch.check()
    heartbeat.fire(client_id="w1", timestamp=now - 20.0)
    clients["w1"].state = STATE_RUNNING
    watch.check()
    heartbeat.fire(client_id="w1", timestamp=now - 15.0)  # its last word before the second spell
    clients["w1"].state = STATE_MISSING
    watch.check()

    spells = watch.missing_intervals()
    assert [(s["from_s"], s["to_s"]) for s in spells] == [(now - 30.0, now - 20.0), (now - 15.0, None)]
    assert watch.losses() == [{"worker": "w1", "lost_at_s": now - 15.0, "last_record_s": None}]


def test_a_worker_locust_dropped_from_its_table_stays_missing():
    environment, clients = master_with("w1")
    watch = WorkerLossWatch(environment)
    environment.events.heartbeat_sent.fire(client_id="w1", timestamp=100.0)
    clients["w1"].state = STATE_MISSING
    watch.check()
    del clients["w1"]  # Locust removes a worker missing for 60 heartbeats (HEARTBEAT_DEAD_INTERNAL)
    assert watch.check() is False
    assert [(s["from_s"], s["to_s"]) for s in watch.missing_intervals()] == [(100.0, None)]


def test_workers_name_their_host_and_pid():
    worker_env, _ = master_with()
    install_process_reporting(worker_env)
    data: dict = {}
    worker_env.events.report_to_master.fire(client_id="w1", data=data)
    assert data[PROCESS_KEY] == {"host": socket.gethostname(), "pid": os.getpid()}

    environment, _ = master_with("w1", "w2")
    watch = WorkerLossWatch(environment)
    environment.events.worker_report.fire(client_id="w2", data={PROCESS_KEY: {"host": "box", "pid": 42}})
    environment.events.worker_report.fire(client_id="w1", data=data)
    environment.events.worker_report.fire(client_id="w2", data={PROCESS_KEY: {"host": "box", "pid": "x"}})
    assert watch.describe_processes() == [
        {"worker": "w1", "host": socket.gethostname(), "pid": os.getpid()},
        {"worker": "w2", "host": "box", "pid": 42},  # the first report's; later ones do not overwrite
    ]


def test_client_report_per_worker_from_its_rows_and_the_run_directory(tmp_path):
    requests = [{**make_request(T0 + t, e2e_ms=1000.0, error_kind=kind, request_id=f"{w}-{t}"), "worker_id": w}
                for w, t, kind in [("w1", 1.0, ""), ("w1", 2.0, "ttft_timeout"), ("w2", 1.5, "")]]  # fmt: skip
    run_dir = write_run_dir(tmp_path / "run", requests=requests, steps=[(2, T0, T0 + 10.0)], ended_at_s=T0 + 10.0,
                            workers=["w1", "w2"],
                            workers_missing=[{"worker": "w2", "from_s": T0 + 3.0, "noticed_s": T0 + 7.0,
                                              "to_s": T0 + 8.0}])  # fmt: skip
    write_client_load(run_dir, [client_load_row(T0 + 1, worker="w1", cpu_cores=0.25),
                                client_load_row(T0 + 2, worker="w1", cpu_cores=0.75)])  # fmt: skip
    environment, _ = master_with()
    report = ClientReport(environment)
    report.add_rows([tuple(r.get(c, "") for c in CSV_COLUMNS) for r in requests])  # as the master gets them
    summary = report.write(run_dir / "client_report.json", run_dir / "requests.csv")

    workers = {w["worker"]: w for w in json.loads((run_dir / "client_report.json").read_text())["workers"]}
    assert (workers["w1"]["requests"], workers["w1"]["ok"], workers["w1"]["failed"]) == (2, 1, 1)
    assert (workers["w1"]["cpu_mean_percent"], workers["w1"]["cpu_max_percent"]) == (50.0, 75.0)
    assert workers["w2"]["cpu_mean_percent"] is None and workers["w2"]["requests"] == 1
    assert workers["w2"]["missing"] == [{"from_s": T0 + 3.0, "to_s": T0 + 8.0, "until": "back", "missing_s": 5.0}]
    text = format_summary(summary, T0)
    assert "per worker (requests from requests.csv" in text
    assert "worker missing: w2 sent no heartbeat" in text and "(5.0 s), then came back" in text
    assert "per worker" not in format_summary(summary)  # without the run's start: no table


def test_client_report_survives_a_run_directory_it_cannot_read(tmp_path):
    run_dir = write_run_dir(tmp_path / "run", requests=[make_request(T0 + 1.0)], steps=[(1, T0, T0 + 10.0)])
    meta = json.loads((run_dir / RUN_JSON).read_text())
    (run_dir / RUN_JSON).write_text(json.dumps({**meta, "workers_missing": "garbage"}))
    environment, _ = master_with()
    report = ClientReport(environment)
    report.add_rows([])
    summary = report.summary(run_dir / "requests.csv")
    assert "workers_missing" in summary["files_error"] and "workers" not in summary
    assert summary["requests"] == 0  # the rest of the report stands


@pytest.mark.parametrize("workers", [[], ["only"]])
def test_no_per_worker_table_for_fewer_than_two_workers(workers):
    summary = {"requests": 0, "successes": 0, "failures": 0, "failures_by_kind": {}, "latency_ms": {},
               "output_tps": 0.0, "achieved_concurrency": 0.0, "ignore_eos_violations": 0,
               "workers": [{"worker": w, "requests": 1, "ok": 1, "failed": 0, "missing": []} for w in workers]}  # fmt: skip
    assert "per worker" not in format_summary(summary, T0)
