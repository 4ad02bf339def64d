"""Moving rows measured on the workers to the master's run directory.

A listener on Locust's ``request`` event picks ``context["llm_record"]`` out of every request
event. On a worker, records wait in a buffer and ride the next ``report_to_master`` message —
the same message that carries Locust's own stats, so ``requests.csv`` and Locust's request
count agree (the final report, sent when a worker quits, included). On the master,
``worker_report`` hands them to a queue written by a greenlet of its own
(:mod:`llm_locust.master.ingest`); a standalone process hands them over directly. A worker's
records ride packed (:data:`PACKED_KEY`: msgpack blobs of rows, with their count and latest end),
so Locust's message loop on the master does not decode their cells: the writer does, chunk by
chunk.

Backpressure: a worker ships at most :data:`WINDOW_RECORDS` records the master has not yet
written and holds the rest for its next reports; as the test stops, the master asks every worker
to stop its users and ship what it still holds (:data:`FLUSH`), and waits for it, so a backlog
is never left to Locust's last reports (a master waits for those a few seconds at most:
:mod:`llm_locust.master.promptquit`). While records are held, ``requests.csv`` lags Locust's
count; at the end they agree. A worker lost while holding records loses those with it.

Other rows a worker measures (its own load, :mod:`llm_locust.client.load`) ride the same
messages under a key of their own (:class:`RowShipper`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

import gevent.event
from locust.runners import STATE_INIT, STATE_MISSING, STATE_STOPPED, MasterRunner, WorkerRunner

from llm_locust.master.ingest import INGESTED, RecordIngest, latest_end_s, pack_rows
from llm_locust.master.runwriter import RequestLines

logger = logging.getLogger(__name__)

REPORT_KEY = "llm_records"
"""Key of a record batch as rows inside a worker report (what :class:`RowShipper` ships; a
:class:`RecordShipper` on a worker ships :data:`PACKED_KEY` instead)."""
PACKED_KEY = "llm_records_packed"
"""Key of the record batch inside a worker report: msgpack blobs of rows
(:func:`~llm_locust.master.ingest.pack_rows`), decoded by the master's writer, not by Locust."""
COUNT_KEY = "llm_records_count"
"""Key of the number of rows in :data:`PACKED_KEY` in a worker report."""
LAST_END_KEY = "llm_records_last_end_s"
"""Key of the latest ``t_start_s + e2e_ms`` of the batch's rows in a worker report (Unix s; None when
none has one): the master's worker-loss watch reads it without decoding the rows."""
CSV_KEY = "llm_records_csv"
"""Key of the batch's ``requests.csv`` lines in a worker report: formatted on the worker, as one
UTF-8 ``bytes`` (the master appends them as they are: no decoding by Locust, no encoding by the
file); a ``str`` is taken too."""
HELD_KEY = "llm_records_held"
"""Key of the number of records the worker holds back (not yet shipped) in a worker report."""
FLUSH = "llm_records_flush"
"""Custom message master -> worker as the test stops: stop the users, ship every held record now."""
FLUSHED = "llm_records_flushed"
"""Custom message worker -> master: the held records (report data: rows, lines, 0 held)."""
FLUSH_TIMEOUT_S = 15.0
"""How long the master's stop waits for the workers' held records, s, beyond ``--stop-timeout``."""
WEB_FLUSH_WAIT_S = 2.0
"""The same wait with the web UI, where the workers cannot answer before their stop sleep ends."""
WINDOW_RECORDS = 200_000
"""Records a worker ships that the master has not yet acknowledged, at most. With one report
every 3 s (Locust's ``WORKER_REPORT_INTERVAL``) that is up to ~66,000 records/s per worker while
the master keeps up, and the master's queue holds at most this many per worker."""


