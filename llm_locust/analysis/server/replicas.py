"""Several scraped ``/metrics`` endpoints: replicas to show one by one, duplicates to count once.

A run may scrape more than one endpoint (``--server-metrics-url`` repeated): the replicas behind
a gateway, or - by mistake - one server reached two ways (through the gateway and directly, by
two host names). ``server_metrics.csv`` keeps every sample with its ``source`` URL; this module
decides, from the samples and ``run.json``:

- **names**: each source's label in the report (run.json ``metrics_sources``, else the URL's
  ``host:port``: :func:`llm_locust.analysis.schema.source_names`);
- **duplicates** (:func:`find_duplicates`): two sources that are one server - said by the
  master's scraper (run.json ``metrics_duplicates``), or read here from equal
  ``process_start_time_seconds``, or, for a server that exposes no identity (llama.cpp), from
  counters that agree: every scrape of one source lies on the other's counter curve (between
  its scrapes just before and just after), while the counters move. A duplicate's samples are
  left out, so one server is never summed with itself;
- **replicas** (:func:`replicas_of`): the remaining sources that carry running or waiting, each
  with its own normalised series and its own configuration (``server_info.json``'s ``/props`` or
  ``/info`` asked of that endpoint's ``scheme://host:port``); their ceilings add up to the
  aggregate's (:func:`aggregate_config`).

Written here: which sources are one server is the analysis' own rule (no library has it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import numpy as np
import pandas as pd

from llm_locust.analysis.schema import source_names
from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.server.freshness import ScrapeFreshness
from llm_locust.analysis.server.prometheus.mapping import FamilyMapping, SampleKind, normalise
from llm_locust.analysis.server.series import empty_series

IDENTITY_METRIC = "process_start_time_seconds"
"""A gauge naming one server process (prometheus_client's process collector)."""

MIN_MOVES = 3
"""Scrapes of one source, checked against a moving counter of the other, needed before two
sources' agreeing counters say they are one server."""


@dataclass(frozen=True, kw_only=True)
class Duplicate:
    """A scraped source that is the same server as another.

    Attributes
    ----------
    url : str
        The duplicate (its samples are left out).
    same_as : str
        The source kept.
    by : str
        How it was recognised: ``process_start_time_seconds``, ``_created`` (the master's
        scraper, run.json) or ``counters``.
    """

    url: str
    same_as: str
    by: str


@dataclass(frozen=True, kw_only=True)
class Replica:
    """One scraped server among several.

    Attributes
    ----------
    name : str
        Its label (step-table columns ``server_running[name]`` ...).
    url : str
    series : pandas.DataFrame
        Its own normalised series (:mod:`llm_locust.analysis.server.series`).
    config : ServerConfig
        What its own ``/props`` or ``/info`` said (empty when it said nothing).
    """

    name: str
    url: str
    series: pd.DataFrame = field(default_factory=empty_series)
    config: ServerConfig = field(default_factory=ServerConfig)


def run_source_names(meta: dict, urls: list[str]) -> dict[str, str]:
    """``{url: name}`` of the scraped sources: run.json ``metrics_sources`` names where given
    (a name clashing with another is replaced by the URL), else :func:`llm_locust.analysis.schema.source_names`."""
    given = {
        str(item.get("url")): str(item.get("name"))
        for item in meta.get("metrics_sources") or []
        if isinstance(item, dict) and item.get("url") in urls and item.get("name")
    }
    try:
        return source_names(list(urls), given)
    except ValueError:
        return {url: url for url in urls}


def _order(meta: dict, urls: list[str]) -> list[str]:
    """``urls`` in run.json ``metrics_urls`` order (the ones it does not list last, sorted)."""
    listed = [u for u in meta.get("metrics_urls") or [] if u in urls]
    return listed + sorted(u for u in urls if u not in listed)


def _latest(samples: pd.DataFrame, metric: str) -> float | None:
    rows = samples[samples["metric"] == metric]
    return float(rows.sort_values("t_s")["value"].iloc[-1]) if len(rows) else None


def counters_agree(a: pd.DataFrame, b: pd.DataFrame, metrics: tuple[str, ...]) -> bool | None:
    """Whether two sources' counters are one server's, read from their samples.

    For every counter in ``metrics`` and label set both sources carry, each scrape of one source
    at ``t`` is checked against the other's scrapes around it: with the other's scrapes ``k`` at
    or before ``t`` and ``k + 1`` after, one server's monotone counter lies in ``[v[k - 1],
    v[k + 2]]`` (one scrape of slack either side: a scrape is stamped at its start, the server
    reads its counters a little later). The check runs both ways.

    Parameters
    ----------
    a, b : pandas.DataFrame
        ``server_metrics.csv`` rows of one source each (``t_s``, ``metric``, ``labels``, ``value``).
    metrics : tuple of str
        Counter names to compare (the family's).

    Returns
    -------
    bool or None
        False at the first scrape off the other's curve; True when none is and at least
        :data:`MIN_MOVES` checks fell where the counter moved; None when the counters never moved
        (idle servers cannot be told apart, nor need to be).

    >>> t = np.arange(10.0); mk = lambda t, v: pd.DataFrame({"t_s": t, "metric": "c", "labels": "{}", "value": v})
    >>> counters_agree(mk(t, 10 * t), mk(t + 0.5, 10 * t + 5), ("c",))
    True
    >>> counters_agree(mk(t, 10 * t), mk(t + 0.5, 6 * t), ("c",))
    False
    """
    moved = 0
    for metric in metrics:
        ra, rb = a[a["metric"] == metric], b[b["metric"] == metric]
        for labels in set(ra["labels"]) & set(rb["labels"]):
            sa = ra[ra["labels"] == labels].sort_values("t_s")
            sb = rb[rb["labels"] == labels].sort_values("t_s")
            for one, other in ((sa, sb), (sb, sa)):
                t_o, v_o = other["t_s"].to_numpy(float), other["value"].to_numpy(float)
                t_1, v_1 = one["t_s"].to_numpy(float), one["value"].to_numpy(float)
                k = np.searchsorted(t_o, t_1, side="right") - 1
                inside = (k >= 0) & (k + 1 < len(t_o))
                if not inside.any():
                    continue
                k = k[inside]
                low = v_o[np.clip(k - 1, 0, None)]
                high = v_o[np.clip(k + 2, None, len(v_o) - 1)]
                value = v_1[inside]
                if ((value < low - 1e-9) | (value > high + 1e-9)).any():
                    return False
                moved += int((high > low).sum())
    return True if moved >= MIN_MOVES else None


def find_duplicates(samples: pd.DataFrame, meta: dict, mapping: FamilyMapping | None) -> list[Duplicate]:
    """Sources that are the same server as one listed before them (module docstring).

    Parameters
    ----------
    samples : pandas.DataFrame
        ``server_metrics.csv`` rows.
    meta : dict
        run.json (``metrics_urls`` order, ``metrics_duplicates`` from the scraper).
    mapping : FamilyMapping or None
        The detected family's mapping: its counters are compared.

    Returns
    -------
    list of Duplicate
        At most one per duplicate URL, its ``same_as`` a source that is kept (a duplicate the
        scraper recognised before its first scrape was kept has no samples; it is listed all the
        same).
    """
    urls = _order(meta, sorted(samples["source"].astype(str).unique())) if len(samples) else []
    found: dict[str, Duplicate] = {}
    for item in meta.get("metrics_duplicates") or []:  # its own samples may be none: scraped no further
        if isinstance(item, dict) and isinstance(item.get("url"), str) and item.get("same_as") in urls:
            found[item["url"]] = Duplicate(url=item["url"], same_as=item["same_as"], by=str(item.get("by", "")))
    if len(urls) < 2:
        return list(found.values())
    groups = {url: group for url, group in samples.groupby(samples["source"].astype(str), sort=False)}
    counters = tuple(
        name for spec in (mapping.specs if mapping else ()) if spec.kind is SampleKind.COUNTER for name in spec.metrics
    )
    for i, later in enumerate(urls):
        if later in found:
            continue
        for first in urls[:i]:
            if first in found:
                continue
            start_a, start_b = _latest(groups[first], IDENTITY_METRIC), _latest(groups[later], IDENTITY_METRIC)
            if start_a is not None and start_b is not None:
                same, by = abs(start_a - start_b) < 1e-3, IDENTITY_METRIC
            else:
                same, by = bool(counters_agree(groups[first], groups[later], counters)), "counters"
            if same:
                found[later] = Duplicate(url=later, same_as=first, by=by)
                break
    return list(found.values())


def base_url(url: str) -> str:
    """``scheme://host:port`` of a URL.

    >>> base_url("http://127.0.0.1:8001/metrics")
    'http://127.0.0.1:8001'
    """
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def replicas_of(
    samples: pd.DataFrame,
    mapping: FamilyMapping,
    *,
    names: dict[str, str],
    info: dict,
    freshness: ScrapeFreshness | None = None,
    info_reader=None,
) -> tuple[Replica, ...]:
    """The replicas among the kept sources: each with running or waiting data, its own series and
    configuration; ``()`` with fewer than two.

    Parameters
    ----------
    samples : pandas.DataFrame
        ``server_metrics.csv`` rows, duplicates already left out.
    mapping : FamilyMapping
    names : dict
        ``{url: name}`` (:func:`run_source_names`).
    info : dict
        ``server_info.json`` (``{url: body}``); a replica's are the URLs on its ``scheme://host:port``.
    freshness : ScrapeFreshness, optional
    info_reader : callable, optional
        ``{url: body} -> ServerConfig`` (:func:`llm_locust.analysis.server.prometheus.info_config`).
    """
    out = []
    for url, group in samples.groupby(samples["source"].astype(str), sort=False):
        series = normalise(group, mapping.specs, freshness)
        if series.empty or not series[["running", "waiting"]].notna().to_numpy().any():
            continue
        own = {u: body for u, body in (info or {}).items() if base_url(u) == base_url(url)}
        config = info_reader(own) if info_reader is not None and own else ServerConfig()
        out.append(Replica(name=names.get(url, url), url=url, series=series, config=config))
    return tuple(sorted(out, key=lambda r: r.name)) if len(out) >= 2 else ()


SUMMED_FIELDS: tuple[str, ...] = ("batch_ceiling", "kv_capacity_tokens")
"""Configuration that adds up over replicas (slots, KV tokens); the rest is each replica's own."""


def aggregate_config(replicas: tuple[Replica, ...]) -> ServerConfig | None:
    """The replicas' summed ceilings (:data:`SUMMED_FIELDS`), where every replica said its own;
    None when none did. The aggregate's critical concurrency is about the sum of the replicas'.

    >>> from llm_locust.analysis.server.config import ServerConfig
    >>> r = lambda n, c: Replica(name=n, url=n, config=ServerConfig(batch_ceiling=c, batch_ceiling_name="n_slots"))
    >>> aggregate_config((r("a", 1), r("b", 3))).batch_ceiling
    4
    """
    if not replicas:
        return None
    out = ServerConfig()
    for name in SUMMED_FIELDS:
        values = [getattr(r.config, name) for r in replicas]
        if all(v is not None for v in values):
            source = "sum over replicas: " + " + ".join(f"{r.name} {v}" for r, v in zip(replicas, values))
            extra = {"batch_ceiling_name": replicas[0].config.batch_ceiling_name} if name == "batch_ceiling" else {}
            out = out.with_value(name, int(sum(values)), source, **extra)
    return None if out.empty else dataclasses.replace(out, engine=replicas[0].config.engine)
