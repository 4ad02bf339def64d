"""The server's live queue for the LLM tab: running, waiting, KV usage and generation rate.

Fed by the run's :class:`~llm_locust.master.scraper.MetricsScraper` (as a second sink beside the
``server_metrics.csv`` writer) with each scrape's long-format rows ``(t_s, source, metric,
labels_json, value)``. Each scrape is normalised by :func:`llm_locust.analysis.server.prometheus.metrics_series` — the
same mapping tables the post-run analysis uses, so the live view and the report agree — on that
scrape plus the previous one of the same source (so counters such as generated tokens become a
rate over the interval that just ended). Several sources are combined as the analysis does:
running and waiting summed, KV usage averaged, the latest value of each source held.

One server reached through two URLs (a gateway's ``/metrics`` proxied to its one backend, and the
backend's own) is counted once, as in the report: the sources are checked with the analysis' own
rule, :func:`llm_locust.analysis.server.replicas.find_duplicates`, on each source's identity and counter
samples of its last :data:`DUPLICATE_HISTORY` scrapes and on what the scraper already found
(``metrics_duplicates`` of the run's meta, its ``metrics_urls`` order). A duplicate found is
dropped from the combination from then on (and its held value with it), including the scrapes it
had before the scraper recognised it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import pandas as pd

from llm_locust.analysis.schema import SERVER_METRICS_COLUMNS
from llm_locust.analysis.server.prometheus import MAPPINGS, detect_family, metrics_series
from llm_locust.analysis.server.prometheus.mapping import SampleKind
from llm_locust.analysis.server.replicas import IDENTITY_METRIC, find_duplicates
from llm_locust.analysis.server.series import VALUE_COLUMNS
from llm_locust.jsonsafe import json_safe

logger = logging.getLogger(__name__)

MAX_SAMPLES = 7200
"""Scrapes kept for the live chart (two hours at 1 s); older ones are dropped."""

DUPLICATE_HISTORY = 60
"""Scrapes per source whose identity and counter samples are kept to recognise a duplicate."""

_SUMMED = ("running", "waiting", "gen_tps", "prompt_tps", "preemptions_per_s")


class LiveServerSeries:
    """Normalised server samples as they are scraped (wall clock ``t_s``, Unix s).

    Parameters
    ----------
    scrape_meta : callable returning dict, optional
        The run's scrape facts as run.json holds them: ``metrics_urls`` (the scraped URLs, in
        order: the later of two that are one server is the duplicate) and
        ``metrics_duplicates`` (what the scraper recognised, ``{"url", "same_as", "by"}``);
        called at each scrape. Without it the URLs are ordered as first scraped.

    Attributes
    ----------
    duplicates : dict
        ``{url: llm_locust.analysis.server.replicas.Duplicate}`` of the sources left out as duplicates.
    """

    def __init__(self, scrape_meta: Callable[[], dict] | None = None) -> None:
        self._previous: dict[str, list[tuple]] = {}
        self._latest: dict[str, dict[str, float]] = {}
        self._identity: dict[str, list[list[tuple]]] = {}  # source -> its last scrapes' identity/counter rows
        self._scrape_meta = scrape_meta
        self.duplicates: dict = {}
        self.rows: list[dict[str, float]] = []
        self._warned = False

    def add_rows(self, rows: list[tuple]) -> None:
        """Take one scrape of one source; never raises (a bad scrape is logged once and skipped)."""
        if not rows:
            return
        try:
            self._add(rows)
        except Exception as exc:  # the live view must never break the scraper or the run
            if not self._warned:
                self._warned = True
                logger.warning("live view: could not read a scrape (%s: %s)", type(exc).__name__, exc)

    def _add(self, rows: list[tuple]) -> None:
        source = str(rows[0][1])
        both = self._previous.get(source, []) + list(rows)
        self._previous[source] = list(rows)
        frame = pd.DataFrame(both, columns=list(SERVER_METRICS_COLUMNS)).astype({"t_s": float, "value": float})
        series = metrics_series(frame)
        if series.empty:
            return
        t_s = float(rows[0][0])
        now = series[series["t_s"] == t_s]
        if now.empty:
            return
        values = {column: float(now[column].iloc[-1]) for column in VALUE_COLUMNS}
        before = series[series["t_s"] < t_s]
        for column in ("gen_tps", "prompt_tps", "preemptions_per_s"):  # rate over the interval just ended
            values[column] = float(before[column].iloc[-1]) if not before.empty else math.nan
        self._latest[source] = values
        self._find_duplicates(source, frame)
        kept = [v for url, v in self._latest.items() if url not in self.duplicates]
        combined = {"t_s": t_s}
        for column in values:
            present = [v[column] for v in kept if math.isfinite(v[column])]
            if not present:
                combined[column] = math.nan
            elif column in _SUMMED:
                combined[column] = sum(present)
            else:
                combined[column] = sum(present) / len(present)
        self.rows.append(combined)
        if len(self.rows) > MAX_SAMPLES:
            del self.rows[: len(self.rows) - MAX_SAMPLES]

    def frame(self) -> pd.DataFrame:
        """The combined samples: ``t_s`` and the value columns of a normalised server series
        (:data:`llm_locust.analysis.server.series.VALUE_COLUMNS`), for :func:`llm_locust.analysis.perstep.table.step_table`."""
        return pd.DataFrame(self.rows, columns=["t_s", *VALUE_COLUMNS]).astype(float)

    def to_json(self, *, since_s: float | None = None) -> dict[str, list]:
        """``{"t_s": [...], "running": [...], "waiting": [...], "kv_usage_ratio": [...],
        "gen_tps": [...]}`` (None where not exposed), samples at or after ``since_s``."""
        rows = [r for r in self.rows if since_s is None or r["t_s"] >= since_s]
        return {
            column: [json_safe(r[column]) for r in rows]
            for column in ("t_s", "running", "waiting", "kv_usage_ratio", "gen_tps")
        }

    def _find_duplicates(self, source: str, frame: pd.DataFrame) -> None:
        """Add the sources :func:`~llm_locust.analysis.server.replicas.find_duplicates` calls duplicates, on
        the kept identity/counter samples of every source and the scraper's own findings
        (``frame``: this scrape and the previous one of ``source``)."""
        family = detect_family(frame)
        mapping = MAPPINGS.get(family) if family is not None else None
        names = {IDENTITY_METRIC, *(m for spec in (mapping.specs if mapping else ()) if spec.kind is SampleKind.COUNTER
                                    for m in spec.metrics)}  # fmt: skip
        latest_t = frame["t_s"].max()
        rows = [
            tuple(r) for r in frame[(frame["t_s"] == latest_t) & frame["metric"].isin(names)].itertuples(index=False)
        ]
        history = self._identity.setdefault(source, [])
        history.append(rows)
        del history[:-DUPLICATE_HISTORY]
        meta = dict(self._scrape_meta() or {}) if self._scrape_meta is not None else {}
        urls = [str(u) for u in meta.get("metrics_urls") or ()]
        meta["metrics_urls"] = urls + [u for u in self._identity if u not in urls]
        if len(self._identity) < 2 and not meta.get("metrics_duplicates"):
            return
        samples = pd.DataFrame(
            [row for scrapes in self._identity.values() for scrape in scrapes for row in scrape],
            columns=list(SERVER_METRICS_COLUMNS),
        ).astype({"t_s": float, "value": float})
        for found in find_duplicates(samples, meta, mapping):
            if found.url not in self.duplicates:
                self.duplicates[found.url] = found
                logger.info("live view: %s is the same server as %s (%s), counted once", found.url, found.same_as,
                            found.by)  # fmt: skip