def report_last_end_s(data: dict) -> float | None:
    """A worker report's :data:`LAST_END_KEY` (Unix s), or None when it is missing, not a number or
    not finite (read by the master's intake and its worker-loss watch alike)."""
    value = data.get(LAST_END_KEY)
    return float(value) if isinstance(value, float | int) and math.isfinite(value) else None


def process_role(environment) -> str:
    """``"worker"``, ``"master"`` or ``"local"`` (a standalone process), from its runner."""
    runner = environment.runner
    return "worker" if isinstance(runner, WorkerRunner) else "master" if isinstance(runner, MasterRunner) else "local"


class RowShipper:
    """Rows put on a worker (or a standalone process) delivered to sinks on the master.

    On a worker, :meth:`put` buffers and the buffer rides the next ``report_to_master`` message
    under ``key``; on the master, ``worker_report`` hands each batch to the sinks; in a
    standalone process :meth:`put` hands them over at once.

    Parameters
    ----------
    environment : locust.env.Environment
        Whose events to listen to; its runner decides the role.
    key : str
        Key of the batch inside a worker report (one per kind of row).
    sink : callable(list of tuple) -> None, optional
        Receives batches of rows. Required on a master or standalone process (here or through
        :meth:`add_sink`), ignored on a worker.
    """

    def __init__(self, environment, key: str, sink: Callable[[list[tuple]], None] | None) -> None:
        self.key = key
        self._buffer: list[tuple] = []
        self._sinks: list[Callable[[list[tuple]], None]] = [sink] if sink is not None else []
        self.role = process_role(environment)
        if self.role == "worker":
            environment.events.report_to_master.add_listener(self._on_report_to_master)
        elif self.role == "master":
            environment.events.worker_report.add_listener(self._on_worker_report)

    def add_sink(self, sink: Callable[[list[tuple]], None]) -> None:
        """Also deliver every batch to ``sink`` (e.g. the web UI's live LLM stats), after the others."""
        self._sinks.append(sink)

    def put(self, rows: list[tuple]) -> None:
        """Ship ``rows`` (a worker: with the next report; standalone: now)."""
        if self.role == "worker":
            self._buffer.extend(rows)
        else:
            self._deliver(rows)

    def _deliver(self, rows: list[tuple]) -> None:
        for sink in self._sinks:
            sink(rows)

    def _on_report_to_master(self, client_id, data) -> None:
        data[self.key], self._buffer = self._buffer, []

    def _on_worker_report(self, client_id, data) -> None:
        rows = data.get(self.key)
        if rows:
            self._deliver(rows)


