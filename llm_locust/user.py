"""``LLMUser``: a Locust user that streams completions and measures each request.

Each task iteration sends one streamed request (closed loop: the next starts when the previous
ends), builds one :class:`~llm_locust.record.RequestRecord`, and fires exactly one Locust
``request`` event whose ``response_time`` is the E2E latency (with ``stream=True`` Locust would
otherwise take it when the headers arrive) and whose ``context["llm_record"]`` carries the record
for the listeners (record shipping, LLM stats).

Timing: ``t_start_s`` is ``time.time()`` read once, just before the request is sent; every
interval is ``time.perf_counter()`` from that instant. TTFT is stamped on the first SSE event with
non-empty generated text (never the role-only or usage-only chunks).
"""

from __future__ import annotations

import json
import math
import socket
import time
import uuid

from gevent import Timeout as GeventTimeout
from locust import constant, task
from locust.contrib.fasthttp import FastHttpUser

from llm_locust.protocols import Adapter, Workload, get_adapter
from llm_locust.models import first_served_model
from llm_locust.prompts import load_prompts
from llm_locust.record import ErrorKind, RequestRecord, TokensSource
from llm_locust.stream import StreamClosedError, iter_body_chunks, iter_timed_events

MAX_ERROR_MESSAGE_CHARS = 200


