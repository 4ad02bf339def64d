"""The run directory's schema: the one definition both sides of the contract derive from.

The writer (``llm_locust``: :mod:`llm_locust.client.record`, :mod:`llm_locust.master.runwriter`,
:mod:`llm_locust.master.logfollow`), the loader (:mod:`llm_locust.analysis.rundir.reader`,
:mod:`llm_locust.analysis.server.files`) and the test factories all take their column names, dtypes and
error kinds from here, so a column or error kind added here reaches all of them at once
(``tests/unit/analysis/test_schema.py`` checks that they agree).

This module is deliberately free of pandas and numpy: a Locust worker imports it.

Files and their columns:

``run.json``
    :data:`RUN_JSON_KEYS`; ``schema_version`` is :data:`SCHEMA_VERSION`.
``requests.csv``
    :data:`REQUEST_COLUMNS` (one row per request, columns only ever added at the end).
``server_metrics.csv``
    :data:`SERVER_METRICS_COLUMNS` (scraped Prometheus samples in long format).
``server_scrapes.csv``
    :data:`SCRAPE_COLUMNS` (one row per scrape attempt; failures are :class:`ScrapeErrorKind`).
``server_log_stamps.csv``
    :data:`STAMP_COLUMNS` (arrival stamps of the captured server log's lines).
``client_load.csv``
    :data:`CLIENT_LOAD_COLUMNS` (each worker's load once a second).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

SCHEMA_VERSION = 1
"""``schema_version`` written to ``run.json``."""

SCHEMA_VERSIONS: tuple[int, ...] = (1,)
"""``run.json`` schema versions the loader reads."""

RUN_JSON = "run.json"
REQUESTS_CSV = "requests.csv"
REQUESTS_ARROW = "requests.arrow"
"""``requests.csv``'s rows as an Arrow IPC file (:mod:`llm_locust.analysis.rundir.columnar`), written at the run's end."""
SERVER_METRICS_CSV = "server_metrics.csv"
SERVER_SCRAPES_CSV = "server_scrapes.csv"
CLIENT_LOAD_CSV = "client_load.csv"
SERVER_LOG = "server.log"
SERVER_LOG_STAMPS = "server_log_stamps.csv"
SERVER_INFO = "server_info.json"
SERVER_LOG_FORMAT = "server_log_format.toml"
CLIENT_REPORT = "client_report.json"


class ErrorKind(str, enum.Enum):
    """Closed set of failure kinds of a request (DESIGN.md, "Errors"); ``error_kind`` holds one.

    ``NONE`` (the empty string) marks a success. ``INTERRUPTED``: the request was still in flight
    when the test stopped it (Locust stopped the user: a time limit, Ctrl-C, a ladder's drain
    that ran out); the tokens it had received are kept, and it is in no success statistic.
    """

    NONE = ""
    CONNECT_TIMEOUT = "connect_timeout"
    TTFT_TIMEOUT = "ttft_timeout"
    STALL_TIMEOUT = "stall_timeout"
    TOTAL_TIMEOUT = "total_timeout"
    CONNECTION_ERROR = "connection_error"
    HTTP_4XX = "http_4xx"
    HTTP_429 = "http_429"
    HTTP_5XX = "http_5xx"
    STREAM_ERROR = "stream_error"
    TRUNCATED = "truncated"
    BAD_RESPONSE = "bad_response"
    INTERRUPTED = "interrupted"

    @classmethod
    def for_status(cls, status_code: int) -> ErrorKind:
        """Error kind of a non-2xx HTTP status: 429 apart, else 4xx or 5xx.

        >>> ErrorKind.for_status(429).value, ErrorKind.for_status(404).value
        ('http_429', 'http_4xx')
        """
        if status_code == 429:
            return cls.HTTP_429
        if 400 <= status_code < 500:
            return cls.HTTP_4XX
        return cls.HTTP_5XX


ERROR_KINDS: frozenset[str] = frozenset(kind.value for kind in ErrorKind if kind is not ErrorKind.NONE)
"""The ``error_kind`` values of a failure (the empty string marks a success)."""


class TokensSource(str, enum.Enum):
    """Where ``output_tokens`` came from (``tokens_source``).

    ``USAGE``: the server's total (``usage.completion_tokens``, TGI ``details.generated_tokens``);
    ``EVENTS``: the sum of per-event counts the protocol states (TGI: one token per event) when no
    total came; ``TOKENIZER``: the ``--tokenizer`` run once on the joined text; ``HEURISTIC``: a
    characters-per-token estimate on the joined text. Run directories written before these kinds
    existed hold ``chunks`` (a count of content events).
    """

    USAGE = "usage"
    EVENTS = "events"
    TOKENIZER = "tokenizer"
    HEURISTIC = "heuristic"


@dataclass(frozen=True)
class Column:
    """One column of a run-directory CSV.

    Attributes
    ----------
    name : str
        Header cell.
    dtype : str
        Dtype after loading: ``"float64"`` (an empty cell is NaN, "not measured") or ``"str"``.
    unit : str
        Unit of the values ("" for none).
    meaning : str
        One line.
    required : bool
        True for the columns every file has had since schema version 1; False for columns added
        later (an older file without them still loads, with :attr:`missing`).
    missing : float or str or None
        Value of an optional column absent from an older file (None: NaN or "" by dtype).
    """

    name: str
    dtype: str
    unit: str
    meaning: str
    required: bool = True
    missing: float | str | None = None

    @property
    def fill(self) -> float | str:
        """Value filled in when the column is absent: :attr:`missing`, else NaN or ""."""
        if self.missing is not None:
            return self.missing
        return "" if self.dtype == "str" else float("nan")


_F, _S = "float64", "str"  # the two dtypes a column loads as

REQUEST_SCHEMA: tuple[Column, ...] = (
    Column("request_id", _S, "", "unique over the run: <worker_id>-<sequence>"),
    Column("worker_id", _S, "", "Locust client id of the process that sent it"),
    Column("name", _S, "", "Locust request name"),
    Column("t_start_s", _F, "s", "wall clock (Unix) when the request was sent"),
    Column("headers_ms", _F, "ms", "sent -> response headers received"),
    Column("ttft_ms", _F, "ms", "sent -> first event carrying generated text"),
    Column("e2e_ms", _F, "ms", "sent -> last event, end of stream or the failure"),
    Column("prompt_tokens", _F, "tokens", "usage.prompt_tokens when the server sent it"),
    Column("output_tokens", _F, "tokens", "output tokens (the server's count or an estimate)"),
    Column("tokens_source", _S, "", "where output_tokens came from: a TokensSource value"),
    Column("content_events", _F, "events", "SSE events that carried generated text"),
    Column("finish_reason", _S, "", "last finish_reason the server sent"),
    Column("status_code", _F, "", "HTTP status, 0 when no response arrived"),
    Column("error_kind", _S, "", "an ErrorKind value, empty for a success"),
    Column("error_message", _S, "", "short description of the failure"),
    Column("first_answer_ms", _F, "ms", "sent -> first event carrying answer text", False),
    Column("conn_wait_ms", _F, "ms", "wait for a free connection before sending", False, 0.0),
    Column("connect_ms", _F, "ms", "time to open a new connection (NaN when reused)", False),
    Column("sse_events", _F, "events", "SSE data events received", False),
    Column("token_times_us", _S, "us", "arrival of each token event after the send, space-separated", False),
    Column("event_tokens", _S, "tokens", "tokens per token event, space-separated; empty when unknown", False),
    Column("max_tokens", _F, "tokens", "output token limit asked for, 0 when none named", False),
    Column("ignore_eos_violated", _F, "", "1 when ignore_eos was asked but the server stopped early", False, 0.0),
    Column("response_id", _S, "", "the server's id of the response", False),
    Column("resent", _F, "", "1 when sent again after a kept-alive connection closed unanswered", False, 0.0),
    Column("backoff_ms", _F, "ms", "pause the user took after this request before its next (no request)", False, 0.0),
    Column("prompt_tokens_target", _F, "tokens", "prompt length built (--input-tokens), NaN if none", False),
    Column("scheduled_s", _F, "s", "wall clock (Unix) the send was scheduled for (rate runs; NaN closed loop)", False),
    Column("server_queue_ms", _F, "ms", "the server's own count of the request's wait in its queue", False),
    Column("server_prompt_ms", _F, "ms", "the server's own prefill time (llama.cpp timings.prompt_ms)", False),
    Column("server_prompt_tokens", _F, "tokens", "prompt tokens the server processed (timings.prompt_n)", False),
    Column("server_decode_ms", _F, "ms", "the server's own decode time (llama.cpp timings.predicted_ms)", False),
    Column("server_decode_tokens", _F, "tokens", "tokens the server generated (timings.predicted_n)", False),
    Column("session_id", _S, "", "the multi-turn session the request is a turn of, empty for none", False),
    Column("turn", _F, "", "turn in its session from 1 (the prompt holds the turns before it), 0 for none", False, 0.0),
    Column("trace_row", _F, "", "index (from 0) of the --trace row the request replays, -1 for none", False, -1.0),
)
"""Every ``requests.csv`` column, in file order (a :class:`RequestRecord
<llm_locust.client.record.RequestRecord>` field each, same order)."""

REQUEST_COLUMNS: tuple[str, ...] = tuple(c.name for c in REQUEST_SCHEMA)
"""``requests.csv`` header, in file order."""

SERVER_METRICS_SCHEMA: tuple[Column, ...] = (
    Column("t_s", _F, "s", "wall clock (Unix) of the scrape"),
    Column("source", _S, "", "endpoint URL scraped"),
    Column("metric", _S, "", "sample name as exposed"),
    Column("labels", _S, "", "labels as a JSON object with sorted keys"),
    Column("value", _F, "", "sample value"),
)
"""Every ``server_metrics.csv`` column, in file order."""

SERVER_METRICS_COLUMNS: tuple[str, ...] = tuple(c.name for c in SERVER_METRICS_SCHEMA)
"""``server_metrics.csv`` header."""


class ScrapeErrorKind(str, enum.Enum):
    """Why a scrape failed (the closed set of ``server_scrapes.csv`` ``error_kind``)."""

    TIMEOUT = "timeout"
    """No complete answer within the scrape timeout (connect + read)."""
    CONNECTION_ERROR = "connection_error"
    """Refused, reset or closed before the body was complete."""
    HTTP_ERROR = "http_error"
    """A status other than 2xx (``status_code`` keeps it)."""
    TOO_LARGE = "too_large"
    """The body passed ``--scrape-max-bytes`` (announced by Content-Length, or while reading)."""
    NOT_PROMETHEUS = "not_prometheus"
    """Not UTF-8, or prometheus_client's parser rejected it."""


