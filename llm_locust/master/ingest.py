"""The master's intake of request records: a queue and a writer greenlet, with acknowledgements.

Locust's master handles every message from its workers in one greenlet (``client_listener``,
``locust/runners.py``), heartbeats and clock pings included, and a message's listeners run
before the next message is read; timers (``-t``, the shape's ticks) run only when that greenlet
yields. Writing a large record batch inside the ``worker_report`` listener therefore held up
everything else: at 40,000 records/s the loop never yielded, ``-t`` never fired and Locust's
stats froze while ``requests.csv`` kept growing.

:class:`RecordIngest` takes a batch from the listener in O(1) (a queue) and writes it in a
greenlet of its own, :data:`CHUNK_ROWS` rows at a time, yielding to the event loop between
chunks, so messages, heartbeats and timers keep their pace whatever the record rate. When a
worker's batch is written the master tells it so (the custom message :data:`INGESTED` with the
row count); a worker ships at most a window of records not yet acknowledged and holds the rest
for its next reports (:class:`~llm_locust.master.shipping.RecordShipper`): the queue here is
bounded by the workers' windows, and an overloaded master slows the record flow, not its loop.

Packed rows: a worker ships its rows as msgpack blobs of :data:`CHUNK_ROWS` rows each
(:func:`pack_rows`), not as msgpack arrays inside Locust's report: Locust's message loop then
decodes a report's rows as a few bytes objects (it decoded every cell: a third of the master's
CPU per record, and seconds without a heartbeat read for a large batch), and the writer decodes
each chunk just before writing it (:func:`unpack_rows`: tuples, with the cyclic garbage collector
paused, as the decoded cells can hold no cycle), yielding between chunks as before.

Lag: for every written batch, now minus the latest request end (``t_start_s + e2e_ms``) in it;
:meth:`RecordIngest.describe` gives the records written, the largest and the last lag, the
deepest queue and the most records the workers held (``run.json`` ``ingest``).

Why own code: Locust has no flow control for data riding its reports.
"""

from __future__ import annotations

import gc
import logging
import math
import time
from collections import deque
from collections.abc import Callable

import gevent
import gevent.event
import msgpack

from llm_locust.client.record import COLUMN_INDEX
from llm_locust.wallclock import local_wall_s

logger = logging.getLogger(__name__)

INGESTED = "llm_records_ingested"
"""Custom message master -> worker: ``data`` is the number of that worker's records written."""
CHUNK_ROWS = 2000
"""Rows handed to the sinks between two yields to the event loop."""

_T_START = COLUMN_INDEX["t_start_s"]
_E2E = COLUMN_INDEX["e2e_ms"]


def latest_end_s(rows: list) -> float:
    """The latest ``t_start_s + e2e_ms / 1000`` of ``rows`` (Unix s; NaN when none has both)."""
    latest = -math.inf
    for row in rows:
        try:
            end = row[_T_START] + row[_E2E] / 1000.0
        except (TypeError, IndexError):
            continue
        if end > latest:  # NaN never is
            latest = end
    return latest if latest > -math.inf else math.nan


def pack_rows(rows: list) -> list[bytes]:
    """``rows`` as msgpack blobs of at most :data:`CHUNK_ROWS` rows each (a worker ships these).

    >>> unpack_rows(pack_rows([("a", 1.5, None)])[0])
    [('a', 1.5, None)]
    """
    return [msgpack.packb(rows[i : i + CHUNK_ROWS]) for i in range(0, len(rows), CHUNK_ROWS)]