class RecordShipper(RowShipper):
    """Listener set that delivers every request record's row to ``sink`` on the master (or standalone).

    On a worker each record becomes a row and its ``requests.csv`` line (formatted here, so the
    master only appends text: the CSV formatting was most of its cost per record); the rows are
    shipped packed (:data:`PACKED_KEY`, :func:`~llm_locust.master.ingest.pack_rows`). A report
    carries at most :attr:`window_records` records not yet acknowledged by the master
    (:data:`~llm_locust.master.ingest.INGESTED`) and says how many it holds back
    (:data:`HELD_KEY`); held records go with later reports, all of them once the worker has
    stopped (its last report, on quit, included), so none is lost and an overloaded master gets
    records at the pace it writes them. On the master the batches go through a
    :class:`~llm_locust.master.ingest.RecordIngest`; :meth:`drain` writes what is queued.

    Parameters
    ----------
    environment : locust.env.Environment
        Whose events to listen to; its runner decides the role.
    sink : callable(list of tuple) -> None, optional
        Receives batches of rows (:meth:`RequestRecord.to_row`). Required on a master or
        standalone process (here or through :meth:`add_sink`), ignored on a worker.
    csv_sink : callable(bytes or str, int) -> None, optional
        On the master: receives a batch's ``requests.csv`` lines as formatted by the worker and
        the number of rows, instead of ``sink`` (which still gets batches that came without).
    window_records : int
        On a worker: records shipped and not yet acknowledged, at most, unless the parsed options
        say otherwise (``--records-window``, which the master forwards with the test).
    """

    def __init__(
        self,
        environment,
        sink: Callable[[list[tuple]], None] | None,
        *,
        csv_sink: Callable[[bytes | str, int], None] | None = None,
        window_records: int = WINDOW_RECORDS,
    ) -> None:
        super().__init__(environment, REPORT_KEY, sink)
        self.environment = environment
        self._window_records = window_records
        self.in_flight = 0
        self._csv_sink = csv_sink
        self.ingest: RecordIngest | None = None
        if self.role == "worker":
            self._lines: list[str] = []
            self._line = RequestLines().line
            environment.events.request.add_listener(self._on_request_buffer)
            environment.runner.register_message(INGESTED, self._on_ingested)
            environment.runner.register_message(FLUSH, self._on_flush, concurrent=True)
        elif self.role == "master":
            self.ingest = RecordIngest(self._deliver_chunk, self._acknowledge)
            self._flushed: set[str] = set()
            self._flush_event = gevent.event.Event()
            environment.runner.register_message(FLUSHED, self._on_flushed)
            environment.events.test_stop.add_listener(self._on_test_stop)
        elif self.role == "local":
            environment.events.request.add_listener(self._on_request_direct)

    @property
    def window_records(self) -> int:
        """``--records-window`` as the master sent it with the test (read at each report), else the default."""
        return int(getattr(self.environment.parsed_options, "records_window", None) or self._window_records)

    @property
    def held(self) -> int:
        """On a worker: records waiting to be shipped."""
        return len(self._buffer)

    def _on_request_buffer(self, context=None, **_kwargs) -> None:
        record = (context or {}).get("llm_record")
        if record is not None:
            row = record.to_row()
            self._buffer.append(row)
            self._lines.append(self._line(row))

    def _on_request_direct(self, context=None, **_kwargs) -> None:
        record = (context or {}).get("llm_record")
        if record is not None:
            self._deliver([record.to_row()])

    def _on_report_to_master(self, client_id, data) -> None:
        stopped = self.environment.runner.state in (STATE_STOPPED, STATE_INIT)  # no load: ship everything
        room = len(self._buffer) if stopped else max(0, self.window_records - self.in_flight)
        data.update(self._take(min(room, len(self._buffer))))

    def hold(self, rows: list, lines: list[str]) -> None:
        """On a worker: queue rows already formatted (their ``requests.csv`` lines, one each) as if
        their request events had fired; for producers of records in bulk (benchmarks/master_ingest.py).

        Raises
        ------
        ValueError
            ``rows`` and ``lines`` differ in length.
        """
        if len(rows) != len(lines):
            raise ValueError(f"{len(rows)} rows but {len(lines)} lines")
        self._buffer.extend(rows)
        self._lines.extend(lines)

    def _take(self, count: int) -> dict:
        """Remove the oldest ``count`` held records: their rows (packed), lines and latest end, as report data."""
        rows = self._buffer[:count]
        end_s = latest_end_s(rows)
        data: dict[str, object] = {PACKED_KEY: pack_rows(rows), COUNT_KEY: count, CSV_KEY: "".join(self._lines[:count]).encode("utf-8"),
                                   LAST_END_KEY: None if math.isnan(end_s) else end_s}  # fmt: skip
        del self._buffer[:count]
        del self._lines[:count]
        self.in_flight += count
        data[HELD_KEY] = len(self._buffer)
        return data

    def _on_flush(self, environment=None, msg=None, **_kwargs) -> None:
        """The master's test is stopping: stop the users (Locust's own stop, as its quit message
        would, so no record comes after this), then ship every held record at once (a large
        backlog in the last report could come too late: the master waits for those a few seconds
        at most)."""
        runner = self.environment.runner
        runner.stop()
        runner.send_message(FLUSHED, self._take(len(self._buffer)))

    def _on_flushed(self, environment=None, msg=None, **_kwargs) -> None:
        data = getattr(msg, "data", None) or {}
        client_id = getattr(msg, "node_id", None)
        assert self.ingest is not None
        self._put(client_id, data)
        if client_id is not None:
            self._flushed.add(client_id)
        self._flush_event.set()

    def _on_test_stop(self, environment=None, **_kwargs) -> None:
        """On the master, as its test stops: have every connected worker ship what it holds, and
        wait (at most :data:`FLUSH_TIMEOUT_S`) until each has; messages and timers go on meanwhile."""
        assert self.ingest is not None
        self.ingest.mark_test_stop()
        runner = self.environment.runner
        workers = {client.id for client in runner.clients.all if client.state != STATE_MISSING}
        if not workers:
            return
        self._flushed.clear()
        for client_id in sorted(workers):
            try:
                runner.send_message(FLUSH, None, client_id=client_id)
            except Exception as exc:  # a worker gone meanwhile
                logger.debug("could not ask %s for its records: %s", client_id, exc)
                workers.discard(client_id)
        options = getattr(self.environment, "parsed_options", None)
        if getattr(options, "headless", True) is False:
            # web UI (--autostart): Locust's master sent its workers "stop", and a worker then
            # sleeps --stop-timeout in its message loop before it reads the next message, so our
            # request could only be answered after that (a 12 s ladder took 97 s): the records
            # come with the workers' reports instead; wait only briefly
            timeout_s = WEB_FLUSH_WAIT_S
        else:
            timeout_s = FLUSH_TIMEOUT_S + float(self.environment.stop_timeout or 0.0)  # the users' stop first
        deadline = time.monotonic() + timeout_s
        while not workers <= self._flushed and (remaining := deadline - time.monotonic()) > 0:
            self._flush_event.clear()
            self._flush_event.wait(timeout=remaining)
        if not workers <= self._flushed:
            logger.warning("workers %s did not ship their held records within %.0f s; their last reports may bring them",
                           sorted(workers - self._flushed), timeout_s)  # fmt: skip

    def _on_ingested(self, environment=None, msg=None, **_kwargs) -> None:
        try:
            written = int(msg.data)
        except (AttributeError, TypeError, ValueError):
            return
        self.in_flight = max(0, self.in_flight - written)

    def _on_worker_report(self, client_id, data) -> None:
        self._put(client_id, data)

    def _put(self, client_id: str | None, data: dict) -> None:
        """Queue a report's batch: packed (:data:`PACKED_KEY`) or as rows (:data:`REPORT_KEY`)."""
        assert self.ingest is not None
        self.ingest.put(client_id, data.get(self.key) or [], data.get(CSV_KEY), held=data.get(HELD_KEY),
                        packed=data.get(PACKED_KEY), packed_rows=int(data.get(COUNT_KEY) or 0),
                        last_end_s=report_last_end_s(data))  # fmt: skip

    def _deliver_chunk(self, rows: list, csv_text: bytes | str | None, batch_rows: int) -> None:
        if csv_text is not None and self._csv_sink is not None:
            if csv_text:
                self._csv_sink(csv_text, batch_rows)
            sinks = self._sinks[1:]  # the first sink writes requests.csv: done with the lines
        elif csv_text == "" and self._csv_sink is not None:
            sinks = self._sinks[1:]  # a later chunk of a batch whose lines went with its first
        else:
            sinks = self._sinks
        for sink in sinks:
            sink(rows)

    def _acknowledge(self, client_id: str, rows: int) -> None:
        try:
            self.environment.runner.send_message(INGESTED, rows, client_id=client_id)
        except Exception as exc:  # a worker gone: nothing to tell it
            logger.debug("could not acknowledge %d records to %s: %s", rows, client_id, exc)

    def drain(self) -> None:
        """On the master: write every batch received so far (the end of the run)."""
        if self.ingest is not None:
            self.ingest.drain()