SCRAPE_SCHEMA: tuple[Column, ...] = (
    Column("t_s", _F, "s", "wall clock (Unix) when the attempt started (the t_s of its samples)"),
    Column("source", _S, "", "endpoint URL"),
    Column("ok", _F, "", "1 when the scrape gave samples, else 0"),
    Column("error_kind", _S, "", "a ScrapeErrorKind value, empty when ok"),
    Column("status_code", _F, "", "HTTP status, empty when none came", False),
    Column("duration_ms", _F, "ms", "request start to body parsed or failure", False),
    Column("bytes", _F, "bytes", "body bytes read (up to the abort)", False),
    Column("samples", _F, "samples", "rows kept in server_metrics.csv (0 when failed)", False),
)
"""Every ``server_scrapes.csv`` column, in file order; the loader reads the required ones."""

SCRAPE_COLUMNS: tuple[str, ...] = tuple(c.name for c in SCRAPE_SCHEMA)
"""``server_scrapes.csv`` header."""

STAMP_SCHEMA: tuple[Column, ...] = (
    Column("first_line", _F, "lines", "0-based index of the first line of this read"),
    Column("n_lines", _F, "lines", "lines read"),
    Column("t_s", _F, "s", "wall clock (Unix) when they were read"),
    Column("backlog", _F, "", "1 for lines already in the file when capture began (undated)"),
)
"""Every ``server_log_stamps.csv`` column, in file order (one row per read of the log)."""

