"""Workers the master lost mid-run (killed, host gone): when, and what of theirs was never shipped.

Locust's master hears a heartbeat from each worker every second (``HEARTBEAT_INTERVAL``) and,
after three missed ones (``HEARTBEAT_LIVENESS``), marks the worker ``missing``: it drops the
worker's users from its count and from the user dispatcher, but re-dispatches them over the
workers left only with ``--enable-rebalancing`` (``locust/runners.py``, ``heartbeat_worker``).
The ladder and baseline shapes do that themselves (:mod:`llm_locust.master.shapes`); this module
records the loss.

A worker ships its records with its stats report every ``WORKER_REPORT_INTERVAL`` (3 s), so what
a lost worker measured after its last report is the only loss, and Locust never counted those
requests either (``requests.csv`` still equals Locust's count). Each loss is kept as::

    {"worker": <client id>, "lost_at_s": <Unix s>, "last_record_s": <Unix s or null>}

``lost_at_s`` is when the master last heard from it (its last heartbeat, or its last report if
later); it died within one heartbeat interval after that. ``last_record_s`` is the latest end
(``t_start_s + e2e_ms``) of the records the master received from it, null when none came.
:attr:`WorkerLossWatch.last_report_s` keeps when its last report arrived, for the client report.

A worker Locust marks missing may come back: its next heartbeat "self-heals" it (Locust puts it
back in the dispatcher) and the loss above is withdrawn. Every spell is kept all the same, as
run.json ``workers_missing``::

    {"worker": <client id>, "from_s": <Unix s>, "noticed_s": <Unix s>, "to_s": <Unix s or null>}

``from_s`` is ``lost_at_s`` above, ``noticed_s`` when this watch saw Locust's ``missing`` state
(4-5 s after ``from_s``, plus up to one poll), ``to_s`` the arrival of its first heartbeat after
that (Locust's ``heartbeat_sent`` event, fired once it has healed the worker), null while it has
not come back - in the report, the run's end. A spell shorter than one poll (marked missing and
healed within :data:`POLL_INTERVAL_S`) is not seen.

Each worker also names its host and process id in its reports (:func:`install_process_reporting`,
kept as :attr:`WorkerLossWatch.processes`, run.json ``worker_processes``): Locust's client id
holds the host name only.

Why own code: Locust fires no event when a worker goes missing; this polls the master's
``clients`` (the same table its heartbeat checker updates) once a second.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable

import gevent
from locust.runners import STATE_MISSING

from llm_locust.client.record import CSV_COLUMNS
from llm_locust.master.shipping import REPORT_KEY, report_last_end_s
from llm_locust.wallclock import local_wall_s

logger = logging.getLogger(__name__)

POLL_INTERVAL_S = 1.0
"""How often the master's worker table is read, s."""
PROCESS_KEY = "llm_process"
"""Key of the worker's ``{"host", "pid"}`` inside its report to the master."""

_T_START = CSV_COLUMNS.index("t_start_s")
_E2E = CSV_COLUMNS.index("e2e_ms")


def _row_end_s(row) -> float | None:
    try:
        end = float(row[_T_START]) + float(row[_E2E]) / 1000.0
    except (TypeError, ValueError):
        return None
    return end if end == end else None  # NaN e2e: no end