class LLMRequestError(Exception):
    """A failed LLM request, as Locust's failure table shows it: ``"<error_kind>: <message>"``."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(f"{kind.value}: {message}")
        self.kind = kind


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_ERROR_MESSAGE_CHARS else text[: MAX_ERROR_MESSAGE_CHARS - 1] + "…"


def classify_exception(exc: BaseException, *, got_headers: bool) -> ErrorKind:
    """Error kind of an exception raised while connecting or reading.

    A timeout before the response headers is ``connect_timeout`` (no byte of the answer yet),
    after them ``stall_timeout`` (the gap between two reads exceeded the network timeout).
    """
    if isinstance(exc, (socket.timeout, TimeoutError, GeventTimeout)):
        return ErrorKind.STALL_TIMEOUT if got_headers else ErrorKind.CONNECT_TIMEOUT
    return ErrorKind.CONNECTION_ERROR


class LLMUser(FastHttpUser):
    """Streams chat completions in a closed loop and records TTFT, E2E and tokens per request.

    Options come from Locust's parsed options (see :mod:`llm_locust.options`): ``--model``,
    ``--protocol``, ``--max-tokens``, ``--ignore-eos``, ``--temperature``, ``--prompts-file``,
    ``--api-key``. Subclass it in a locustfile (set ``abstract = False`` implicitly by subclassing).
    """

    abstract = True
    wait_time = constant(0)
    network_timeout = 120.0
    connection_timeout = 30.0
    request_name = "chat"

    def on_start(self) -> None:
        options = self.environment.parsed_options
        self.adapter: Adapter = get_adapter(options.protocol)
        self.prompts = load_prompts(options.prompts_file or None)
        self.headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "Accept-Encoding": "identity",
        }
        if options.api_key:
            self.headers["Authorization"] = f"Bearer {options.api_key}"
        self.workload = Workload(
            model=options.model or first_served_model(self.host, api_key=options.api_key),
            max_tokens=options.max_tokens,
            ignore_eos=options.ignore_eos,
            temperature=options.temperature,
        )
        runner = self.environment.runner
        self.worker_id = getattr(runner, "client_id", None) or "local"
        self._prompt_index = hash(uuid.uuid4()) % len(self.prompts)

    @task
    def stream_one(self) -> None:
        """One streamed request (the closed loop's iteration)."""
        prompt = self.prompts[self._prompt_index % len(self.prompts)]
        self._prompt_index += 1
        self.send(prompt)

    def send(self, prompt: str) -> RequestRecord:
        """Send one streamed request for ``prompt``, fire its Locust event, return its record."""
        body = json.dumps(self.adapter.build_body(prompt=prompt, workload=self.workload))
        record = RequestRecord(
            request_id=uuid.uuid4().hex[:16], worker_id=self.worker_id, name=self.request_name, t_start_s=time.time()
        )
        t0 = time.perf_counter()
        with self.client.request(
            "POST",
            self.adapter.path,
            data=body,
            headers=self.headers,
            stream=True,
            catch_response=True,
            name=self.request_name,
        ) as response:
            received_bytes = self._measure(response, record, t0)
            response.request_meta["response_time"] = record.e2e_ms
            response.request_meta["response_length"] = received_bytes
            response.request_meta["context"]["llm_record"] = record
            if record.ok:
                response.success()
            else:
                response.failure(LLMRequestError(ErrorKind(record.error_kind), record.error_message))
        return record

    def _fail(self, record: RequestRecord, kind: ErrorKind, message: str, t0: float) -> None:
        record.error_kind = kind.value
        record.error_message = _short(message)
        record.e2e_ms = (time.perf_counter() - t0) * 1000.0

    def _measure(self, response, record: RequestRecord, t0: float) -> int:
        """Read the response, fill ``record`` in place; return the body bytes received."""
        error = getattr(response, "error", None)
        raw = getattr(response, "_response", None)
        if raw is None:  # no response at all: connect failure
            self._fail(record, classify_exception(error, got_headers=False), repr(error), t0)
            return 0
        record.headers_ms = (time.perf_counter() - t0) * 1000.0
        record.status_code = int(response.status_code or 0)
        if record.status_code != 200:
            try:  # geventhttpclient has read and cached the body of a non-2xx answer
                detail = (response.content or b"").decode("utf-8", "replace")
            except (OSError, StreamClosedError) as exc:
                detail = repr(exc)
            self._fail(record, ErrorKind.for_status(record.status_code), f"HTTP {record.status_code} {detail}", t0)
            return len(detail)
        return self._read_stream(raw, record, t0)

    def _read_stream(self, raw, record: RequestRecord, t0: float) -> int:
        counted = _ByteCounter(iter_body_chunks(raw))
        first_t = last_t = math.nan
        usage = None
        done = False
        try:
            for t, event_name, data in iter_timed_events(counted):
                last_t = t
                if event_name == "error":
                    self._fail(record, ErrorKind.STREAM_ERROR, data, t0)
                    break
                try:
                    event = self.adapter.parse(data)
                except ValueError as exc:
                    self._fail(record, ErrorKind.BAD_RESPONSE, f"unparseable event {data[:80]!r}: {exc}", t0)
                    break
                if event.error is not None:
                    self._fail(record, ErrorKind.STREAM_ERROR, event.error, t0)
                    break
                if event.text:
                    record.content_events += 1
                    if math.isnan(first_t):
                        first_t = t
                if event.usage:
                    usage = event.usage
                if event.finish_reason:
                    record.finish_reason = event.finish_reason
                done = done or event.done
        except (OSError, StreamClosedError) as exc:
            self._fail(record, classify_exception(exc, got_headers=True), repr(exc), t0)
        finally:
            raw.release()  # closes the socket unless the message was read to its end
        if not math.isnan(first_t):
            record.ttft_ms = (first_t - t0) * 1000.0
        if usage and usage.get("completion_tokens") is not None:
            record.output_tokens = int(usage["completion_tokens"])
            record.tokens_source = TokensSource.USAGE.value
        else:
            record.output_tokens = record.content_events
        if usage and usage.get("prompt_tokens") is not None:
            record.prompt_tokens = float(usage["prompt_tokens"])
        if record.ok:
            record.e2e_ms = (last_t - t0) * 1000.0 if not math.isnan(last_t) else (time.perf_counter() - t0) * 1000.0
            if not done and not record.finish_reason:
                self._fail(record, ErrorKind.TRUNCATED, "stream ended without [DONE] or finish_reason", t0)
        return counted.total


class _ByteCounter:
    """Pass chunks through, counting their bytes (Locust's response_length)."""

    __slots__ = ("_chunks", "total")

    def __init__(self, chunks) -> None:
        self._chunks = chunks
        self.total = 0

    def __iter__(self):
        for chunk in self._chunks:
            self.total += len(chunk)
            yield chunk
