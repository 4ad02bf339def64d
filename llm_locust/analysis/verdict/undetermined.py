"""When the run cannot decide: steps too short to tell, and saturations no kind's rule explains.

The verdict's contract (DESIGN.md): one primary kind, and only when its own rule holds; a run
the rules cannot separate is ``undetermined``, naming the two or three kinds it is compatible
with and the one measurement or rerun that tells them apart. Two rules here:

- :func:`steps_too_short`: the steps a decision rests on hold too little to decide (a window of
  fewer than ``rules.min_window_e2e`` requests' times in service; or few completions with a wide
  throughput interval, :func:`llm_locust.analysis.perstep.table.throughput_interval`).
- :func:`unexplained`: a step saturated (throughput stopped rising while requests queued or the
  batch was full) but neither ``batching_off``, ``kv_cache`` nor ``scheduler_ceiling`` holds.

Written here: these are the verdict's own rules (the playbooks' "日志里看不到批大小、排队数和吞吐字段时，
先把日志打出来再下结论").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from llm_locust.analysis.loadaxis import load_axis
from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.verdict.types import BottleneckKind, Evidence, Rules

K = BottleneckKind


@dataclass(frozen=True, kw_only=True)
class Undecided:
    """What an ``undetermined`` verdict says beyond its evidence.

    Attributes
    ----------
    candidates : tuple of BottleneckKind
        The kinds the run is compatible with (two or three).
    tells_apart : str
        The one measurement or rerun that separates them.
    """

    candidates: tuple[BottleneckKind, ...]
    tells_apart: str


def service_s(row: pd.Series) -> float:
    """A step's time in service per request, s: E2E p50 - TTFT p50 (prefill and decode after the
    queue), or E2E p50 where TTFT is missing; NaN without E2E.

    The window must hold a few of these for the batch to turn over and the step to reach its
    steady state. The queue wait is left out: past saturation it grows with the queue (without
    bound in an open loop), and says nothing about how fast the batch turns over.

    >>> round(service_s(pd.Series({"e2e_p50_ms": 7216.0, "ttft_p50_ms": 5452.0})), 3)
    1.764
    """
    e2e_s = float(row.get("e2e_p50_ms", np.nan)) / 1000.0
    ttft_s = float(row.get("ttft_p50_ms", np.nan)) / 1000.0
    if not np.isfinite(ttft_s) or not ttft_s < e2e_s:
        return e2e_s
    return e2e_s - ttft_s


def short_reason(row: pd.Series, rules: Rules) -> str:
    """Why one step is too short to decide ("" when it is long enough).

    Too short: its steady window ``window_s`` < ``rules.min_window_e2e`` x its time in service
    per request (:func:`service_s`); or
    fewer than ``rules.min_completions`` successful completions while its 95 % throughput
    interval (``output_tps_ci95_low/high`` around ``output_tps_prorated``) is wider than
    ``rules.max_tps_rel_halfwidth`` of the throughput, or missing. A table without the interval
    columns (hand-made, or from before they existed) is judged on the window alone.
    """
    window_s = float(row.get("window_s", np.nan))
    if not np.isfinite(window_s):
        window_s = float(row["window_end_s"]) - float(row["window_start_s"])
    in_service_s = service_s(row)
    if np.isfinite(in_service_s) and window_s < rules.min_window_e2e * in_service_s:
        return (
            f"a {window_s:.1f} s window holds {window_s / in_service_s:.1f} requests' time in service "
            f"(E2E - TTFT p50) of {in_service_s:.2f} s"
        )
    if "output_tps_ci95_high" not in row.index:
        return ""
    completed = int(row.get("completed", 0))
    if completed >= rules.min_completions:
        return ""
    tps = float(row.get("output_tps_prorated", np.nan))
    half = (float(row["output_tps_ci95_high"]) - float(row["output_tps_ci95_low"])) / 2.0
    rel = half / tps if tps > 0 else math.nan
    if np.isfinite(rel) and rel <= rules.max_tps_rel_halfwidth:
        return ""
    spread = f"throughput +/- {rel:.0%}" if np.isfinite(rel) else "no throughput interval"
    return f"{completed} completions and {spread} in its {window_s:.1f} s window"


def window_needed_s(row: pd.Series, rules: Rules) -> float:
    """The steady window a step would need, s: ``rules.min_window_e2e`` x its time in service
    (:func:`service_s`), and room
    for ``rules.min_completions`` completions at its request rate when it had fewer."""
    in_service_s = service_s(row)
    needed = rules.min_window_e2e * in_service_s if np.isfinite(in_service_s) else 0.0
    rps = float(row.get("request_rps", np.nan))
    if int(row.get("completed", 0)) < rules.min_completions and rps > 0:
        needed = max(needed, rules.min_completions / rps)
    return needed


def steps_too_short(
    usable: pd.DataFrame, deciding: Sequence[int], rules: Rules, *, warmup_s: float | None = None
) -> Evidence:
    """Rule ``steps_too_short``: a step the decision rests on is too short (:func:`short_reason`).

    Parameters
    ----------
    usable : pandas.DataFrame
        The usable steps.
    deciding : sequence of int
        ``step`` indices the decision compares (the first saturated step and the one before;
        with no saturation, the two highest).
    rules : Rules
    warmup_s : float, optional
        The run's warm-up per step, s: the recommended ``--dwell-s`` is warm-up + the window
        needed (rounded up to 5 s); without it the window alone is given.

    Returns
    -------
    Evidence
        Kind ``undetermined``; values ``short_steps``, ``window_needed_s`` and, with
        ``warmup_s``, ``dwell_s_needed``.
    """
    rows = usable[usable["step"].isin(list(deciding))]
    short = [(r, short_reason(r, rules)) for _, r in rows.iterrows()]
    short = [(r, why) for r, why in short if why]
    if not short:
        return Evidence(
            rule="steps_too_short",
            kind=K.UNDETERMINED,
            holds=False,
            values={"short_steps": 0},
            units={"short_steps": "steps"},
            text="the steps the decision rests on are long enough",
        )
    axis = load_axis(usable)
    needed = max(window_needed_s(r, rules) for r, _ in short)
    values = {"short_steps": float(len(short)), "window_needed_s": needed}
    units = {"short_steps": "steps", "window_needed_s": "s"}
    if warmup_s is not None and math.isfinite(warmup_s):
        dwell = 5.0 * math.ceil((warmup_s + needed) / 5.0)
        values["dwell_s_needed"] = dwell
        units["dwell_s_needed"] = "s"
        use = f"use --dwell-s >= {dwell:g}"
    else:
        use = f"use a steady window of >= {math.ceil(needed):g} s a step"
    said = "; ".join(f"{axis.fmt(r[axis.column])}: {why}" for r, why in short)
    return Evidence(
        rule="steps_too_short",
        kind=K.UNDETERMINED,
        holds=True,
        values=values,
        units=units,
        text=f"steps too short to tell ({said}): {use}",
    )


def unexplained(row: pd.Series | None, config: ServerConfig, rules: Rules, *, hidden: Evidence) -> Undecided:
    """The candidates and the separating measurement for a saturated step no kind's rule explains.

    Parameters
    ----------
    row : pandas.Series or None
        The first saturated step (None: the saturation is not located).
    config : ServerConfig
        The configured batch ceiling, if read.
    hidden : Evidence
        The ``hidden_queue`` evidence (requests the server's counters do not show).
    """
    running = float(row["server_running"]) if row is not None else math.nan
    waiting = float(row["server_waiting"]) if row is not None else math.nan
    kv = float(row.get("kv_usage_ratio", math.nan)) if row is not None else math.nan
    if not np.isfinite(running):
        return Undecided(
            candidates=(K.SCHEDULER_CEILING, K.KV_CACHE, K.COMPUTE),
            tells_apart="the server's running and waiting counts over the run (--metrics-url for its Prometheus "
            "/metrics, or --server-log with a format that reads its batch or queue lines)",
        )
    if hidden.holds:
        return Undecided(
            candidates=(K.SCHEDULER_CEILING, K.COMPUTE),
            tells_apart="where the requests the server's counters miss wait: scrape every replica "
            "(--server-metrics-url per replica), or read the gateway's or the batcher's queue from its log",
        )
    ceiling = config.batch_ceiling
    if waiting > rules.waiting_threshold and not np.isfinite(kv):
        said = f" of the configured {ceiling}" if ceiling else ""
        return Undecided(
            candidates=(K.KV_CACHE, K.SCHEDULER_CEILING),
            tells_apart=f"the KV cache usage during the run (requests wait while running is {running:.2f}{said}): the "
            "server's KV metric or log line, or its startup log's KV size (num_gpu_blocks, max_num_batched_tokens)",
        )
    return Undecided(
        candidates=(K.SCHEDULER_CEILING, K.COMPUTE),
        tells_apart="the batch size the server actually ran (its log's batch lines or startup config) against "
        "the requests that waited, with a longer dwell per step",
    )
