"""Fake records in bulk, for the master's ingest (``benchmarks/master_ingest.py``, ``tests/e2e``).

Each user of a worker produces ``--fake-records-per-s`` records per second (0: as fast as it
can), ``--fake-records`` in all, then idles. A record is counted in Locust's stats
(``stats.log_request``, as a request event would) and queued, already formatted, on the worker's
record shipper (:meth:`~llm_locust.master.shipping.RecordShipper.hold`): it then travels exactly
as a real one (reports, window, acknowledgements, the flush at the stop) at a fraction of a real
request's cost on the worker, so one worker can offer several times what a master can write.
Within one 10 ms tick the records are copies of one realistic row (64 token times) whose
``t_start_s + e2e_ms`` is the tick's wall clock: the master's lag is measured from it.
"""

from __future__ import annotations

import time

import gevent
from locust import User, events, task

import llm_locust.plugin  # noqa: F401  (options, record shipping, run directory)
from llm_locust.client.record import RequestRecord
from llm_locust.master.runwriter import RequestLines

TICK_S = 0.01
E2E_MS = 1300.0


@events.init_command_line_parser.add_listener
def _options(parser, **_kwargs) -> None:
    parser.add_argument("--fake-records-per-s", type=float, default=0.0, help="per user; 0: as fast as possible")
    parser.add_argument("--fake-records", type=int, default=100_000, help="per user, in all")
    parser.add_argument("--fake-tokens", type=int, default=64, help="token events per fake record")


def template(index: int, worker_id: str, tokens: int = 64) -> tuple[tuple, str]:
    """One realistic row ending now, and its ``requests.csv`` line."""
    now = time.time()
    record = RequestRecord(
        request_id=f"{worker_id[-8:]}-{index}", worker_id=worker_id, name="chat", t_start_s=now - E2E_MS / 1000.0,
        headers_ms=5.0, ttft_ms=40.1, e2e_ms=E2E_MS, prompt_tokens=12.0, output_tokens=64, tokens_source="usage",
        content_events=tokens, finish_reason="length", status_code=200, first_answer_ms=40.1, sse_events=tokens + 3,
        token_times_us=" ".join(str(40100 + 19990 * k) for k in range(tokens)), max_tokens=tokens,
        response_id=f"chatcmpl-{index:016x}",
    )  # fmt: skip
    row = record.to_row()
    return row, RequestLines().line(row)


class FakeRecordUser(User):
    @task
    def produce(self) -> None:
        options = self.environment.parsed_options
        shipper = self.environment.llm_record_shipper
        worker_id = getattr(self.environment.runner, "client_id", None) or "local"
        log = self.environment.stats.log_request
        per_tick = options.fake_records_per_s * TICK_S
        left, owed, tick, next_t = options.fake_records, 0.0, 0, time.monotonic()
        began = time.perf_counter()
        while left > 0:
            owed += per_tick if per_tick > 0 else 2000
            count = min(left, int(owed))
            owed -= count
            if count:
                row, line = template(tick, worker_id, options.fake_tokens)
                for _ in range(count):
                    log("POST", "chat", E2E_MS, 0)
                shipper.hold([row] * count, [line] * count)
                left -= count
            tick += 1
            next_t += TICK_S
            gevent.sleep(max(0.0, next_t - time.monotonic()) if per_tick > 0 else 0)
        took_s = time.perf_counter() - began
        print(f"fake records: {options.fake_records} in {took_s:.3f} s", flush=True)
        while True:  # done: idle until the test stops
            gevent.sleep(1.0)
