"""Per step: did the prompts have the lengths the workload built, and how much did the prefix cache hit.

Two checks of a fixed-length workload (``--input-tokens``; DESIGN.md's workload fingerprint):

- ``prompt_tokens_target_mean`` (tokens): mean target length of the step's requests that had one
  (``requests.csv`` ``prompt_tokens_target``); ``prompt_off_share`` (0-1): share of those, among
  the ones the server counted (``prompt_tokens``), whose count is off the target by more than
  :data:`OFF_TOLERANCE` of it. A step with ``prompt_off_share > 0`` is flagged: its inputs were
  not the ones asked for, so comparing it with another run means nothing. Both NaN when no
  request of the step had a target (a prompt set, a dataset) or a count.
- ``prefix_cache_hit_ratio`` (0-1) and ``prefix_cache_queried_tokens`` (tokens): the server's
  prefix-cache hits over queries during the step's window, from its own counters (vLLM's
  ``vllm:prefix_cache_hits_total`` / ``queries_total``, SGLang's cached / prompt tokens, llama.cpp's
  cached / processed + cached prompt tokens), read by the Prometheus mapping
  (:func:`llm_locust.analysis.server.prometheus.prefix_cache_steps`). NaN when the server exposes no such
  figure, nothing was looked up, or a counter went down (a restart).

A request belongs to the window its completion falls in, as in :func:`llm_locust.analysis.perstep.table.step_table`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from llm_locust.analysis.server.prometheus import PREFIX_CACHE_COLUMNS, prefix_cache_steps

OFF_TOLERANCE = 0.01
"""Largest relative difference between the server's prompt count and the target that is not flagged."""

INPUT_COLUMNS: tuple[str, ...] = (
    "prompt_tokens_target_mean",
    "prompt_off_share",
    *PREFIX_CACHE_COLUMNS,
)
"""Step-table columns added by :func:`input_columns`."""


def input_columns(
    table: pd.DataFrame,
    requests: pd.DataFrame,
    server_samples: pd.DataFrame | None,
    family: str | None = None,
) -> pd.DataFrame:
    """The :data:`INPUT_COLUMNS` of every step (module docstring for the definitions).

    Parameters
    ----------
    table : pandas.DataFrame
        A step table (``window_start_s``, ``window_end_s``: Unix s).
    requests : pandas.DataFrame
        ``requests.csv`` rows (``t_start_s``, ``e2e_ms``, ``error_kind``, ``prompt_tokens``,
        ``prompt_tokens_target``).
    server_samples : pandas.DataFrame or None
        ``server_metrics.csv`` rows (``t_s``, ``source``, ``metric``, ``labels``, ``value``).
    family : str, optional
        The server family of the samples (default: detected from their names).

    Returns
    -------
    pandas.DataFrame
        One row per step (same index as ``table``), float64.
    """
    end_s = requests["t_start_s"] + requests["e2e_ms"] / 1000.0
    ok = requests["error_kind"].fillna("") == ""
    target = requests.get("prompt_tokens_target", pd.Series(np.nan, index=requests.index))
    counted = ok & target.notna() & requests["prompt_tokens"].notna()
    cache = prefix_cache_steps(server_samples, table, family)
    rows = []
    for start, end in zip(table["window_start_s"], table["window_end_s"]):
        inside = counted & (end_s >= start) & (end_s < end)
        off = (requests.loc[inside, "prompt_tokens"] - target[inside]).abs() > OFF_TOLERANCE * target[inside]
        rows.append(
            {
                "prompt_tokens_target_mean": float(target[inside].mean()) if inside.any() else np.nan,
                "prompt_off_share": float(off.mean()) if inside.any() else np.nan,
            }
        )
    out = pd.DataFrame(rows, columns=list(INPUT_COLUMNS[:2]), index=table.index, dtype="float64")
    return out.join(cache)


def input_lines(table: pd.DataFrame) -> list[str]:
    """``summary.md`` lines: steps whose prompts were off their target, and the prefix-cache hit ratio.

    Empty when the table has neither a target length nor a prefix-cache figure.
    """
    lines: list[str] = []
    for row in table.itertuples(index=False):
        share = getattr(row, "prompt_off_share", np.nan)
        if share > 0:
            lines.append(
                f"- **step {row.step}: {share:.0%} of the prompts were off their target length "
                f"({row.prompt_tokens_target_mean:.0f} tokens on average) by more than {OFF_TOLERANCE:.0%}: "
                "the inputs were not the ones asked for**"
            )
    if "prompt_off_share" in table and table["prompt_off_share"].notna().any() and not lines:
        lines.append(f"- every prompt's length as the server counted it was within {OFF_TOLERANCE:.0%} of its target")
    if "prefix_cache_hit_ratio" in table and table["prefix_cache_hit_ratio"].notna().any():
        ratios = ", ".join(
            f"step {row.step} {row.prefix_cache_hit_ratio:.1%}"
            for row in table.itertuples(index=False)
            if not np.isnan(row.prefix_cache_hit_ratio)
        )
        lines.append(f"- prefix cache hits / queries (the server's counters, prompt tokens): {ratios}")
    return ["## Inputs", "", *lines, ""] if lines else []
