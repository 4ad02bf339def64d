"""Server-side truth of a run, from its scraped metrics and/or its server log.

The pieces live one concept per module: :mod:`analysis.series` (the normalised series and its
time average), :mod:`analysis.prometheus` (metrics, one mapping table per family),
:mod:`analysis.serverlog` (logs, one parser per family plus a user-regex parser),
:mod:`analysis.serverconfig` (what the server says about its batching settings) and
:mod:`analysis.serversource` (which source a run's analysis uses). This module keeps the
earlier entry points: :func:`server_series` (metrics only) and :func:`time_average`.
"""

from __future__ import annotations

import pandas as pd

from analysis.families import ServerFamily
from analysis.prometheus import MAPPINGS as FAMILY_MAPPINGS
from analysis.prometheus import detect_family, metrics_series
from analysis.prometheus.mapping import Combine, SampleKind, SeriesSpec
from analysis.series import time_average

__all__ = ["MAPPINGS", "SERIES_COLUMNS", "Combine", "SampleKind", "SeriesSpec", "ServerFamily",
           "VLLM_MAPPING", "detect_family", "server_series", "time_average"]

VLLM_MAPPING: tuple[SeriesSpec, ...] = FAMILY_MAPPINGS[ServerFamily.VLLM].specs
"""vLLM V1 mapping (see :mod:`analysis.prometheus.vllm`)."""

MAPPINGS: dict[ServerFamily, tuple[SeriesSpec, ...]] = {
    family: mapping.specs for family, mapping in FAMILY_MAPPINGS.items()}
"""Mapping table (specs) per server family."""

SERIES_COLUMNS: tuple[str, ...] = ("t_s", "running", "waiting", "kv_usage_ratio", "gen_tps",
                                   "prompt_tps", "preemptions_per_s")
"""Columns of :func:`server_series` output (the normalised series without ``source``)."""


def server_series(samples: pd.DataFrame, family: ServerFamily | str | None = None) -> pd.DataFrame:
    """Normalised series of scraped samples, without the ``source`` column.

    See :func:`analysis.prometheus.metrics_series` (semantics: a row holds until the next; NaN is
    no data; counters become per-second rates).

    Raises
    ------
    ValueError
        If ``family`` names no known family (the message lists the known ones).
    """
    return metrics_series(samples, family)[list(SERIES_COLUMNS)].reset_index(drop=True)
