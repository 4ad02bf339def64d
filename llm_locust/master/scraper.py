"""Scrape the server's Prometheus endpoint(s) during a run, into ``server_metrics.csv``.

Runs on the master (or a standalone process), **one greenlet per endpoint**, each on its own
timer: a slow or hung endpoint delays only its own next scrape, never another's. Each scrape is
bounded:

- in time: one total deadline (connect + read, ``--scrape-timeout-s``; default
  :func:`default_timeout_s`, a bit below 3 intervals);
- in size: the body is read in pieces and the scrape aborted as soon as it passes
  ``--scrape-max-bytes`` (default :data:`DEFAULT_MAX_BYTES`), before anything is parsed;
- in event-loop time: the capped body is parsed in gevent's thread pool, so the master's event
  loop (Locust's heartbeats, record shipping) keeps running while a big body is parsed.

Scrapes come every ``interval_s`` on average, at random gaps (:data:`JITTER`), not on a grid.

The text exposition format is parsed with ``prometheus_client.parser.text_string_to_metric_families``;
every sample becomes a long-format row ``(t_s, source, metric, labels_json, value)``. Histogram
``_bucket`` and ``_created`` samples are dropped (``_sum``/``_count`` are kept): they are most of a
vLLM scrape and nothing here reads them.

**One server scraped once.** Each successful scrape also reads the server's identity
(:func:`server_identity`: ``process_start_time_seconds`` and the counters' ``_created`` times, the
instants its process and its metrics were born). Two endpoints whose identities are equal reach
the same server (a gateway and the backend behind it, two names of one host): the one listed
later is a duplicate: its samples are not kept, it is scraped no further, and it is said once
(logged, and in :attr:`MetricsScraper.duplicates` for run.json). A server that exposes neither
(llama.cpp) has no identity here; the analysis then compares the sources' counters
(:mod:`llm_locust.analysis.server.replicas`).

Every attempt, good or failed, is one :class:`ScrapeOutcome` (a row of ``server_scrapes.csv``,
:data:`llm_locust.analysis.schema.SCRAPE_COLUMNS`): the analysis ends a held value where a scrape of its source failed. A
failure is one of :class:`llm_locust.analysis.schema.ScrapeErrorKind`, logged once per endpoint and kind, counted per
endpoint (:meth:`MetricsScraper.summary_lines`); it never stops the run.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import gevent
import requests
from prometheus_client.parser import text_string_to_metric_families

from llm_locust.analysis.schema import ScrapeErrorKind  # server_scrapes.csv: defined with the run directory
from llm_locust.wallclock import local_wall_s

logger = logging.getLogger(__name__)

DROPPED_SUFFIXES = ("_bucket", "_created")

DEFAULT_MAX_BYTES = 8 * 1024 * 1024
"""Default ``--scrape-max-bytes``: 8 MiB. A real engine's ``/metrics`` is far smaller (vLLM with
histograms ~100-300 KB, llama.cpp ~2 KB); past it a body is not a metrics page worth a run's time."""

TIMEOUT_INTERVALS = 2.9
"""Default scrape timeout in scrape intervals (:func:`default_timeout_s`)."""

READ_PIECE_BYTES = 64 * 1024

JITTER = 0.5
"""Each gap between two scrapes of an endpoint is drawn uniformly from ``interval_s`` x
[1 - JITTER, 1 + JITTER]: the mean rate is the interval's, the phase is not fixed. On a fixed grid,
gaps in a gauge that recur at a whole number of seconds alias with the scrapes: a CI run against
a real vLLM (``--max-num-seqs 2``, requests of 4.0 s, ladder steps starting on a scrape) read its
running gauge 2, 1, 2, 1, ... with 2 requests in flight, every request ending just before a
scrape, so the step's time-average said 1.56 for 2. With independent random gaps the scrape times
are a renewal process independent of the server, and a sample's hold (until the next scrape) is
independent of its value: the time-average is unbiased whatever the period of the gaps."""


ABSENT_STATUSES = frozenset({404, 405, 410, 501})
"""Statuses of a first scrape that mean "no metrics endpoint here" (not a passing fault)."""

REFUSED_STATUSES = frozenset({429, 503})
"""A scrape answered with one of these was refused by a limit (not a broken endpoint)."""