def unpack_rows(blob: bytes) -> list[tuple]:
    """The rows of one blob of :func:`pack_rows`, as tuples.

    The cyclic garbage collector is paused meanwhile: the cells are numbers, strings and None,
    which can form no cycle, and its passes over the new tuples cost a third of the decoding.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        rows = msgpack.unpackb(blob, use_list=False)
    finally:
        if enabled:
            gc.enable()
    return list(rows)


class RecordIngest:
    """Queue of record batches from the workers, written by a greenlet (see the module docstring).

    Parameters
    ----------
    deliver : callable(rows, csv_text, batch_rows) -> None
        Writes one chunk: its rows (tuples in ``requests.csv`` column order) and, when the worker
        formatted them, the whole batch's ``requests.csv`` lines (UTF-8 bytes, or str) with its first chunk and "" with
        the others (None when it did not), and the batch's row count. Called from the writer
        greenlet, or from :meth:`drain`.
    acknowledge : callable(client_id, rows) -> None, optional
        Called once a worker's batch is written (the master sends :data:`INGESTED`).
    """

    def __init__(
        self,
        deliver: Callable[[list, bytes | str | None, int], None],
        acknowledge: Callable[[str, int], None] | None = None,
    ) -> None:
        self._deliver = deliver
        self._acknowledge = acknowledge
        # [client_id, chunks, csv_text, chunks written, rows said, latest end s, rows written, end known]
        self._queue: deque[list] = deque()
        self._queued_rows = 0
        self._ready = gevent.event.Event()
        self._writer: gevent.Greenlet | None = None
        self.records = 0
        self.max_lag_s = 0.0
        self.last_lag_s = math.nan
        self.peak_queue_records = 0
        self.peak_held_records = 0
        self.held_by_worker: dict[str, int] = {}
        self.busy_s = 0.0
        self.records_at_test_stop: int | None = None

    def put(
        self,
        client_id: str | None,
        rows: list,
        csv_text: bytes | str | None = None,
        *,
        held: int | None = None,
        packed: list[bytes] | None = None,
        packed_rows: int = 0,
        last_end_s: float | None = None,
    ) -> None:
        """Queue one worker's batch (returns at once).

        Parameters
        ----------
        client_id : str or None
            The worker (None: nobody to acknowledge).
        rows : list of tuple
            The batch's rows, unless it came ``packed``.
        csv_text : bytes, str or None
            The batch's ``requests.csv`` lines (UTF-8 bytes or str), when the worker formatted them.
        held : int, optional
            Records that worker still holds.
        packed : list of bytes, optional
            The batch as :func:`pack_rows` blobs (then ``rows`` is ignored).
        packed_rows : int
            How many rows ``packed`` holds, as the worker counted them (acknowledged so; 0: the rows
            decoded are).
        last_end_s : float, optional
            The batch's latest request end as the worker computed it (:func:`latest_end_s`, Unix
            s): the lag is taken from it, not recomputed from the rows here.
        """
        if held is not None and client_id is not None:
            self.held_by_worker[client_id] = held
            self.peak_held_records = max(self.peak_held_records, sum(self.held_by_worker.values()))
        if packed:
            chunks: list = list(packed)
            count = packed_rows
        else:
            chunks = [rows[i : i + CHUNK_ROWS] for i in range(0, len(rows), CHUNK_ROWS)]
            count = len(rows)
        if not chunks:
            return
        known = last_end_s is not None and math.isfinite(last_end_s)
        self._queue.append([client_id, chunks, csv_text, 0, count, last_end_s if known else -math.inf, 0, known])
        self._queued_rows += count
        self.peak_queue_records = max(self.peak_queue_records, self._queued_rows)
        self._ready.set()
        if self._writer is None or self._writer.dead:
            self._writer = gevent.spawn(self._run)

    @property
    def queued_records(self) -> int:
        """Records received and not yet written."""
        return self._queued_rows

    def _run(self) -> None:
        while True:
            if not self._queue:
                self._ready.clear()
                self._ready.wait()
                continue
            self._write_one(yield_between=True)

    def _write_one(self, *, yield_between: bool) -> None:
        """Write the oldest batch from where it stopped (a batch cut by :meth:`drain` goes on there)."""
        item = self._queue[0]
        client_id, chunks, csv_text, done, count, _, _, end_known = item
        while done < len(chunks):
            # the lines go whole with the first chunk; "" tells the later chunks' sinks they are written
            started = time.perf_counter()
            chunk = chunks[done]
            rows = unpack_rows(chunk) if isinstance(chunk, bytes) else chunk
            self._deliver(rows, csv_text if done == 0 or csv_text is None else "", count)
            self.busy_s += time.perf_counter() - started
            chunks[done] = None  # written: its memory goes now, not with the batch
            done += 1
            item[3] = done
            if not end_known and (end_s := latest_end_s(rows)) > item[5]:  # NaN never is
                item[5] = end_s
            item[6] += len(rows)
            self._queued_rows -= len(rows)
            self.records += len(rows)
            if yield_between and done < len(chunks):
                gevent.sleep(0)
        self._queue.popleft()
        self._queued_rows -= count - item[6]  # a packed batch whose rows were not the count it said
        lag_s = local_wall_s() - item[5]
        if math.isfinite(lag_s):
            self.last_lag_s = lag_s
            self.max_lag_s = max(self.max_lag_s, lag_s)
        if client_id is not None and self._acknowledge is not None:
            self._acknowledge(client_id, count or item[6])
        if yield_between:
            gevent.sleep(0)

    def drain(self) -> None:
        """Write everything queued now, without yielding (the end of the run)."""
        if self._writer is not None and not self._writer.dead:
            self._writer.kill(block=True)  # it yields only between chunks: a cut batch goes on below
        self._writer = None
        while self._queue:
            self._write_one(yield_between=False)

    def mark_test_stop(self) -> None:
        """Note how many records were written when the test began to stop."""
        self.records_at_test_stop = self.records

    def describe(self) -> dict:
        """``run.json`` ``ingest``: records written (in all, and when the test began to stop), the
        writer's busy time (s: decoding packed rows and the sinks) and its rate over it
        (records/s), lag (s), the deepest queue and the most records the workers held."""
        return {
            "records": self.records,
            "records_at_test_stop": self.records_at_test_stop,
            "busy_s": round(self.busy_s, 3),
            "records_per_busy_s": round(self.records / self.busy_s) if self.busy_s > 0 else None,
            "max_lag_s": round(self.max_lag_s, 3),
            "last_lag_s": None if math.isnan(self.last_lag_s) else round(self.last_lag_s, 3),
            "peak_queue_records": self.peak_queue_records,
            "peak_held_records": self.peak_held_records,
        }
