"""``LLMUser``: a Locust user that streams completions and measures each request.

Each task iteration sends one streamed request (closed loop: the next starts when the previous
ends), builds one :class:`~llm_locust.client.record.RequestRecord`, and fires exactly one Locust
``request`` event whose ``response_time`` is the E2E latency and whose
``context["llm_record"]`` carries the record for the listeners (record shipping, LLM stats).
A failure's exception reads ``"<error_kind>: <message>"`` in Locust's failure table.

The HTTP exchange is :func:`llm_locust.client.stream.run_exchange` on a connection from
:mod:`llm_locust.client.connection` (not Locust's FastHttpSession, whose reads hand a stream over in
blocks and whose retries and timeouts cannot tell a connect timeout from a stalled stream); the
record's facts come from :func:`llm_locust.client.accounting.fill_record`.

Timing: ``t_start_s`` is the wall clock on the master's clock (:mod:`llm_locust.client.clock`) read once, when the request is sent (after any wait for
a free connection, which is ``conn_wait_ms``); every interval is ``time.perf_counter()`` from
that instant.

Faults:

- After a connection-level failure (refused, reset, connect timeout) or a rejection (429, 5xx)
  the user pauses before its next request (:mod:`llm_locust.client.backoff`: 0.1 s doubling to
  2 s, with jitter, or the server's ``Retry-After`` up to 10 s, per user, ended by the first
  request answered otherwise; ``--backoff false`` turns it off). The pause is decided before the
  request's event fires and recorded as its ``backoff_ms``. A graceful stop waits at most that
  pause.
- A request in flight when Locust stops the user (``GreenletExit``: a time limit, Ctrl-C, a stop
  timeout that ran out) is recorded as ``interrupted`` with what it had received, and its
  Locust event is fired, before the user ends; so every request sent is in ``requests.csv`` and
  in Locust's count.
- Once the runner has begun stopping (state ``cleanup``: Locust's stop, between
  ``test_stopping`` and the users being killed) no new request is sent.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os

import gevent
import orjson
from locust import User, constant, task
from locust.exception import StopUser
from locust.runners import STATE_CLEANUP

from llm_locust.client.accounting import fill_record
from llm_locust.client.backoff import Backoff, retry_after_s
from llm_locust.client.clock import master_wall_s
from llm_locust.client.config import ClientConfig, client_config
from llm_locust.client.protocols import Adapter
from llm_locust.client.record import ErrorKind, RequestRecord
from llm_locust.client.stream import run_exchange
from llm_locust.client.workload import CyclingPrompts, WorkItem
from llm_locust.client.workload.session import SessionPlayer


def _json_body(body: dict) -> bytes:
    """The request body as JSON bytes: ``orjson`` (0.2 µs where the stdlib takes 3 per request,
    measured on a chat body), the stdlib for what orjson refuses (an integer beyond 64 bits, a
    non-string key: a ``--extra-body`` can hold them). Non-ASCII text goes as UTF-8, not as
    ``\\u`` escapes: the same JSON value.

    Raises
    ------
    TypeError, ValueError
        A value JSON cannot hold (as ``json.dumps``).
    """
    try:
        return orjson.dumps(body)
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(body).encode("utf-8")


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
    _turn: int = 0
    _answer: str = ""
    scheduled_s: float = math.nan
    """Scheduled send time of the next request (master clock, Unix s), recorded as ``scheduled_s``;
    NaN in a closed loop (set by :class:`~llm_locust.client.rateuser.RateUser`)."""
    trace_row: int = -1
    """Index of the trace row the next request replays (``--trace``), -1 for none."""
    trace_session_id: str = ""
    """That row's session id ("" for none), recorded as ``session_id``."""

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
        self.backoff = Backoff(enabled=self.config.backoff)
        self.sessions: SessionPlayer | None = None
        """This user's multi-turn sessions (``--session-turns``), None for single turns."""

    def on_stop(self) -> None:
        pool = getattr(self, "pool", None)
        if pool is not None and pool is not self.config.shared_pool:
            pool.close()

    @task
    def stream_one(self) -> None:
        """One streamed request (the closed loop's iteration), then the pause
        :class:`~llm_locust.client.backoff.Backoff` asked for (the record's ``backoff_ms``).

        Raises
        ------
        StopUser
            The runner has begun stopping (no new request is sent then).
        """
        if self.stopping():
            raise StopUser()
        if not self.ready_to_send():
            return
        source = self.config.source
        if source is None:  # a config built by hand (tests): the prompt set, in order
            source = CyclingPrompts(self.config.prompts, max_tokens=self.config.workload.max_tokens)
            self.config.source = source
        if self.config.session_turns and self.sessions is None:
            self.sessions = SessionPlayer(
                source, turns=self.config.session_turns, think_time_s=self.config.think_time_s
            )
        sessions = self.sessions
        if sessions is None:
            item = self.next_item(source)
            record = self.send(item.prompt, max_tokens=item.max_tokens, prompt_tokens_target=item.prompt_tokens_target)
        else:
            item, self._turn = sessions.next_turn()
            record = self.send(item.prompt, max_tokens=item.max_tokens, prompt_tokens_target=item.prompt_tokens_target)
            sessions.answered(self._answer, ok=record.ok)
        pause_s = max(record.backoff_ms / 1000.0, sessions.pause_s() if sessions is not None else 0.0)
        if pause_s > 0:
            gevent.sleep(pause_s)

    def ready_to_send(self) -> bool:
        """Whether this iteration sends a request (always, in a closed loop)."""
        return True

    def next_item(self, source) -> WorkItem:
        """This iteration's request from ``source`` (its next, in a closed loop)."""
        return source.next_request()

    def stopping(self) -> bool:
        """Whether this process's runner is stopping its users (Locust's ``cleanup`` state)."""
        runner = self.environment.runner
        return runner is not None and runner.state == STATE_CLEANUP

    def build_request(self, prompt: str | list[dict], max_tokens: int | None = None) -> bytes:
        """The whole HTTP request for ``prompt`` (text or chat messages) asking for ``max_tokens``
        (default ``--max-tokens``), or the verbatim ``--payload-file`` body."""
        body = self.config.body
        if body is None:
            workload = self.config.workload
            if max_tokens is not None and max_tokens != workload.max_tokens:
                workload = dataclasses.replace(workload, max_tokens=max_tokens)
            body = _json_body(self.adapter.build_body(prompt=prompt, workload=workload))
        return (self._head + f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1") + body

    def send(
        self, prompt: str | list[dict], *, max_tokens: int | None = None, prompt_tokens_target: float = math.nan
    ) -> RequestRecord:
        """Send one streamed request for ``prompt``, fire its Locust event, return its record.

        ``max_tokens`` (default ``--max-tokens``) is what the body asks for;
        ``prompt_tokens_target`` (tokens, NaN for none) goes to the record.

        Raises
        ------
        GreenletExit
            Locust stopped the user while the request was in flight: raised again after the
            request was recorded (``interrupted``) and its event fired.
        """
        request = self.build_request(prompt, max_tokens)
        config = self.config
        requested_max_tokens = max_tokens if config.body is None and max_tokens is not None else config.max_tokens
        pool = self.pool
        conn_wait_s = pool.wait_for_slot(None)
        try:
            record = RequestRecord(
                request_id=os.urandom(8).hex(), worker_id=self.worker_id, name=self.request_name,
                t_start_s=master_wall_s(self.environment), scheduled_s=self.scheduled_s,
            )  # fmt: skip
            exchange, _ = run_exchange(pool, request, self.adapter, config.limits, config.watchdog, config.reader)
        finally:
            pool.release_slot()
        record.conn_wait_ms = conn_wait_s * 1000.0
        record.prompt_tokens_target = prompt_tokens_target
        record.trace_row = self.trace_row
        if self.trace_session_id:
            record.session_id = self.trace_session_id
        if self.sessions is not None:
            record.session_id, record.turn = self.sessions.session_id, self._turn
            self._answer = "".join(exchange.texts)
        fill_record(
            record, exchange, max_tokens=requested_max_tokens, ignore_eos=config.ignore_eos,
            count_tokens=config.count_tokens,
        )  # fmt: skip
        if exchange.interrupt is None:  # the user ends after an interrupted request: no pause
            pause_s = self.backoff.after(record.error_kind, retry_after_s(exchange.retry_after))
            record.backoff_ms = pause_s * 1000.0
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
        if exchange.interrupt is not None:
            raise exchange.interrupt
        return record