STAMP_COLUMNS: tuple[str, ...] = tuple(c.name for c in STAMP_SCHEMA)
"""``server_log_stamps.csv`` header."""

CLIENT_LOAD_SCHEMA: tuple[Column, ...] = (
    Column("t_s", _F, "s", "interval end, wall clock (Unix) on the master's clock (worker's + its offset)"),
    Column("worker", _S, "", "Locust client id of the worker (requests.csv's worker_id)"),
    Column("cpu_cores", _F, "cores", "process CPU time over the interval's wall time"),
    Column("loop_lag_ms_mean", _F, "ms", "mean lateness of the event-loop probe"),
    Column("loop_lag_ms_max", _F, "ms", "largest lateness of the event-loop probe"),
    Column("open_streams", _F, "streams", "requests in flight on the worker"),
)
"""Every ``client_load.csv`` column, in file order (one row per worker per second)."""

CLIENT_LOAD_COLUMNS: tuple[str, ...] = tuple(c.name for c in CLIENT_LOAD_SCHEMA)
"""``client_load.csv`` header."""

RUN_JSON_KEYS: dict[str, str] = {
    "schema_version": "int: SCHEMA_VERSION of the writer (required)",
    "started_at_s": "float: wall clock (Unix s) at test start (required)",
    "ended_at_s": "float or null: wall clock at a clean stop; null after a timeout or Ctrl-C",
    "command_line": "list of str: argv, the API key replaced by ***",
    "host": "str: target URL",
    "model": "str or null: model name (--model, or the server's first served model)",
    "workload": "object: protocol, max_tokens, ignore_eos, temperature, prompt_set_sha256, prompts, ...",
    "shape": "object: kind, warmup_s, dwell_s, steps [{index, users, start_s, end_s (null if cut), duration_s (end_s - start_s, s; absent while open), "
    "rate_rps (rate runs)}]; a rate run adds rates, arrival, burstiness, seed, max_users, workers",
    "metrics_urls": "list of str: Prometheus endpoints scraped",
    "metrics_sources": "list of {name, url, origin}: each endpoint's name in the report (--server-metrics-url "
    "NAME=URL, else host:port) and why it was scraped (--metrics-url, --server-metrics-url, default HOST/metrics); "
    "optional (older runs: names from the URLs)",
    "metrics_duplicates": "list of {url, same_as, by}: endpoints found to reach the same server as another "
    "(by its process_start_time_seconds or its counters' _created times) and scraped no further (optional)",
    "scrape_interval_s": "float: scrape period, s",
    "scrape_timeout_s": "float: longest wait for one scrape, s",
    "scrape_max_bytes": "int: largest /metrics body read, bytes",
    "workers": "list of str: Locust client ids of the workers",
    "workers_lost": "list of {worker, lost_at_s, last_record_s}: workers missing (no heartbeat) and not "
    "back by the end (Unix s; optional)",
    "workers_missing": "list of {worker, from_s, noticed_s, to_s}: every spell a worker was missing, from "
    "the master's last word from it to its next heartbeat (to_s null: never back; Unix s; optional)",
    "worker_processes": "list of {worker, host, pid}: each worker's host name and process id, as it "
    "reported them (optional)",
    "versions": "object: package -> version",
    "labels": "object: --label KEY=VALUE pairs",
    "user_errors": "list of {msg, count}: exceptions raised in users (optional)",
    "utc_offset_s": "int: the master's UTC offset, s (zone of log stamps without one)",
    "server_log": "str: --server-log followed (optional)",
    "server_log_cmd": "str: --server-log-cmd whose output was followed (optional)",
    "clock_offsets": "list of {worker, offset_s, uncertainty_s, delay_s, samples}: each worker's clock "
    "offset to the master (master - worker, s), known within uncertainty_s (optional)",
    "server_log_format": "str: --server-log-format given (optional)",
    "slo": "str: --slo service-level objectives, e.g. ttft_ms<=500,tpot_ms<=50 (optional)",
}
"""``run.json`` keys the writer sets and what they hold; the loader requires ``schema_version``
and ``started_at_s`` and tolerates missing others."""

