"""Scraped Prometheus samples -> the normalised server series and what they say about the config.

One mapping table per family (``vllm``, ``sglang``, ``tgi``, ``llamacpp``, ``triton``; a user
format file adds a ``generic`` one); the family is detected from the sample names. Entry points:
:func:`metrics_series`, :func:`metrics_config`, :func:`info_config` (``/props``, ``/info``),
:func:`detect_family`, :func:`prefix_cache_steps` (the prefix-cache hit ratio per window).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.server.families import ServerFamily, parse_family
from llm_locust.analysis.server.freshness import ScrapeFreshness
from llm_locust.analysis.server.prometheus import llamacpp, sglang, tgi, triton, vllm
from llm_locust.analysis.server.prometheus.mapping import (
    Combine,
    FamilyMapping,
    PrefixCacheSpec,
    SampleKind,
    SeriesSpec,
    normalise,
    prefix_cache_window,
)
from llm_locust.analysis.server.series import empty_series

MAPPINGS: dict[ServerFamily, FamilyMapping] = {
    m.family: m for m in (vllm.MAPPING, sglang.MAPPING, tgi.MAPPING, llamacpp.MAPPING, triton.MAPPING)
}
"""Built-in mapping table per family (explicit list, no import-time registration)."""

__all__ = [
    "MAPPINGS",
    "Combine",
    "FamilyMapping",
    "PrefixCacheSpec",
    "SampleKind",
    "SeriesSpec",
    "detect_family",
    "info_config",
    "metrics_config",
    "metrics_series",
    "prefix_cache_steps",
]

PREFIX_CACHE_COLUMNS: tuple[str, ...] = ("prefix_cache_hit_ratio", "prefix_cache_queried_tokens")
"""Columns of :func:`prefix_cache_steps`."""


def _mappings(user: FamilyMapping | None) -> dict[ServerFamily, FamilyMapping]:
    return {**MAPPINGS, ServerFamily.GENERIC: user} if user is not None else MAPPINGS


def detect_family(samples: pd.DataFrame, user: FamilyMapping | None = None) -> ServerFamily | None:
    """The family whose sample names appear most in ``samples``; None when none does.

    A user mapping (``generic``) counts its own metric names instead of prefixes.
    """
    if samples.empty:
        return None
    names = pd.Series(samples["metric"].astype(str).unique())
    best, best_hits = None, 0
    for family, mapping in _mappings(user).items():
        if family is ServerFamily.GENERIC:
            wanted = {n for spec in mapping.specs for n in spec.metrics}
            hits = int(names.isin(wanted).sum())
        else:
            hits = int(names.str.startswith(mapping.prefixes).sum())
        if hits > best_hits:
            best, best_hits = family, hits
    return best


def metrics_series(
    samples: pd.DataFrame,
    family: ServerFamily | str | None = None,
    *,
    user: FamilyMapping | None = None,
    freshness: ScrapeFreshness | None = None,
) -> pd.DataFrame:
    """Normalised series (``source`` = ``"metrics"``) of scraped samples.

    Parameters
    ----------
    samples : pandas.DataFrame
        ``server_metrics.csv`` rows (``t_s``, ``source``, ``metric``, ``labels``, ``value``).
    family : ServerFamily or str, optional
        Defaults to :func:`detect_family`.
    user : FamilyMapping, optional
        The ``generic`` mapping of a user format file.
    freshness : ScrapeFreshness, optional
        How long a sample holds (:mod:`llm_locust.analysis.server.freshness`): the run's scrape interval
        and failed scrapes.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`llm_locust.analysis.server.series.SERIES_COLUMNS`; empty when no family is recognised.

    Raises
    ------
    ValueError
        If ``family`` names no known family, or ``generic`` without a user mapping.
    """
    family = parse_family(family)
    if family is None:
        family = detect_family(samples, user)
    if family is None or samples.empty:
        return empty_series()
    mappings = _mappings(user)
    if family not in mappings:
        raise ValueError(
            f"no metrics mapping for family {family.value!r}: give a user format file with a [metrics] table"
        )
    return normalise(samples, mappings[family].specs, freshness)


def prefix_cache_steps(
    samples: pd.DataFrame | None,
    windows: pd.DataFrame,
    family: ServerFamily | str | None = None,
) -> pd.DataFrame:
    """The server's prefix-cache hit ratio over each window, from its own counters.

    Parameters
    ----------
    samples : pandas.DataFrame or None
        ``server_metrics.csv`` rows (``t_s``, ``source``, ``metric``, ``labels``, ``value``).
    windows : pandas.DataFrame
        ``window_start_s``, ``window_end_s`` (Unix s), one row per step.
    family : ServerFamily or str, optional
        Defaults to :func:`detect_family`.

    Returns
    -------
    pandas.DataFrame
        Same index as ``windows``, float64 columns :data:`PREFIX_CACHE_COLUMNS`:
        ``prefix_cache_hit_ratio`` (0-1: prompt tokens found in the cache / prompt tokens looked
        up, increases of the family's counters over the window, summed over label sets and
        scraped endpoints: :class:`~llm_locust.analysis.server.prometheus.mapping.PrefixCacheSpec`) and
        ``prefix_cache_queried_tokens`` (tokens looked up in the window). The ratio is 0 where
        the server took prompts in but looked none up (its prefix cache off), NaN where the
        family exposes no such figure (TGI, Triton), a counter went down, or no prompt came.
    """
    out = pd.DataFrame(np.nan, index=windows.index, columns=list(PREFIX_CACHE_COLUMNS), dtype="float64")
    if samples is None or samples.empty:
        return out
    family = parse_family(family) or detect_family(samples)
    spec = MAPPINGS[family].prefix_cache if family in MAPPINGS else None
    if spec is None:
        return out
    for index, start, end in zip(windows.index, windows["window_start_s"], windows["window_end_s"]):
        out.loc[index, list(PREFIX_CACHE_COLUMNS)] = prefix_cache_window(samples, spec, float(start), float(end))
    return out


def metrics_config(
    samples: pd.DataFrame, family: ServerFamily | str | None = None, *, user: FamilyMapping | None = None
) -> ServerConfig:
    """Configuration exposed as samples (info gauges) by the detected family."""
    found = parse_family(family) or detect_family(samples, user)
    if found is None or (mapping := _mappings(user).get(found)) is None:
        return ServerConfig()
    config = mapping.config(samples) if mapping.config is not None else ServerConfig()
    return config if config.engine else dataclasses.replace(config, engine=found.value)


def _int(value) -> int | None:
    try:
        return None if value is None or isinstance(value, bool) else int(value)
    except (TypeError, ValueError):
        return None


def info_config(server_info: dict) -> ServerConfig:
    """Configuration from the JSON of ``GET /props`` (llama.cpp) or ``GET /info`` (TGI).

    Parameters
    ----------
    server_info : dict
        ``{url: parsed JSON body}`` as stored in ``server_info.json``.

    Returns
    -------
    ServerConfig
        llama.cpp ``/props`` (``tools/server/server-context.cpp``, ``total_slots``, per-slot
        ``n_ctx``, ``build_info``); TGI ``/info`` (``router/src/lib.rs`` ``Info``:
        ``max_batch_size``, ``max_batch_total_tokens``, ``max_total_tokens``, ``version``).
    """
    out = ServerConfig()
    for url, body in (server_info or {}).items():
        if not isinstance(body, dict):
            continue
        if "total_slots" in body:
            slots = _int(body.get("total_slots"))
            settings = body.get("default_generation_settings") or {}
            n_ctx = _int(settings.get("n_ctx")) if isinstance(settings, dict) else None
            source = f"{url} total_slots"
            out = dataclasses.replace(out, engine=out.engine or ServerFamily.LLAMACPP.value)
            out = out.with_value("batch_ceiling", slots, source, batch_ceiling_name="n_slots")
            out = out.with_value("version", body.get("build_info"), f"{url} build_info")
            out = out.with_value("max_model_len", n_ctx, f"{url} n_ctx")
            if slots is not None and n_ctx is not None:
                out = out.with_value("kv_capacity_tokens", slots * n_ctx, f"{url} total_slots x n_ctx")
        elif "max_batch_total_tokens" in body or "max_concurrent_requests" in body:
            out = dataclasses.replace(out, engine=out.engine or ServerFamily.TGI.value)
            out = out.with_value(
                "batch_ceiling",
                _int(body.get("max_batch_size")),
                f"{url} max_batch_size",
                batch_ceiling_name="max_batch_size",
            )
            out = out.with_value(
                "token_budget",
                _int(body.get("max_batch_total_tokens")),
                f"{url} max_batch_total_tokens",
                token_budget_name="max_batch_total_tokens",
            )
            out = out.with_value(
                "kv_capacity_tokens", _int(body.get("max_batch_total_tokens")), f"{url} max_batch_total_tokens"
            )
            out = out.with_value("max_model_len", _int(body.get("max_total_tokens")), f"{url} max_total_tokens")
            out = out.with_value("version", body.get("version"), f"{url} version")
    return out
