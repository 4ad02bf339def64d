"""The server's live queue for the LLM tab: running, waiting, KV usage and generation rate.

Fed by the run's :class:`~llm_locust.master.scraper.MetricsScraper` (as a second sink beside the
``server_metrics.csv`` writer) with each scrape's long-format rows ``(t_s, source, metric,
labels_json, value)``. Each scrape is normalised by :func:`llm_locust.analysis.server.prometheus.metrics_series` — the
same mapping tables the post-run analysis uses, so the live view and the report agree — on that
scrape plus the previous one of the same source (so counters such as generated tokens become a
rate over the interval that just ended). Several sources are combined as the analysis does:
running and waiting summed, KV usage averaged, the latest value of each source held.
"""

from __future__ import annotations

import logging
import math

import pandas as pd

from llm_locust.analysis.schema import SERVER_METRICS_COLUMNS
from llm_locust.analysis.server.prometheus import metrics_series
from llm_locust.analysis.server.series import VALUE_COLUMNS
from llm_locust.jsonsafe import json_safe

logger = logging.getLogger(__name__)

MAX_SAMPLES = 7200
"""Scrapes kept for the live chart (two hours at 1 s); older ones are dropped."""

_SUMMED = ("running", "waiting", "gen_tps", "prompt_tps", "preemptions_per_s")


class LiveServerSeries:
    """Normalised server samples as they are scraped (wall clock ``t_s``, Unix s)."""

    def __init__(self) -> None:
        self._previous: dict[str, list[tuple]] = {}
        self._latest: dict[str, dict[str, float]] = {}
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
        combined = {"t_s": t_s}
        for column in values:
            present = [v[column] for v in self._latest.values() if math.isfinite(v[column])]
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
