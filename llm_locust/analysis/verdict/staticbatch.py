"""Rule ``static_batch``: what a static batcher's batch log says about its ceiling.

A static batcher (llama.cpp ``--no-cont-batching``, an in-house ``collect(max_batch_size,
timeout)`` loop) runs each batch in lockstep to its longest member; requests that arrive while
it runs wait for the next one. Its batch log (:func:`llm_locust.analysis.server.batches.batch_stats`: per
step ``batch_size_p50``, ``batch_size_max``, ``queue_mean``) tells the two ways it limits:

- batches that fill to the ceiling (fill ratio = median batch size / ``batch_ceiling`` at least
  :data:`FULL_FILL_RATIO`) while a queue persists (``server_waiting`` or the batch lines'
  ``queue_mean`` above ``rules.waiting_threshold``): the static batch ceiling. The kind stays
  ``scheduler_ceiling`` - the batch ceiling caps the work in flight and requests queue, as for
  a continuous batcher at ``max_num_seqs`` - and this evidence names what differs: the step
  where batches first fill, and that a continuous batcher would admit into the running batch
  instead of holding the queue for a whole batch.
- small batches at low load whose waits hit the configured maximum: the batch timer's doing
  (rule ``batch_wait``, :func:`llm_locust.analysis.verdict.batching.batch_wait`).

Not a bottleneck kind of its own (``kind`` NONE, like ``batch_wait``): evidence and the
recommendations it calls for (continuous batching, the max batch size).
"""

from __future__ import annotations

import math

import pandas as pd

from llm_locust.analysis.loadaxis import load_axis
from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.verdict.types import BottleneckKind, Evidence, Rules

FULL_FILL_RATIO = 0.9
"""Median batch size / batch ceiling at or above which a step's batches count as full."""


def _queue(rows: pd.DataFrame) -> pd.Series:
    """Requests queued per step: the larger of the time-average ``server_waiting`` (a series
    line or /metrics) and the batch lines' ``queue_mean``. A batch line's queue is the requests
    left after the batch took its share: at a full closed loop it reads 0 at every batch start
    (the queue of the running batch's time has just become the next batch), while the queue
    was there all the batch long."""
    out = pd.Series(math.nan, index=rows.index, dtype="float64")
    for column in ("server_waiting", "queue_mean"):
        if column in rows.columns:
            out = pd.concat([out, rows[column].astype(float)], axis=1).max(axis=1)
    return out


def static_batch(usable: pd.DataFrame, config: ServerConfig, rules: Rules) -> Evidence:
    """Rule ``static_batch``: batches fill to the ceiling while a queue persists (module docstring).

    Parameters
    ----------
    usable : pandas.DataFrame
        The usable steps with the batch columns (``batch_size_p50``, ``queue_mean``, requests)
        of :data:`llm_locust.analysis.verdict.rules.BATCH_COLUMNS` and, where known, ``server_waiting``
        (requests, time-average).
    config : ServerConfig
        ``batch_ceiling`` (requests) and ``batch_ceiling_name`` from the server's log or metrics.
    rules : Rules
        ``waiting_threshold`` (requests).

    Returns
    -------
    Evidence
        Holds at the first step (lowest load) whose batches are full and queued, with values
        ``fill_ratio`` (ratio), ``batch_size_p50``, ``queue_mean`` (requests) and the step's
        load; does not hold, saying why, when the log has no batches, the ceiling is unknown, or
        no step's batches fill with a queue.
    """
    name = config.batch_ceiling_name or "batch ceiling"
    if "batch_size_p50" not in usable.columns or not usable["batch_size_p50"].notna().any():
        return Evidence(
            rule="static_batch",
            kind=BottleneckKind.NONE,
            holds=False,
            text=(
                "the log reports no batches (a static batcher's batch line is read as the batch table: "
                "[[log.batches]] with batch_size, batch_wait_ms, queue in its format file)"
            ),
        )
    ceiling = config.batch_ceiling
    if ceiling is None or ceiling < 1:
        return Evidence(
            rule="static_batch",
            kind=BottleneckKind.NONE,
            holds=False,
            text=f"the {name} is not known: cannot tell whether batches fill",
        )
    axis = load_axis(usable)
    rows = usable.sort_values(axis.column)
    fill = rows["batch_size_p50"].astype(float) / float(ceiling)
    queue = _queue(rows)
    full = rows[(fill >= FULL_FILL_RATIO) & (queue > rules.waiting_threshold)]
    queue = queue.loc[full.index]
    if full.empty:
        best = float(fill.max())
        return Evidence(
            rule="static_batch",
            kind=BottleneckKind.NONE,
            holds=False,
            values={"fill_ratio": best},
            units={"fill_ratio": "ratio"},
            text=f"no step's batches fill to the {name} = {ceiling} with a queue (median fill at most {best:.0%})",
        )
    row = full.iloc[0]
    ratio = float(row["batch_size_p50"]) / float(ceiling)
    values = {
        axis.value_key: row[axis.column],
        "fill_ratio": ratio,
        "batch_size_p50": float(row["batch_size_p50"]),
        "queue_mean": float(queue.iloc[0]),
        "batch_ceiling": float(ceiling),
    }
    units = {
        axis.value_key: axis.value_unit,
        "fill_ratio": "ratio",
        "batch_size_p50": "requests",
        "queue_mean": "requests",
        "batch_ceiling": "requests",
    }
    return Evidence(
        rule="static_batch",
        kind=BottleneckKind.NONE,
        holds=True,
        values=values,
        units=units,
        text=(
            f"at {axis.fmt(row[axis.column])} the batches are full (median {row['batch_size_p50']:.0f} of "
            f"the {name} = {ceiling}, fill {ratio:.0%}) while {queue.iloc[0]:.2f} requests queue "
            "on average: the static batch ceiling - each batch runs to its longest member and the "
            "queue waits for the next one"
        ),
    )


def running_from_batches(table: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """``table`` with running and waiting read from the batch lines where the log has no series.

    A static batcher's batch line (``batch started size=8 wait=100.0ms queue=3``) may be mapped
    in a format file three ways: as ``[[log.batches]]`` only (the documented way), as a
    ``[[log.series]]`` (size as ``running``, queue as ``waiting``), or both. With the batch table
    only, ``server_running`` is the step's mean batch size (``batch_size_mean``: each batch runs
    until the next starts) and ``server_waiting`` the batch lines' mean queue (``queue_mean``),
    so the rules read the same counts as from the series mapping. Steps that have a running or
    waiting value keep it.

    Returns
    -------
    (pandas.DataFrame, str)
        The table (a copy when changed) and a note for the verdict's evidence ("" when nothing
        was read from the batches).
    """
    if "batch_size_mean" not in table.columns or not table["batch_size_mean"].notna().any():
        return table, ""
    running = table["server_running"].astype(float)
    fill = running.isna() & table["batch_size_mean"].notna()
    if not fill.any():
        return table, ""
    out = table.copy()
    out.loc[fill, "server_running"] = out.loc[fill, "batch_size_mean"].astype(float)
    if "queue_mean" in out.columns:
        waiting = out["server_waiting"].astype(float)
        wait_fill = fill & waiting.isna()
        out.loc[wait_fill, "server_waiting"] = out.loc[wait_fill, "queue_mean"].astype(float)
    note = (
        f"running and waiting read from the log's batch lines (mean batch size and queue) in {int(fill.sum())} "
        "step(s): the log has no running series there"
    )
    return out, note
