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
from llm_locust.analysis.server.series import SERIES_COLUMNS, VALUE_COLUMNS, empty_series, time_average


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
class PrefixCacheSpec:
    """A family's prefix-cache figures: hit ratio over a window = increase of the ``hits``
    counters / increase of the ``queries`` counters (both in prompt tokens).

    Attributes
    ----------
    hits : tuple of str
        Counters of prompt tokens served from the cache, summed.
    queries : tuple of str
        Counters whose sum is every prompt token looked up (vLLM's queries; llama.cpp's
        processed + cached, since its ``prompt_tokens_total`` leaves the cached ones out).
    prompts : tuple of str
        Counters of the prompt tokens the server took in, summed: where it looked none up while
        it took prompts in (vLLM with prefix caching off counts no queries), none of them came
        from a cache and the ratio is 0.
    gauge : str, optional
        A 0-1 hit-rate gauge read (time-averaged over the window) when the counters are absent
        (SGLang's ``sglang:cache_hit_rate`` on builds without ``cached_tokens_total``).
    """

    hits: tuple[str, ...]
    queries: tuple[str, ...]
    prompts: tuple[str, ...] = ()
    gauge: str | None = None


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
    prefix_cache: PrefixCacheSpec | None = None
    """The family's prefix-cache counters (None: it exposes none)."""


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
        found: tuple[pd.DataFrame, SeriesSpec] | None = None
        for spec in (s for s in specs if s.column == column):
            for name in spec.metrics:
                candidate = samples[samples["metric"] == name]
                if spec.labels and not candidate.empty:
                    candidate = candidate[_label_mask(candidate, spec.labels)]
                if not candidate.empty:
                    found = candidate, spec
                    break
            if found is not None:
                break
        if found is None:
            out[column] = np.nan
            continue
        rows, chosen = found
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


def counter_increase(samples: pd.DataFrame, metrics: tuple[str, ...], start_s: float, end_s: float) -> float:
    """Increase of counters over a window, summed over names, label sets and sources.

    Each series (name, source, label set) counts ``last value at or before end_s - last value at
    or before start_s``; a series with no sample at or before ``start_s`` is left out (it had not
    been scraped yet).

    Parameters
    ----------
    samples : pandas.DataFrame
        Long-format samples (``t_s``, ``source``, ``metric``, ``labels``, ``value``).
    metrics : tuple of str
        Counter sample names as exposed (``..._total``).
    start_s, end_s : float
        The window, Unix s.

    Returns
    -------
    float
        NaN when no series covers the window, or when one went down (a restart: its increase is
        unknown, never read as a negative or a zero).

    >>> s = pd.DataFrame({"t_s": [0.0, 5.0, 10.0], "source": "u", "metric": "c_total",
    ...                   "labels": "{}", "value": [1.0, 4.0, 9.0]})
    >>> counter_increase(s, ("c_total",), 0.0, 9.0)
    3.0
    """
    rows = samples[samples["metric"].isin(metrics)]
    total, seen = 0.0, False
    for _, series in rows.groupby(["metric", "source", "labels"], sort=False):
        times, values = series["t_s"].to_numpy(float), series["value"].to_numpy(float)
        order = np.argsort(times, kind="stable")
        times, values = times[order], values[order]
        before = np.searchsorted(times, start_s, side="right") - 1
        upto = np.searchsorted(times, end_s, side="right") - 1
        if before < 0 or upto < 0:
            continue
        increase = float(values[upto] - values[before])
        if increase < 0 or not np.isfinite(increase):
            return float("nan")
        total, seen = total + increase, True
    return total if seen else float("nan")


def prefix_cache_window(
    samples: pd.DataFrame, spec: PrefixCacheSpec, start_s: float, end_s: float
) -> tuple[float, float]:
    """(hit ratio 0-1, queried prompt tokens) of ``spec`` over one window.

    The ratio is ``counter_increase(hits) / counter_increase(queries)`` (:func:`counter_increase`);
    NaN when the counters are absent, went down, or nothing was queried - but 0 where nothing was
    queried while the ``prompts`` counters rose (the cache was not looked up). Without counters, the
    ``gauge`` time-averaged over the window (each scrape holds until the next; label sets and
    sources averaged), with NaN queried tokens.
    """
    queries = counter_increase(samples, spec.queries, start_s, end_s)
    hits = counter_increase(samples, spec.hits, start_s, end_s)
    if np.isfinite(queries) or spec.gauge is None or not (samples["metric"] == spec.gauge).any():
        ratio = hits / queries if np.isfinite(queries) and queries > 0 and np.isfinite(hits) else float("nan")
        if queries == 0 and spec.prompts and counter_increase(samples, spec.prompts, start_s, end_s) > 0:
            ratio = 0.0
        return float(ratio), float(queries)
    gauge = samples[samples["metric"] == spec.gauge].groupby("t_s", sort=True)["value"].mean()
    ratio = time_average(pd.Series(gauge.index, dtype=float), gauge.reset_index(drop=True), start_s, end_s)
    return ratio, float("nan")
