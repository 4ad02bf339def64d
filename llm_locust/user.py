"""``LLMUser``: a Locust user that streams completions and measures each request.

Each task iteration sends one streamed request (closed loop: the next starts when the previous
ends), builds one :class:`~llm_locust.record.RequestRecord`, and fires exactly one Locust
``request`` event whose ``response_time`` is the E2E latency and whose
``context["llm_record"]`` carries the record for the listeners (record shipping, LLM stats).
A failure's exception reads ``"<error_kind>: <message>"`` in Locust's failure table.

The HTTP exchange is :func:`llm_locust.stream.run_exchange` on a connection from
:mod:`llm_locust.connection` (not Locust's FastHttpSession, whose reads hand a stream over in
blocks and whose retries and timeouts cannot tell a connect timeout from a stalled stream); the
record's facts come from :func:`llm_locust.accounting.fill_record`.

Timing: ``t_start_s`` is ``time.time()`` read once, when the request is sent (after any wait for
a free connection, which is ``conn_wait_ms``); every interval is ``time.perf_counter()`` from
that instant.
"""

from __future__ import annotations

import json
import time
import uuid

from locust import User, constant, task

from llm_locust.accounting import fill_record
from llm_locust.clientconfig import ClientConfig, client_config
from llm_locust.protocols import Adapter
from llm_locust.record import ErrorKind, RequestRecord
from llm_locust.stream import run_exchange


class LLMRequestError(Exception):
    """A failed LLM request, as Locust's failure table shows it: ``"<error_kind>: <message>"``."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(f"{kind.value}: {message}")
        self.kind = kind


class LLMUser(User):
    """Streams completions in a closed loop and records TTFT, E2E, tokens and failures per request.

    Options come from Locust's parsed options (see :mod:`llm_locust.options`): ``--model``,
    ``--protocol``, ``--max-tokens``, ``--ignore-eos``, ``--temperature``, ``--prompts-file``,
    ``--payload-file``, ``--api-key``, ``--include-usage``, ``--continuous-usage``,
    ``--tokenizer``, ``--keep-alive``, ``--connections`` and the ``--*-timeout-s`` options.
    Subclass it in a locustfile.
    """

    abstract = True
    wait_time = constant(0)
    request_name = "chat"

    def on_start(self) -> None:
        if not self.host:
            raise ValueError("LLMUser needs --host (e.g. --host http://127.0.0.1:8000)")
        self.config: ClientConfig = client_config(self.environment, self.host)
        self.adapter: Adapter = self.config.adapter()
        self.pool = self.config.pool()
        self._head = self.config.request_head(self.adapter.path)
        self.url = self.config.target.url.rstrip("/") + self.adapter.path
        runner = self.environment.runner
        self.worker_id = getattr(runner, "client_id", None) or "local"
        self._prompt_index = uuid.uuid4().int % len(self.config.prompts)

    def on_stop(self) -> None:
        pool = getattr(self, "pool", None)
        if pool is not None and pool is not self.config.shared_pool:
            pool.close()

    @task
    def stream_one(self) -> None:
        """One streamed request (the closed loop's iteration)."""
        prompts = self.config.prompts
        prompt = prompts[self._prompt_index % len(prompts)]
        self._prompt_index += 1
        self.send(prompt)

    def build_request(self, prompt: str) -> bytes:
        """The whole HTTP request for ``prompt`` (or the verbatim ``--payload-file`` body)."""
        body = self.config.body
        if body is None:
            body = json.dumps(self.adapter.build_body(prompt=prompt, workload=self.config.workload)).encode("utf-8")
        return (self._head + f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1") + body

    def send(self, prompt: str) -> RequestRecord:
        """Send one streamed request for ``prompt``, fire its Locust event, return its record."""
        request = self.build_request(prompt)
        config = self.config
        pool = self.pool
        conn_wait_s = pool.wait_for_slot(None)
        try:
            record = RequestRecord(
                request_id=uuid.uuid4().hex[:16], worker_id=self.worker_id, name=self.request_name,
                t_start_s=time.time(),
            )  # fmt: skip
            exchange, _ = run_exchange(pool, request, self.adapter, config.limits, config.watchdog, config.reader)
        finally:
            pool.release_slot()
        record.conn_wait_ms = conn_wait_s * 1000.0
        fill_record(
            record, exchange, max_tokens=config.max_tokens, ignore_eos=config.ignore_eos,
            count_tokens=config.count_tokens,
        )  # fmt: skip
        exception = None if record.ok else LLMRequestError(ErrorKind(record.error_kind), record.error_message)
        self.environment.events.request.fire(
            request_type="POST",
            name=self.request_name,
            response_time=record.e2e_ms,
            response_length=exchange.body_bytes,
            response=None,
            context={**self.context(), "llm_record": record},
            exception=exception,
            start_time=record.t_start_s,
            url=self.url,
        )
        return record