REFUSED_HINT = (
    "the metrics endpoint is behind a limit that refuses the load too (a gateway's connection or rate "
    "limit in front of the server: each scrape takes one of its slots); the server series have no data "
    "where it refused - scrape the server itself (--metrics-url http://<server>/metrics)"
)
"""What a refused scrape means, said on the console (the analysis says it again, from
``server_scrapes.csv``: :func:`llm_locust.analysis.server.sources.refused_scrapes_text`)."""


def default_timeout_s(interval_s: float) -> float:
    """The default scrape timeout: :data:`TIMEOUT_INTERVALS` x ``interval_s``, s.

    A busy engine may answer ``/metrics`` late (vLLM serves it from the event loop that also
    streams the tokens), so one interval is too short; a bit below three intervals means a hung
    endpoint is retried at least every third tick, and never past the analysis' hold limit of
    three intervals by more than the attempt itself (the failed attempt is stamped with its start).

    >>> default_timeout_s(1.0)
    2.9
    """
    return TIMEOUT_INTERVALS * interval_s


@dataclass(frozen=True, slots=True, kw_only=True)
class ScrapeOutcome:
    """One scrape attempt (a row of ``server_scrapes.csv``, :data:`llm_locust.analysis.schema.SCRAPE_COLUMNS`)."""

    t_s: float
    source: str
    ok: bool
    error_kind: ScrapeErrorKind | None
    status_code: int | None
    duration_ms: float
    bytes: int
    samples: int

    def row(self) -> tuple:
        """The CSV row (None cells are written empty)."""
        return (
            self.t_s,
            self.source,
            int(self.ok),
            self.error_kind.value if self.error_kind else "",
            self.status_code,
            round(self.duration_ms, 3),
            self.bytes,
            self.samples,
        )


class ScrapeFailed(Exception):
    """A scrape that gave no samples: its kind, HTTP status (None when none came) and bytes read."""

    def __init__(
        self, kind: ScrapeErrorKind, message: str, *, status_code: int | None = None, n_bytes: int = 0
    ) -> None:
        super().__init__(message)
        self.kind, self.status_code, self.n_bytes = kind, status_code, n_bytes


IDENTITY_SAMPLES = ("process_start_time_seconds",)
"""Gauges whose value names one server process (prometheus_client's process collector: vLLM,
SGLang, TGI's Python side...)."""


def server_identity(text: str) -> tuple:
    """What names the server behind one ``/metrics`` body: ``process_start_time_seconds`` and every
    counter's ``_created`` time (both fixed for a process's life), as sorted ``(name, labels,
    value)``; ``()`` when the body has neither (llama.cpp).

    Raises
    ------
    ValueError
        The text is not valid exposition format (from prometheus_client's parser).

    >>> server_identity("process_start_time_seconds 1.5e9")
    (('process_start_time_seconds', '{}', 1500000000.0),)
    >>> server_identity("llamacpp:requests_processing 2")
    ()
    """
    return _parse_text(text, t_s=0.0, source="")[1]


def _parse_text(text: str, *, t_s: float, source: str) -> tuple[list[tuple], tuple]:
    rows, identity = [], []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in IDENTITY_SAMPLES or sample.name.endswith("_created"):
                identity.append((sample.name, json.dumps(sample.labels, sort_keys=True), float(sample.value)))
            if sample.name.endswith(DROPPED_SUFFIXES):
                continue
            rows.append((t_s, source, sample.name, json.dumps(sample.labels, sort_keys=True), float(sample.value)))
    return rows, tuple(sorted(identity))


def samples_to_rows(text: str, *, t_s: float, source: str) -> list[tuple]:
    """Turn one Prometheus text exposition into long-format rows.

    Parameters
    ----------
    text : str
        The body of a ``/metrics`` response (Prometheus text format 0.0.4).
    t_s : float
        Wall-clock time of the scrape (Unix s).
    source : str
        The URL scraped.

    Returns
    -------
    list of tuple
        ``(t_s, source, metric, labels_json, value)`` per kept sample; labels as JSON with sorted keys.

    Raises
    ------
    ValueError
        The text is not valid exposition format (from prometheus_client's parser).
    """
    return _parse_text(text, t_s=t_s, source=source)[0]


