"""Scrape the server's Prometheus endpoint(s) during a run, into ``server_metrics.csv``.

Runs as one greenlet on the master (or standalone process). The text exposition format is parsed
with ``prometheus_client.parser.text_string_to_metric_families``; every sample becomes a long-format
row ``(t_s, source, metric, labels_json, value)``. Histogram ``_bucket`` and ``_created`` samples
are dropped (``_sum``/``_count`` are kept): they are most of a vLLM scrape and nothing here reads them.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

import gevent
import requests
from prometheus_client.parser import text_string_to_metric_families

logger = logging.getLogger(__name__)

DROPPED_SUFFIXES = ("_bucket", "_created")


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
    rows = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith(DROPPED_SUFFIXES):
                continue
            rows.append((t_s, source, sample.name, json.dumps(sample.labels, sort_keys=True), float(sample.value)))
    return rows


class MetricsScraper:
    """Poll ``urls`` every ``interval_s`` seconds until :meth:`stop`, handing rows to ``sink``.

    Parameters
    ----------
    urls : list of str
        Prometheus endpoints (loopback or the user's server).
    interval_s : float
        Target period between scrape starts, s (> 0).
    sink : callable(list of tuple) -> None
        Receives each scrape's rows (one call per URL scraped).
    headers : dict, optional
        Sent with each scrape (e.g. the API key's Authorization header; never logged).

    A failed scrape (connection error, HTTP error, unparseable text) is logged once per kind and
    counted in ``failures``; it never stops the run. ``extra_sinks`` (a list, empty at first)
    also receive every scrape's rows, after ``sink``.
    """

    def __init__(self, urls: list[str], interval_s: float, sink: Callable[[list[tuple]], None], headers=None) -> None:
        if interval_s <= 0:
            raise ValueError(f"scrape interval must be > 0 s, got {interval_s}")
        self.urls = urls
        self.interval_s = interval_s
        self.sink = sink
        self.extra_sinks: list[Callable[[list[tuple]], None]] = []
        self.headers = headers or {}
        self.scrapes = 0
        self.failures = 0
        self._warned: set[str] = set()
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._loop)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=True, timeout=5)
            self._greenlet = None

    def scrape_once(self) -> None:
        for url in self.urls:
            t_s = time.time()
            try:
                response = requests.get(url, headers=self.headers, timeout=max(self.interval_s, 2.0))
                response.raise_for_status()
                rows = samples_to_rows(response.text, t_s=t_s, source=url)
            except (requests.RequestException, ValueError) as exc:
                self.failures += 1
                kind = type(exc).__name__
                if kind not in self._warned:
                    self._warned.add(kind)
                    logger.warning("scraping %s failed (%s: %s); will keep trying", url, kind, str(exc)[:200])
                continue
            self.scrapes += 1
            self.sink(rows)
            for extra in self.extra_sinks:  # e.g. the web UI's live view: its failure never stops scraping
                try:
                    extra(rows)
                except Exception:
                    logger.exception("a scrape sink failed")

    def _loop(self) -> None:
        next_t = time.monotonic()
        while True:
            self.scrape_once()
            next_t += self.interval_s
            gevent.sleep(max(0.0, next_t - time.monotonic()))
