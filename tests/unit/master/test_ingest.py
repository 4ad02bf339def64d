"""The master's record intake (queue + writer greenlet) and the worker's window of unacknowledged records."""

from __future__ import annotations

import csv
import io
import math
from argparse import Namespace
from types import SimpleNamespace

import gevent
from locust.event import Events
from locust.runners import STATE_RUNNING, STATE_STOPPED, WorkerRunner

from llm_locust.client.record import RequestRecord
from llm_locust.master import ingest as ingest_module
from llm_locust.master.ingest import RecordIngest, latest_end_s, pack_rows, unpack_rows
from llm_locust.master.runwriter import CsvAppender
from llm_locust.master.shipping import COUNT_KEY, CSV_KEY, HELD_KEY, LAST_END_KEY, PACKED_KEY, RecordShipper
from llm_locust.wallclock import local_wall_s


def _row(i: int, end_s: float = 100.0) -> tuple:
    return (f"r{i}", end_s - 1.0, 1000.0)


def test_latest_end_is_the_largest_start_plus_e2e():
    rows = [
        RequestRecord(request_id="a", worker_id="w", name="chat", t_start_s=10.0, e2e_ms=500.0).to_row(),
        RequestRecord(request_id="b", worker_id="w", name="chat", t_start_s=9.0, e2e_ms=3000.0).to_row(),
        RequestRecord(request_id="c", worker_id="w", name="chat", t_start_s=50.0).to_row(),  # e2e NaN: no end
    ]
    assert latest_end_s(rows) == 12.0
    assert math.isnan(latest_end_s(rows[2:]))


def test_batches_are_written_in_order_in_chunks_and_acknowledged(monkeypatch):
    monkeypatch.setattr(ingest_module, "CHUNK_ROWS", 3)
    written, acks = [], []
    intake = RecordIngest(lambda rows, text, batch: written.append((list(rows), text, batch)),
                          lambda client, n: acks.append((client, n)))  # fmt: skip
    a = [(i,) for i in range(7)]
    b = [(i,) for i in range(7, 9)]
    intake.put("w1", a, "A-lines", held=5)
    intake.put("w2", b, None, held=0)
    assert intake.queued_records == 9 and intake.peak_held_records == 5
    gevent.sleep(0.05)
    assert [rows for rows, _, _ in written] == [a[0:3], a[3:6], a[6:7], b]
    assert [text for _, text, _ in written] == ["A-lines", "", "", None]  # the lines go with the first chunk only
    assert [batch for _, _, batch in written] == [7, 7, 7, 2]
    assert acks == [("w1", 7), ("w2", 2)]
    assert intake.records == 9 and intake.queued_records == 0


def test_the_writer_yields_between_chunks_so_timers_fire_during_a_large_batch(monkeypatch):
    monkeypatch.setattr(ingest_module, "CHUNK_ROWS", 10)
    order = []
    intake = RecordIngest(lambda rows, text, batch: order.append("chunk"))
    intake.put("w", [(i,) for i in range(100)], None)
    gevent.spawn(lambda: order.append("timer"))
    gevent.sleep(0.05)
    assert order.count("chunk") == 10
    assert 0 < order.index("timer") < 9  # ran between two chunks, not after the whole batch


def test_drain_finishes_a_batch_cut_between_chunks_without_repeating_rows(monkeypatch):
    monkeypatch.setattr(ingest_module, "CHUNK_ROWS", 2)
    seen = []
    intake = RecordIngest(lambda rows, text, batch: seen.extend(rows))
    intake.put("w", [(i,) for i in range(9)], None)
    intake.put("w", [(i,) for i in range(9, 12)], None)
    gevent.sleep(0)  # the writer starts: one chunk, then it yields
    gevent.sleep(0)
    assert 0 < len(seen) < 12
    intake.drain()
    assert seen == [(i,) for i in range(12)]
    assert intake.describe()["records"] == 12