RUN_JSON_REQUIRED: tuple[str, ...] = ("schema_version", "started_at_s")
"""``run.json`` keys without which a run directory does not load."""


def source_names(urls: list[str], given: dict[str, str] | None = None) -> dict[str, str]:
    """The name of each scraped ``/metrics`` URL (``server_metrics.csv``'s ``source``): the one
    ``given`` (run.json ``metrics_sources``, from ``--server-metrics-url NAME=URL``), else its
    ``host:port``, else (two URLs on one ``host:port``) ``host:port/path``.

    Raises
    ------
    ValueError
        Two URLs end up with the same name.

    >>> source_names(["http://127.0.0.1:8001/metrics", "http://127.0.0.1:8002/metrics"])
    {'http://127.0.0.1:8001/metrics': '127.0.0.1:8001', 'http://127.0.0.1:8002/metrics': '127.0.0.1:8002'}
    >>> source_names(["http://h:1/a", "http://h:1/b"], {"http://h:1/b": "gpu"})
    {'http://h:1/a': 'h:1', 'http://h:1/b': 'gpu'}
    """
    from urllib.parse import urlsplit

    given = given or {}
    netloc = {url: (urlsplit(url).netloc or url) for url in urls}
    auto = [netloc[url] for url in urls if url not in given]
    names = {}
    for url in urls:
        if url in given:
            names[url] = given[url]
        elif auto.count(netloc[url]) > 1 or netloc[url] in given.values():
            names[url] = netloc[url] + urlsplit(url).path
        else:
            names[url] = netloc[url]
    taken = list(names.values())
    for name in taken:
        if taken.count(name) > 1:
            raise ValueError(f"two metrics endpoints are named {name!r}: give each its own NAME=URL")
    return names