def _parse(text_bytes: bytes, t_s: float, source: str) -> tuple[list[tuple], tuple]:
    """Rows (:func:`samples_to_rows`) and identity (:func:`server_identity`) of a body; any failure
    of the parser is :class:`ScrapeFailed` (prometheus_client raises ValueError for most bad
    input, but not only that)."""
    try:
        return _parse_text(text_bytes.decode("utf-8"), t_s=t_s, source=source)
    except Exception as exc:
        raise ScrapeFailed(
            ScrapeErrorKind.NOT_PROMETHEUS, f"{type(exc).__name__}: {str(exc)[:200]}", n_bytes=len(text_bytes)
        ) from None


def fetch_body(url: str, *, headers: dict, timeout_s: float, max_bytes: int) -> tuple[int, bytes]:
    """GET ``url`` and read its body, bounded in time and size.

    Parameters
    ----------
    url : str
    headers : dict
        Sent as is (e.g. ``Authorization``; never logged).
    timeout_s : float
        Total time for connect + headers + body, s. Enforced by a ``gevent.Timeout`` (the
        process is gevent-patched, as every Locust process is) and by the socket timeouts.
    max_bytes : int
        Largest body accepted; a ``Content-Length`` above it fails before the body is read, a
        body without one is read in pieces and dropped as soon as it passes the cap.

    Returns
    -------
    (status_code, body)

    Raises
    ------
    ScrapeFailed
        ``timeout``, ``connection_error``, ``http_error`` (non-2xx) or ``too_large``.
    """
    status, read = None, 0
    response = None
    deadline = gevent.Timeout(timeout_s)
    deadline.start()
    try:
        response = requests.get(url, headers=headers, timeout=(timeout_s, timeout_s), stream=True)
        status = response.status_code
        if not 200 <= status < 300:
            raise ScrapeFailed(ScrapeErrorKind.HTTP_ERROR, f"HTTP {status}", status_code=status)
        announced = response.headers.get("Content-Length", "")
        if announced.isdigit() and int(announced) > max_bytes:
            raise ScrapeFailed(
                ScrapeErrorKind.TOO_LARGE, f"Content-Length {announced} > {max_bytes}", status_code=status
            )
        pieces = []
        for piece in response.iter_content(READ_PIECE_BYTES):
            read += len(piece)
            if read > max_bytes:
                raise ScrapeFailed(
                    ScrapeErrorKind.TOO_LARGE, f"body passed {max_bytes} bytes", status_code=status, n_bytes=read
                )
            pieces.append(piece)
        return status, b"".join(pieces)
    except gevent.Timeout as exc:
        if exc is not deadline:
            raise
        raise ScrapeFailed(
            ScrapeErrorKind.TIMEOUT, f"no complete answer in {timeout_s:g} s", status_code=status, n_bytes=read
        ) from None
    except requests.Timeout as exc:
        raise ScrapeFailed(ScrapeErrorKind.TIMEOUT, str(exc)[:200], status_code=status, n_bytes=read) from None
    except (requests.RequestException, OSError, ValueError) as exc:  # also raised beneath requests
        raise ScrapeFailed(
            ScrapeErrorKind.CONNECTION_ERROR,
            f"{type(exc).__name__}: {str(exc)[:200]}",
            status_code=status,
            n_bytes=read,
        ) from None
    finally:
        deadline.close()
        if response is not None:
            response.close()  # an aborted body: the connection is dropped, never reused