def test_a_packed_batch_is_decoded_chunk_by_chunk_as_tuples_acknowledged_with_its_count(monkeypatch):
    monkeypatch.setattr(ingest_module, "CHUNK_ROWS", 3)
    written, acks = [], []
    intake = RecordIngest(lambda rows, text, batch: written.append((rows, text, batch)),
                          lambda client, n: acks.append((client, n)))  # fmt: skip
    rows = [RequestRecord(request_id=f"r{i}", worker_id="w1", name="chat", t_start_s=10.0 + i, e2e_ms=500.0).to_row()
            for i in range(7)]  # fmt: skip
    blobs = pack_rows(rows)
    assert len(blobs) == 3
    intake.put("w1", [], "lines", held=0, packed=blobs, packed_rows=7)
    assert intake.queued_records == 7
    intake.drain()
    assert [len(chunk) for chunk, _, _ in written] == [3, 3, 1]
    assert repr([row for chunk, _, _ in written for row in chunk]) == repr(rows)
    assert [text for _, text, _ in written] == ["lines", "", ""] and {batch for _, _, batch in written} == {7}
    assert acks == [("w1", 7)] and intake.records == 7 and intake.queued_records == 0
    lag_s = intake.describe()["last_lag_s"]  # from the latest end, 16.5 s; rounded to 1 ms
    assert local_wall_s() - 16.5 - 1.0 < lag_s <= local_wall_s() - 16.5 + 0.001


class _Client:
    def __init__(self) -> None:
        self.sent = []

    def send(self, message) -> None:
        self.sent.append(message)


def _worker(window: int):
    runner = WorkerRunner.__new__(WorkerRunner)  # no sockets: only what the shipper uses
    runner.custom_messages = {}
    runner.greenlet = None  # Locust's __del__ reads it
    runner.client = _Client()
    runner.client_id = "w1"
    runner.state = STATE_RUNNING
    environment = SimpleNamespace(events=Events(), runner=runner, parsed_options=Namespace(records_window=window),
                                  stop_timeout=0.0)  # fmt: skip
    return environment, RecordShipper(environment, None)


def _fire(environment, count: int) -> list[tuple]:
    rows = []
    for i in range(count):
        record = RequestRecord(request_id=f"w1-{i}", worker_id="w1", name="chat", t_start_s=1.5 + i, e2e_ms=12.25,
                               error_message='said "no", twice' if i == 1 else "")  # fmt: skip
        environment.events.request.fire(request_type="POST", name="chat", response_time=12.25, response_length=0,
                                        response=None, context={"llm_record": record}, exception=None)  # fmt: skip
        rows.append(record.to_row())
    return rows


def _csv_lines(rows: list[tuple]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    for row in rows:
        writer.writerow(["" if isinstance(v, float) and math.isnan(v) else v for v in row])
    return out.getvalue()


def _shipped(data: dict) -> str:
    """The rows of a report's packed batch, as ``repr`` (NaN cells compare equal so), checked against its count."""
    rows = [row for blob in data[PACKED_KEY] for row in unpack_rows(blob)]
    assert data[COUNT_KEY] == len(rows)
    return repr(rows)


def test_a_worker_ships_at_most_its_window_until_acknowledged_then_everything_once_stopped():
    environment, shipper = _worker(window=3)
    rows = _fire(environment, 10)

    def report() -> dict:
        data: dict = {}
        environment.events.report_to_master.fire(client_id="w1", data=data)
        return data

    first = report()
    assert _shipped(first) == repr(rows[:3]) and first[HELD_KEY] == 7
    assert first[CSV_KEY] == _csv_lines(rows[:3]).encode()  # the lines requests.csv gets, NaN empty, quotes doubled
    assert first[LAST_END_KEY] == 3.5 + 0.01225
    assert _shipped(report()) == "[]"  # nothing acknowledged yet: all held
    environment.runner.custom_messages["llm_records_ingested"][0](environment=environment,
                                                                  msg=SimpleNamespace(data=2))  # fmt: skip
    second = report()
    assert _shipped(second) == repr(rows[3:5]) and second[HELD_KEY] == 5
    environment.runner.state = STATE_STOPPED  # the last report (on quit) takes everything
    last = report()
    assert _shipped(last) == repr(rows[5:]) and last[HELD_KEY] == 0 and last[CSV_KEY] == _csv_lines(rows[5:]).encode()
    assert shipper.held == 0


def test_the_appender_takes_a_workers_lines_as_bytes_or_str_in_order(tmp_path):
    path = tmp_path / "requests.csv"
    appender = CsvAppender(path, ("a", "b"))
    appender.write_rows([(1, "x")])
    appender.write_text('2,"é, y"\r\n'.encode(), 1)
    appender.write_text("3,z\r\n", 1)
    appender.write_rows([(4, math.nan)])
    appender.close()
    assert path.read_bytes() == 'a,b\r\n1,x\r\n2,"é, y"\r\n3,z\r\n4,\r\n'.encode()
    assert appender.rows_written == 4
