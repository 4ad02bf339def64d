"""What the server's metrics do not show, inferred from the run: KV pressure by token arithmetic,
a compute limit beside a ceiling.

Both are evidence for a secondary kind, never a primary on their own: they explain a plateau
from the configuration and the run's inputs, not from a counter of the server's.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from llm_locust.analysis.loadaxis import load_axis
from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.verdict.batching import _saturated_row
from llm_locust.analysis.verdict.knee import CriticalConcurrency
from llm_locust.analysis.verdict.types import BottleneckKind, Evidence, Rules

K = BottleneckKind

FIT_LOW, FIT_HIGH = 0.6, 1.1
"""Running at the saturated step between ``FIT_LOW`` x and ``FIT_HIGH`` x (+ 0.5) the requests the
token budget holds counts as a plateau the budget explains (block rounding keeps real engines
below the plain token quotient: vLLM with 640 tokens in 128-token blocks holds 4 requests of 110
tokens, not 5.8)."""


def kv_budget(config: ServerConfig) -> tuple[int, str, bool] | None:
    """The KV token budget the configuration implies: (tokens, what it is, per slot).

    vLLM: its startup log's ``KV cache size: N tokens`` (num GPU blocks x block size) or
    ``vllm:cache_config_info``; llama.cpp: ``n_ctx_slot`` (``-c`` split over the ``--parallel``
    slots: each slot holds one sequence of at most that many tokens, ``kv_unified = 'false'``);
    TGI: ``max_batch_total_tokens`` (the tokens its batches may hold in all). None when none
    was read.
    """
    if config.engine == "llamacpp" and config.max_model_len and config.batch_ceiling:
        return config.max_model_len, "n_ctx_slot (each slot's context)", True
    if config.kv_capacity_tokens:
        return config.kv_capacity_tokens, "KV cache size", False
    if config.token_budget and config.token_budget_name == "max_batch_total_tokens":
        return config.token_budget, "max_batch_total_tokens", False
    return None


def kv_tokens(
    usable: pd.DataFrame,
    critical: CriticalConcurrency,
    config: ServerConfig,
    request_tokens: float | None,
    rules: Rules,
) -> Evidence:
    """Rule ``kv_tokens``: KV pressure by token arithmetic, when the server reports no KV usage.

    ``fits = budget / request_tokens`` (:func:`kv_budget`; ``request_tokens`` = the run's mean
    prompt + max_tokens, the most one request holds); a per-slot budget (llama.cpp) holds one
    request a slot when it fits the slot, none otherwise. Holds when no usable step has a KV usage
    or preemption value, ``fits`` is below ``rules.running_ceiling`` x the configured ceiling (or
    no ceiling was read) and, at the first saturated step (else the first where requests wait),
    requests wait while running sits where the budget caps it (``FIT_LOW`` x fits <= running <=
    ``FIT_HIGH`` x fits + 0.5).
    """

    def no(text: str) -> Evidence:
        return Evidence(rule="kv_tokens", kind=K.KV_CACHE, holds=False, text=text)

    reported = [c for c in ("kv_usage_ratio", "server_preemptions_per_s") if c in usable and usable[c].notna().any()]
    if reported:
        return no("the server reports its KV cache usage or preemptions: rule kv_cache reads them")
    budget = kv_budget(config)
    if budget is None or not request_tokens or not math.isfinite(request_tokens) or request_tokens <= 0:
        return no("no KV token budget read from the server's configuration, or no request size")
    tokens, what, per_slot = budget
    ceiling = config.batch_ceiling
    if per_slot:  # kv_budget gives a per-slot budget only with the slot count read
        fits = float(ceiling or 0) if request_tokens <= tokens else 0.0
    else:
        fits = tokens / request_tokens
    axis = load_axis(usable)
    row, _ = _saturated_row(usable, critical)
    if row is None:
        rows = usable[usable["server_waiting"] > rules.waiting_threshold]
        if rows.empty:
            return no("no usable step where requests wait")
        row = rows.iloc[0]
    running, waiting = float(row["server_running"]), float(row["server_waiting"])
    source = config.sources.get("kv_capacity_tokens") or config.sources.get("max_model_len") or "its configuration"
    values = {
        axis.value_key: row[axis.column],
        "kv_budget_tokens": float(tokens),
        "request_tokens": float(request_tokens),
        "fits_requests": fits,
        "server_running": running,
        "configured_ceiling": math.nan if ceiling is None else float(ceiling),
    }
    units = {
        axis.value_key: axis.value_unit,
        "kv_budget_tokens": "tokens",
        "request_tokens": "tokens",
        "fits_requests": "requests",
        "server_running": "requests",
        "configured_ceiling": "requests",
    }
    below = ceiling is None or fits < rules.running_ceiling * ceiling
    capped = bool(np.isfinite(running) and FIT_LOW * fits <= running <= FIT_HIGH * fits + 0.5)
    holds = bool(below and capped and waiting > rules.waiting_threshold)
    arithmetic = (
        f"by token arithmetic the {what} of {tokens:,} tokens [{source}] holds {fits:.1f} requests of "
        f"{request_tokens:.0f} tokens (mean prompt + max_tokens)"
    )
    if holds:
        said = f" below the configured {config.batch_ceiling_name or 'batch ceiling'} = {ceiling}" if ceiling else ""
        text = (
            f"at {axis.fmt(row[axis.column])} running sits at {running:.2f}{said} while {waiting:.2f} wait, and "
            f"{arithmetic}: KV pressure the server's metrics do not show"
        )
    else:
        text = f"{arithmetic}; at {axis.fmt(row[axis.column])} running {running:.2f}, waiting {waiting:.2f}"
    return Evidence(rule="kv_tokens", kind=K.KV_CACHE, holds=holds, values=values, units=units, text=text)


def compute_beside_ceiling(
    usable: pd.DataFrame, critical: CriticalConcurrency, primary_holds: bool, rules: Rules
) -> Evidence:
    """Rule ``compute_beside_ceiling``: a ceiling holds, and each added sequence also slows the others.

    From the first usable step to the last step before the saturation (the critical step),
    running rose; TPOT p50 grew by ``g = (tpot_c / tpot_1) ** (1 / log2(running_c / running_1))``
    per doubling of running. Holds when ``primary_holds`` (a ceiling kind is the primary) and
    ``g >= rules.compute_tpot_growth``: past the ceiling the batch would gain at most ``2 / g``
    per doubling, so raising the ceiling buys less than it would on a memory-bound engine.
    """
    axis = load_axis(usable)
    row, _ = _saturated_row(usable, critical)
    if row is None or usable.empty:
        return Evidence(rule="compute_beside_ceiling", kind=K.COMPUTE, holds=False, text="no saturated step")
    rows = usable.reset_index(drop=True)
    before = rows[rows[axis.column] < row[axis.column]]
    first, last = rows.iloc[0], (before.iloc[-1] if len(before) else None)
    if last is None or not (last["server_running"] > 1.5 * first["server_running"] > 0):
        return Evidence(
            rule="compute_beside_ceiling", kind=K.COMPUTE, holds=False, text="running did not rise before the ceiling"
        )
    doublings = math.log2(float(last["server_running"]) / float(first["server_running"]))
    t1, tc = float(first["tpot_p50_ms"]), float(last["tpot_p50_ms"])
    growth = (tc / t1) ** (1.0 / doublings) if t1 > 0 and np.isfinite(tc) else math.nan
    values = {
        axis.value_key: last[axis.column],
        "tpot_growth_per_doubling": growth,
        "tpot_p50_ms": tc,
        "first_tpot_p50_ms": t1,
        "server_running": float(last["server_running"]),
        "first_server_running": float(first["server_running"]),
    }
    units = {
        axis.value_key: axis.value_unit,
        "tpot_growth_per_doubling": "ratio",
        "tpot_p50_ms": "ms",
        "first_tpot_p50_ms": "ms",
        "server_running": "requests",
        "first_server_running": "requests",
    }
    holds = bool(primary_holds and np.isfinite(growth) and growth >= rules.compute_tpot_growth)
    text = (
        f"up to {axis.fmt(last[axis.column])} TPOT p50 grew {t1:.1f} -> {tc:.1f} ms while running rose "
        f"{first['server_running']:.2f} -> {last['server_running']:.2f} (x{growth:.2f} per doubling)"
    )
    if holds:
        text += (
            f": each added sequence slows the others, so a higher ceiling would gain at most x{2 / growth:.2f} "
            "per doubling (compute beside the ceiling)"
        )
    return Evidence(rule="compute_beside_ceiling", kind=K.COMPUTE, holds=holds, values=values, units=units, text=text)