class MetricsScraper:
    """Scrape each of ``urls`` every ``interval_s`` seconds until :meth:`stop`, each on its own greenlet.

    Parameters
    ----------
    urls : list of str
        Prometheus endpoints (loopback or the user's server).
    interval_s : float
        Target period between scrape starts of one endpoint, s (> 0). A scrape that overruns it
        skips the ticks it missed (scrapes of one endpoint never overlap or queue up).
    sink : callable(list of tuple) -> None
        Receives each successful scrape's rows (one call per URL scraped).
    headers : dict, optional
        Sent with each scrape (e.g. the API key's Authorization header; never logged).
    timeout_s : float, optional
        Total time of one scrape (connect + read), s; default :func:`default_timeout_s`.
    max_bytes : int, default :data:`DEFAULT_MAX_BYTES`
        Largest body accepted.
    outcome_sink : callable(list of tuple) -> None, optional
        Receives every attempt's :meth:`ScrapeOutcome.row` (``server_scrapes.csv``).

    Raises
    ------
    ValueError
        ``interval_s``, ``timeout_s`` or ``max_bytes`` not > 0.

    ``extra_sinks`` (a list, empty at first) also receive every scrape's rows, after ``sink``; a
    failing extra sink is logged and never stops scraping. ``counts[url]`` counts ``ok`` and each
    failure kind. ``duplicates`` lists ``{"url", "same_as", "by"}`` for each endpoint found to
    reach the same server as one listed before it (module docstring); ``on_duplicate`` (a
    callable taking that dict, optional) is called once for each.
    """

    def __init__(
        self,
        urls: list[str],
        interval_s: float,
        sink: Callable[[list[tuple]], None],
        headers=None,
        *,
        timeout_s: float | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        outcome_sink: Callable[[list[tuple]], None] | None = None,
    ) -> None:
        timeout_s = default_timeout_s(interval_s) if timeout_s is None else timeout_s
        for name, value in (
            ("scrape interval", interval_s),
            ("scrape timeout", timeout_s),
            ("scrape size cap", max_bytes),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        self.urls = list(urls)
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.sink = sink
        self.outcome_sink = outcome_sink
        self.extra_sinks: list[Callable[[list[tuple]], None]] = []
        self.headers = headers or {}
        self.counts: dict[str, Counter] = {url: Counter() for url in self.urls}
        self.refused: Counter = Counter()  # per URL: scrapes answered 429/503 (REFUSED_STATUSES)
        self._warned: set[tuple[str, ScrapeErrorKind]] = set()
        self.absent: dict[str, int] = {}
        """Endpoints whose first scrape answered :data:`ABSENT_STATUSES` (no success before):
        URL -> status; not scraped again."""
        self._greenlets: list[gevent.Greenlet] = []
        self._identity: dict[str, tuple] = {}
        self.duplicates: list[dict] = []
        self.on_duplicate: Callable[[dict], None] | None = None

    @property
    def scrapes(self) -> int:
        """Successful scrapes, all endpoints."""
        return sum(c["ok"] for c in self.counts.values())

    @property
    def failures(self) -> int:
        """Failed scrapes, all endpoints."""
        return sum(n for c in self.counts.values() for k, n in c.items() if k != "ok")

    def start(self) -> None:
        """One greenlet per endpoint (idempotent)."""
        if not self._greenlets:
            self._greenlets = [gevent.spawn(self._loop, url) for url in self.urls]

    def stop(self) -> None:
        """Stop every endpoint's greenlet at once (a scrape in progress is abandoned)."""
        if self._greenlets:
            gevent.killall(self._greenlets, block=True, timeout=5)
            self._greenlets = []

    def scrape(self, url: str) -> ScrapeOutcome:
        """Scrape ``url`` once: rows to the sinks, the outcome to ``outcome_sink``; never raises
        for anything the endpoint sends."""
        t_s, started = local_wall_s(), time.perf_counter()
        status, n_bytes, rows = None, 0, None
        try:
            status, body = fetch_body(url, headers=self.headers, timeout_s=self.timeout_s, max_bytes=self.max_bytes)
            n_bytes = len(body)
            # parse off the event loop: a body of up to max_bytes takes a while in pure Python
            rows, identity = gevent.get_hub().threadpool.apply(_parse, (body, t_s, url))
            if self._is_duplicate(url, identity):
                rows = []
            outcome = ScrapeOutcome(
                t_s=t_s,
                source=url,
                ok=True,
                error_kind=None,
                status_code=status,
                duration_ms=(time.perf_counter() - started) * 1e3,
                bytes=n_bytes,
                samples=len(rows),
            )
        except ScrapeFailed as exc:
            outcome = ScrapeOutcome(
                t_s=t_s,
                source=url,
                ok=False,
                error_kind=exc.kind,
                status_code=exc.status_code if exc.status_code is not None else status,
                duration_ms=(time.perf_counter() - started) * 1e3,
                bytes=max(exc.n_bytes, n_bytes),
                samples=0,
            )
            self._warn(url, exc)
        self._record(outcome)
        if rows:
            self._deliver(rows)
        return outcome

    def _detect_absent(self, url: str, outcome: ScrapeOutcome) -> bool:
        """Whether ``outcome`` says the server has no metrics endpoint at ``url`` (its first
        attempt, no success yet, answered 404, 405, 410 or 501): said once, scraping it ends."""
        counts = self.counts.get(url, Counter())
        if outcome.ok or outcome.status_code not in ABSENT_STATUSES or counts["ok"] or sum(counts.values()) != 1:
            return False
        self.absent[url] = int(outcome.status_code)
        logger.warning(
            "%s answered HTTP %d: the server has no Prometheus endpoint there; not scraped again this run "
            "(--metrics-url none says so up front; the server log, --server-log, gives the server's side)",
            url, outcome.status_code,
        )  # fmt: skip
        return True

    def is_duplicate(self, url: str) -> bool:
        """True once ``url`` was found to reach the same server as an endpoint listed before it."""
        return any(d["url"] == url for d in self.duplicates)

    def _is_duplicate(self, url: str, identity: tuple) -> bool:
        """Record ``url``'s identity; True (and said once) when an endpoint listed before it has the
        same one."""
        if self.is_duplicate(url):
            return True
        if not identity:
            return False
        self._identity[url] = identity
        order = {u: i for i, u in enumerate(self.urls)}
        for other, theirs in self._identity.items():
            if other == url or theirs != identity or self.is_duplicate(other):
                continue
            first, later = sorted((url, other), key=lambda u: order.get(u, len(order)))
            by = "process_start_time_seconds" if any(n in IDENTITY_SAMPLES for n, _, _ in identity) else "_created"
            found = {"url": later, "same_as": first, "by": by}
            self.duplicates.append(found)
            logger.warning(
                "%s reaches the same server as %s (same %s): scraped once, from %s; its samples are not kept",
                later, first, by, first,
            )  # fmt: skip
            if self.on_duplicate is not None:
                self.on_duplicate(found)
            return later == url
        return False

    def _warn(self, url: str, exc: ScrapeFailed) -> None:
        if (
            exc.kind is ScrapeErrorKind.HTTP_ERROR
            and exc.status_code in ABSENT_STATUSES
            and not self.counts.get(url, Counter())
        ):
            return  # a first answer that says there is no endpoint: _detect_absent says it, once
        if (url, exc.kind) not in self._warned:
            self._warned.add((url, exc.kind))
            hint = f"; {REFUSED_HINT}" if exc.status_code in REFUSED_STATUSES else ""
            logger.warning("scraping %s failed (%s: %s); will keep trying%s", url, exc.kind.value, exc, hint)

    def _record(self, outcome: ScrapeOutcome) -> None:
        key = outcome.error_kind.value if outcome.error_kind is not None else "ok"
        self.counts.setdefault(outcome.source, Counter())[key] += 1
        if not outcome.ok and outcome.status_code in REFUSED_STATUSES:
            self.refused[outcome.source] += 1
        if self.outcome_sink is not None:
            try:
                self.outcome_sink([outcome.row()])
            except Exception:
                logger.exception("could not record a scrape outcome")

    def _deliver(self, rows: list[tuple]) -> None:
        self.sink(rows)
        for extra in self.extra_sinks:  # e.g. the web UI's live view: its failure never stops scraping
            try:
                extra(rows)
            except Exception:
                logger.exception("a scrape sink failed")

    def _loop(self, url: str) -> None:
        rng = random.Random()
        next_t = time.monotonic()
        while not self.is_duplicate(url):
            try:
                if self._detect_absent(url, self.scrape(url)):
                    return
            except Exception:  # a sink that failed (e.g. a full disk): logged, scraping goes on
                logger.exception("scraping %s: a sink failed", url)
            gap_s = self.interval_s * (1.0 + JITTER * (2.0 * rng.random() - 1.0))
            next_t += gap_s
            now = time.monotonic()
            if next_t < now:  # overran (a slow endpoint): a whole gap from now, not at once
                next_t = now + gap_s
            gevent.sleep(next_t - now)

    def summary_lines(self) -> list[str]:
        """Per endpoint: ``"<url>: 23 scrapes ok, 2 failed (timeout 2)"``."""
        lines = []
        for url, counts in self.counts.items():
            if url in self.absent:
                lines.append(
                    f"{url}: no metrics endpoint (HTTP {self.absent[url]} on the first scrape; not scraped again)"
                )
                continue
            failed = {k: n for k, n in counts.items() if k != "ok"}
            text = f"{url}: {counts['ok']} scrapes ok"
            if failed:
                kinds = ", ".join(f"{k} {n}" for k, n in sorted(failed.items()))
                text += f", {sum(failed.values())} failed ({kinds})"
            refused = self.refused.get(url, 0)
            if refused:
                text += f"; {refused} refused with HTTP 429/503: {REFUSED_HINT}"
            lines.append(text)
        return lines
