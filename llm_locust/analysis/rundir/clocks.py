"""How far the load machines' clocks can be trusted: notes from ``run.json`` ``clock_offsets``.

Each worker places its records on the master's clock with an offset it measured over Locust's
messages (the minimum-delay ping, ``llm_locust/client/clock.py``); the offset is known within
``± uncertainty_s`` (half that ping's round trip). A request is put into a ladder step by its
``t_start_s``, and only the steady window after the warm-up counts, so an uncertainty that is a
sizeable part of the warm-up could move requests across a window's edge: that is worth a note.
"""

from __future__ import annotations

import math
from typing import Any

WARMUP_FRACTION = 0.1
"""A worker's clock uncertainty above this fraction of the warm-up gets a note."""


WINDOWED_SHAPES: frozenset[str] = frozenset({"ladder", "rate"})
"""run.json ``shape.kind`` values whose requests are placed into step windows: only there can a
clock offset move a request across a window's edge."""


def clock_notes(meta: dict[str, Any]) -> list[str]:
    """Notes on ``meta["clock_offsets"]`` (absent: none): at most two lines, whatever the number
    of workers.

    Parameters
    ----------
    meta : dict
        ``run.json``: ``clock_offsets`` (list of ``{"worker", "offset_s", "uncertainty_s",
        "delay_s", "samples"}``, s), ``shape.kind`` and ``shape.warmup_s`` (s).

    Returns
    -------
    list of str
        Nothing for a shape without step windows (``baseline``, ``none``: no window edge for a
        request to cross, so the offsets do not matter). Else one note naming every worker
        whose uncertainty exceeds :data:`WARMUP_FRACTION` x the warm-up (or any uncertainty
        when there is no warm-up), and one naming every worker with no exchange at all or an
        entry that is not readable.
    """
    offsets = meta.get("clock_offsets")
    shape = meta.get("shape") or {}
    if not isinstance(offsets, list) or shape.get("kind", "ladder") not in WINDOWED_SHAPES:
        return []
    warmup_s = float(shape.get("warmup_s") or 0.0)
    limit_s = WARMUP_FRACTION * warmup_s
    unmeasured, loose = [], []
    for entry in offsets:
        worker = entry.get("worker", "?") if isinstance(entry, dict) else "?"
        uncertainty = entry.get("uncertainty_s") if isinstance(entry, dict) else None
        if not isinstance(uncertainty, (int, float)) or not math.isfinite(uncertainty):
            unmeasured.append(str(worker))
        elif uncertainty > limit_s:
            loose.append(f"{worker} {entry.get('offset_s', math.nan):+.3f} s ±{uncertainty * 1000:.0f} ms")
    notes = []
    if loose:
        notes.append(
            f"clock offset{'s' if len(loose) > 1 else ''} known only within more than {WARMUP_FRACTION:.0%} "
            f"of the {warmup_s:g} s warm-up (worker {'; '.join(loose)}): requests near a step's edges "
            "may be placed in the wrong window"
        )
    if unmeasured:
        notes.append(
            f"no clock offset measured for worker{'s' if len(unmeasured) > 1 else ''} {', '.join(unmeasured)}: "
            "their records are on their own clock"
        )
    return notes
