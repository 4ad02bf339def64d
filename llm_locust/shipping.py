"""Moving request records from the users to the master's run directory.

A listener on Locust's ``request`` event picks ``context["llm_record"]`` out of every request
event. On a worker, records wait in a buffer and ride the next ``report_to_master`` message —
the same message that carries Locust's own stats, so ``requests.csv`` and Locust's request
count agree by construction (the final report, sent when a worker quits, included). On the master,
``worker_report`` hands them to the sink; a standalone process hands them over directly.
"""

from __future__ import annotations

from collections.abc import Callable

from locust.runners import MasterRunner, WorkerRunner

REPORT_KEY = "llm_records"
"""Key of the record batch inside a worker report."""


class RecordShipper:
    """Listener set that delivers every record's row to ``sink`` on the master (or standalone).

    Parameters
    ----------
    environment : locust.env.Environment
        Whose events to listen to; its runner decides the role.
    sink : callable(list of tuple) -> None, optional
        Receives batches of rows (:meth:`RequestRecord.to_row`). Required on a master or
        standalone process (here or through :meth:`add_sink`), ignored on a worker.
    """

    def __init__(self, environment, sink: Callable[[list[tuple]], None] | None) -> None:
        self._buffer: list[tuple] = []
        self._sinks: list[Callable[[list[tuple]], None]] = [sink] if sink is not None else []
        runner = environment.runner
        self.role = "worker" if isinstance(runner, WorkerRunner) else "master" if isinstance(runner, MasterRunner) else "local"
        if self.role == "worker":
            environment.events.request.add_listener(self._on_request_buffer)
            environment.events.report_to_master.add_listener(self._on_report_to_master)
        elif self.role == "master":
            environment.events.worker_report.add_listener(self._on_worker_report)
        else:
            environment.events.request.add_listener(self._on_request_direct)

    def add_sink(self, sink: Callable[[list[tuple]], None]) -> None:
        """Also deliver every batch to ``sink`` (e.g. the web UI's live LLM stats), after the others."""
        self._sinks.append(sink)

    def _deliver(self, rows: list[tuple]) -> None:
        for sink in self._sinks:
            sink(rows)

    def _on_request_buffer(self, context=None, **_kwargs) -> None:
        record = (context or {}).get("llm_record")
        if record is not None:
            self._buffer.append(record.to_row())

    def _on_report_to_master(self, client_id, data) -> None:
        data[REPORT_KEY], self._buffer = self._buffer, []

    def _on_worker_report(self, client_id, data) -> None:
        rows = data.get(REPORT_KEY)
        if rows:
            self._deliver(rows)

    def _on_request_direct(self, context=None, **_kwargs) -> None:
        record = (context or {}).get("llm_record")
        if record is not None:
            self._deliver([record.to_row()])
