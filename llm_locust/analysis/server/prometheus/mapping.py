"""The mapping-table machinery: scraped samples -> one normalised series, per server family.

Input is ``server_metrics.csv`` in long format (one row per sample per scrape: ``t_s`` wall clock
Unix s of the scrape, ``source`` the scraped URL, ``metric`` the sample name as exposed,
``labels`` a JSON object string, ``value``). A :class:`FamilyMapping` lists, per normalised
column, the sample names that carry it (first present wins), whether each is a gauge or a
counter, an optional label filter (Triton's ``request_type="active"``) and how label sets and
sources combine.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.server.families import ServerFamily
from llm_locust.analysis.server.freshness import ScrapeFreshness, end_stale
from llm_locust.analysis.server.series import SERIES_COLUMNS, VALUE_COLUMNS, empty_series


class SampleKind(str, enum.Enum):
    """How a sample is read: a gauge as is, a counter as its per-second rate."""

    GAUGE = "gauge"
    COUNTER = "counter"


class Combine(str, enum.Enum):
    """How the label sets of one scrape combine into one value (and sources into one series)."""

    SUM = "sum"
    MEAN = "mean"


@dataclass(frozen=True, kw_only=True)
class SeriesSpec:
    """One normalised series and the samples it is read from.

    Attributes
    ----------
    column : str
        Output column (one of :data:`llm_locust.analysis.server.series.VALUE_COLUMNS`).
    metrics : tuple of str
        Sample names, in order of preference: the first one present in the data is used.
    kind : SampleKind
    combine : Combine
        Applied over label sets (engines, ranks) and over sources (scraped URLs).
    labels : tuple of (str, str)
        Only samples carrying all these label values are read (e.g. ``("request_type",
        "active")``).
    scale : float, default 1.0
        Multiplies the value (e.g. 0.01 for a percentage).
    """

    column: str
    metrics: tuple[str, ...]
    kind: SampleKind = SampleKind.GAUGE
    combine: Combine = Combine.SUM
    labels: tuple[tuple[str, str], ...] = ()
    scale: float = 1.0


@dataclass(frozen=True, kw_only=True)
class FamilyMapping:
    """A server family's metric names.

    Attributes
    ----------
    family : ServerFamily
    prefixes : tuple of str
        Sample-name prefixes that identify the family (detection).
    specs : tuple of SeriesSpec
        In order of preference; a column may appear more than once (fallbacks).
    config : callable, optional
        ``samples -> ServerConfig`` reading configuration exposed as samples (info gauges).
    """

    family: ServerFamily
    prefixes: tuple[str, ...]
    specs: tuple[SeriesSpec, ...]
    config: Callable[[pd.DataFrame], ServerConfig] | None = field(default=None, compare=False)


def _label_mask(samples: pd.DataFrame, labels: tuple[tuple[str, str], ...]) -> pd.Series:
    mask = pd.Series(True, index=samples.index)
    for key, value in labels:
        needle = json.dumps(key) + ": " + json.dumps(value)
        mask &= samples["labels"].astype(str).str.contains(needle, regex=False)
    return mask


def normalise(
    samples: pd.DataFrame, specs: tuple[SeriesSpec, ...], freshness: ScrapeFreshness | None = None
) -> pd.DataFrame:
    """Normalised series (``source`` = ``"metrics"``) of scraped samples under ``specs``.

    A row at ``t_s`` describes the interval up to the next row (step function): gauges are the
    values scraped at ``t_s``; a counter rate is ``(v[k+1] - v[k]) / (t[k+1] - t[k])`` per label
    set and source, stored at ``t[k]`` (NaN - no data - on the last scrape and across a counter
    reset). Each source's values hold until its next scrape, within the bounds of
    :mod:`llm_locust.analysis.server.freshness` (hold limit, failed scrapes), past which they are NaN. Label
    sets combine per :class:`SeriesSpec`; several sources are put on the union of their
    instants and combined the same way, over the sources that carry the column: where one of
    them has no data, neither has the combination (a sum of the fresh sources only would be a
    wrong number).

    Parameters
    ----------
    samples : pandas.DataFrame
        Long-format samples (``t_s``, ``source``, ``metric``, ``labels``, ``value``).
    specs : tuple of SeriesSpec
    freshness : ScrapeFreshness, optional
        The run's scrape interval and failed scrapes; default: the interval read from the
        samples' own rhythm, no failures known.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`llm_locust.analysis.server.series.SERIES_COLUMNS`; empty when no sample matches.
    """
    wanted = {name for spec in specs for name in spec.metrics}
    samples = samples[samples["metric"].isin(wanted)]
    if samples.empty:
        return empty_series()
    per_source = [
        end_stale(_one_source(group, specs), freshness, str(source))
        for source, group in samples.groupby("source", sort=True)
    ]
    times = np.unique(np.concatenate([frame.index.to_numpy(float) for frame in per_source]))
    out = pd.DataFrame({"t_s": times, "source": "metrics"})
    for column in VALUE_COLUMNS:
        spec = next((s for s in specs if s.column == column), None)
        carrying = [f[column] for f in per_source if column in f.columns and f[column].notna().any()]
        if spec is None or not carrying:
            out[column] = np.nan
            continue
        held = pd.concat([c.reindex(times, method="ffill") for c in carrying], axis=1)
        combined = held.sum(axis=1) if spec.combine is Combine.SUM else held.mean(axis=1)
        out[column] = combined.where(held.notna().all(axis=1)).to_numpy("float64")
    return out[list(SERIES_COLUMNS)]


def _one_source(samples: pd.DataFrame, specs: tuple[SeriesSpec, ...]) -> pd.DataFrame:
    """Series of one scraped URL, indexed by scrape instant ``t_s``.

    Several specs may name the same column: the first one with samples in this source wins.
    """
    times = np.sort(samples["t_s"].unique())
    out = pd.DataFrame(index=pd.Index(times, name="t_s"))
    for column in dict.fromkeys(spec.column for spec in specs):
        rows, chosen = None, None
        for spec in (s for s in specs if s.column == column):
            for name in spec.metrics:
                candidate = samples[samples["metric"] == name]
                if spec.labels and not candidate.empty:
                    candidate = candidate[_label_mask(candidate, spec.labels)]
                if not candidate.empty:
                    rows, chosen = candidate, spec
                    break
            if rows is not None:
                break
        if rows is None:
            out[column] = np.nan
            continue
        wide = rows.pivot_table(index="t_s", columns="labels", values="value", aggfunc="last")
        wide = wide.reindex(times) * chosen.scale
        if chosen.kind is SampleKind.COUNTER:
            rate = (wide.shift(-1) - wide).div(np.diff(times, append=np.nan), axis=0)
            wide = rate.where(rate >= 0)
        if chosen.combine is Combine.SUM:
            out[column] = wide.sum(axis=1, min_count=1)
        else:
            out[column] = wide.mean(axis=1)
    return out


def latest_value(samples: pd.DataFrame, metric: str, labels: tuple[tuple[str, str], ...] = ()) -> float | None:
    """Value of ``metric`` (summed over label sets) at its latest scrape, or None."""
    rows = samples[samples["metric"] == metric]
    if labels and not rows.empty:
        rows = rows[_label_mask(rows, labels)]
    if rows.empty:
        return None
    last = rows[rows["t_s"] == rows["t_s"].max()]
    return float(last.groupby("labels")["value"].last().sum())


def latest_labels(samples: pd.DataFrame, metric: str) -> dict[str, str] | None:
    """Label set of ``metric``'s latest sample (an ``*_info`` gauge), or None."""
    rows = samples[samples["metric"] == metric]
    if rows.empty:
        return None
    try:
        return json.loads(rows.sort_values("t_s")["labels"].iloc[-1])
    except (TypeError, ValueError):
        return None