class WorkerLossWatch:
    """Notices, on the master, each worker Locust marked ``missing``, and records the loss.

    Parameters
    ----------
    environment : locust.env.Environment
        The master's; its runner's ``clients`` table is read, its ``heartbeat_sent`` and
        ``worker_report`` events listened to.
    on_change : callable() -> None, optional
        Called (in the watch's greenlet) after a loss is recorded or withdrawn.
    """

    def __init__(self, environment, on_change: Callable[[], None] | None = None) -> None:
        self.environment = environment
        self.on_change = on_change
        self.last_heard_s: dict[str, float] = {}
        self.last_report_s: dict[str, float] = {}
        self.last_record_s: dict[str, float] = {}
        self.processes: dict[str, dict] = {}
        """Worker id -> ``{"host", "pid"}`` as the worker reported them."""
        self.intervals: list[dict] = []
        """Every missing spell (run.json ``workers_missing`` entries), in the order noticed."""
        self._open: dict[str, dict] = {}  # worker -> its spell in ``intervals`` still open
        self._back_s: dict[str, float] = {}  # worker -> first heartbeat after its spell opened
        self._greenlet = None
        environment.events.heartbeat_sent.add_listener(self._on_heartbeat)
        environment.events.worker_report.add_listener(self._on_report)

    def _on_heartbeat(self, client_id, timestamp, **_kwargs) -> None:
        self.last_heard_s[client_id] = max(self.last_heard_s.get(client_id, 0.0), float(timestamp))
        if client_id in self._open:
            self._back_s.setdefault(client_id, float(timestamp))

    @property
    def lost(self) -> dict[str, dict]:
        """Workers missing now (an open spell), in run.json's ``workers_lost`` format, by id."""
        return {worker: {"worker": worker, "lost_at_s": interval["from_s"],
                         "last_record_s": self.last_record_s.get(worker)}
                for worker, interval in self._open.items()}  # fmt: skip

    def _on_report(self, client_id, data, **_kwargs) -> None:
        now = local_wall_s()
        self.last_report_s[client_id] = now
        self.last_heard_s[client_id] = max(self.last_heard_s.get(client_id, 0.0), now)
        process = data.get(PROCESS_KEY)
        if isinstance(process, dict) and client_id not in self.processes:
            pid = process.get("pid")
            self.processes[client_id] = {"host": str(process.get("host") or ""),
                                         "pid": pid if isinstance(pid, int) and pid > 0 else None}  # fmt: skip
        ends = [end for end in map(_row_end_s, data.get(REPORT_KEY) or ()) if end is not None]
        if (last_end_s := report_last_end_s(data)) is not None:
            ends.append(last_end_s)  # a packed batch's latest end, as its worker read it
        if ends:
            self.last_record_s[client_id] = max(self.last_record_s.get(client_id, ends[0]), max(ends))

    def check(self) -> bool:
        """Read the worker table once: record newly missing workers, withdraw healed ones.

        Returns
        -------
        bool
            Whether :attr:`lost` changed.
        """
        clients = getattr(self.environment.runner, "clients", None)
        if clients is None:
            return False
        changed = False
        now = local_wall_s()
        missing = {client.id for client in clients.all if client.state == STATE_MISSING}
        for worker in sorted(missing - set(self._open)):
            interval = {"worker": worker, "from_s": self.last_heard_s.get(worker, now), "noticed_s": now, "to_s": None}
            self.intervals.append(interval)
            self._open[worker] = interval
            self._back_s.pop(worker, None)
            logger.warning("worker %s lost (no heartbeat since %.1f s ago); its users go to the workers left; "
                           "requests it had not shipped yet (at most its last %.0f s) are not recorded",
                           worker, now - interval["from_s"], shipping_interval_s())  # fmt: skip
            changed = True
        for worker in [w for w in self._open if w in clients and w not in missing]:
            interval = self._open.pop(worker)
            interval["to_s"] = min(now, self._back_s.pop(worker, now))
            logger.warning("worker %s is back (heartbeats again) after %.1f s missing: not counted as lost",
                           worker, interval["to_s"] - interval["from_s"])  # fmt: skip
            changed = True
        return changed

    def losses(self) -> list[dict]:
        """The losses, in run.json's ``workers_lost`` format, by time (``last_record_s`` brought
        up to date: a report may have come in after the loss was noticed)."""
        return sorted(self.lost.values(), key=lambda loss: loss["lost_at_s"])

    def missing_intervals(self) -> list[dict]:
        """Every missing spell, closed or open, in run.json's ``workers_missing`` format (copies),
        by ``from_s``."""
        return sorted((dict(interval) for interval in self.intervals), key=lambda i: (i["from_s"], i["worker"]))

    def describe_processes(self) -> list[dict]:
        """run.json ``worker_processes``: ``[{"worker", "host", "pid"}]`` by worker id."""
        return [{"worker": worker, **process} for worker, process in sorted(self.processes.items())]

    def start(self) -> None:
        """Poll every :data:`POLL_INTERVAL_S` until :meth:`stop`."""
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None
        self.check()

    def _run(self) -> None:
        while True:
            gevent.sleep(POLL_INTERVAL_S)
            try:
                if self.check() and self.on_change is not None:
                    self.on_change()
            except Exception:  # never let bookkeeping stop the run
                logger.exception("checking for lost workers failed")


def shipping_interval_s() -> float:
    """How often a worker ships its records to the master (Locust's ``WORKER_REPORT_INTERVAL``), s."""
    from locust import runners

    return float(runners.WORKER_REPORT_INTERVAL)


def install_process_reporting(environment) -> None:
    """On a worker: add its host name and process id to every report it sends the master."""
    process = {"host": socket.gethostname(), "pid": os.getpid()}

    def add_process(client_id, data) -> None:
        data[PROCESS_KEY] = process

    environment.events.report_to_master.add_listener(add_process)
