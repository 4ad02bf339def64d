"""Per-batch log lines -> the batches frame (:mod:`llm_locust.analysis.server.batches`).

Which servers log their batches, checked in their source:

- **SGLang** (``python/sglang/srt/managers/scheduler_metrics_mixin.py``, 2025; formats in
  :mod:`llm_locust.analysis.server.serverlog.sglang`): one ``Prefill batch, #new-seq: N, …, #running-req:
  R, #queue-req: Q`` line per prefill batch (``phase`` ``prefill``, size N) and a ``Decode batch,
  #running-req: R, …, #queue-req: Q`` line every ``decode_log_interval`` decode steps (``phase``
  ``decode``, size R). Neither says how long a batch waited to fill.
- **vLLM** V1 logs no per-step batch (only the interval's Running/Waiting), **TGI** none at the
  default level (its per-request ``queue_time`` is a request's wait, not a batch's) and
  **llama.cpp** per slot, not per batch: none of them gives a batch frame; their running series
  is the evidence there.
- **A user format file**: every line a ``[[log.batches]]`` pattern matches (searched line by
  line in the first ``USER_PATTERN_CHARS`` characters, as the series patterns) is one batch
  (``phase`` ``batch``),
  with the groups ``batch_size``, ``batch_wait_ms`` and ``queue``
  (:data:`llm_locust.analysis.server.userformat.BATCH_GROUPS`), for in-house static batchers.

Lines are placed in time by the family's own ``place`` (the same policy as its series).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from llm_locust.analysis.server.batches import empty_batches
from llm_locust.analysis.server.families import ServerFamily
from llm_locust.analysis.server.serverlog import sglang, user
from llm_locust.analysis.server.serverlog.base import USER_PATTERN_CHARS, LogClock, LogText
from llm_locust.analysis.server.serverlog.clock import resolve
from llm_locust.analysis.server.userformat import UserFormat


def _frame(t_s, phase, size, wait, queue) -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "t_s": np.asarray(t_s, float),
            "phase": pd.Series(phase, dtype=str),
            "batch_size": np.asarray(size, float),
            "batch_wait_ms": np.asarray(wait, float),
            "queue": np.asarray(queue, float),
        }
    )
    frame = frame[np.isfinite(frame["t_s"]) & np.isfinite(frame["batch_size"])]
    return frame.sort_values("t_s", kind="stable").reset_index(drop=True)


def _number(text: str | None) -> float:
    try:
        return float(text) if text is not None else np.nan
    except ValueError:
        return np.nan


def sglang_batches(log: LogText, clock: LogClock) -> pd.DataFrame:
    """Batches of an SGLang log (Prefill and Decode batch lines)."""
    numbers, phase, size, queue = [], [], [], []
    for anchor in ("Prefill batch", "Decode batch"):
        for number in log.lines_with(anchor):
            line = log.line(number)
            kind = sglang.KIND_RE.search(line)
            if kind is None:
                continue
            found = (sglang.NEW_SEQ_RE if kind.group(1) == "Prefill" else sglang.RUNNING_RE).search(line)
            if found is None:
                continue
            waiting = sglang.QUEUE_RE.search(line)
            numbers.append(number)
            phase.append(kind.group(1).lower())
            size.append(float(found.group(1)))
            queue.append(float(waiting.group(1)) if waiting else np.nan)
    if not numbers:
        return empty_batches()
    t_s = sglang.place(log, np.array(numbers, np.int64), clock)
    return _frame(t_s, phase, size, np.full(len(numbers), np.nan), queue)


def user_batches(log: LogText, clock: LogClock, fmt: UserFormat) -> pd.DataFrame:
    """Batches of any log through a user format's ``[[log.batches]]`` patterns."""
    hits: dict[int, dict[str, str]] = {}
    for number, text in zip(log.kept_lines().tolist(), log.kept_texts()):
        text = text[:USER_PATTERN_CHARS]  # as the series patterns (serverlog/user.py)
        for regex in fmt.batch_patterns:
            match = regex.search(text)
            if match:
                hits.setdefault(int(number), {}).update({k: v for k, v in match.groupdict().items() if v is not None})
    if not hits:
        return empty_batches()
    numbers = np.array(sorted(hits), dtype=np.int64)
    inline = {n: hits[n]["ts"] for n in hits if "ts" in hits[n]}
    own = user.own_times(log, numbers, clock, fmt, inline)
    t_s = resolve(own, numbers, log, clock)[0]
    rows = [hits[int(n)] for n in numbers]
    return _frame(
        t_s,
        ["batch"] * len(rows),
        [_number(r.get("batch_size")) for r in rows],
        [_number(r.get("batch_wait_ms")) for r in rows],
        [_number(r.get("queue")) for r in rows],
    )


def batch_events(
    log: LogText,
    *,
    clock: LogClock | None = None,
    family: ServerFamily | None = None,
    user_format: UserFormat | None = None,
) -> pd.DataFrame:
    """The batches a server log reports, one row per batch line.

    Parameters
    ----------
    log : LogText
    clock : LogClock, optional
        How stamps are placed (default: UTC, no year reference, auto).
    family : ServerFamily, optional
        The log's family (as :func:`llm_locust.analysis.server.serverlog.parse_server_log` found it);
        SGLang logs its batches, the other built-in families do not.
    user_format : UserFormat, optional
        Its ``[[log.batches]]`` patterns are used whatever the family.

    Returns
    -------
    pandas.DataFrame
        :data:`llm_locust.analysis.server.batches.BATCH_COLUMNS`, sorted by ``t_s``; empty when the log
        reports no batch (see the module docstring for which servers do). Lines that cannot be
        placed in time are left out.
    """
    clock = clock or LogClock()
    frames = []
    if user_format is not None and user_format.batch_patterns:
        frames.append(user_batches(log, clock, user_format))
    if family is ServerFamily.SGLANG:
        frames.append(sglang_batches(log, clock))
    frames = [f for f in frames if len(f)]
    if not frames:
        return empty_batches()
    out = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    return out.sort_values("t_s", kind="stable").reset_index(drop=True)
