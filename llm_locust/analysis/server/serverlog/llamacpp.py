"""llama.cpp ``llama-server`` logs: slot launch/release lines, print_timing lines, ``n_slots``.

Formats, copied from llama.cpp's source (as vendored in llama-cpp-python 0.3.36, build
b1-0c1e570; the same since late 2024):

- line prefix (``common/log.cpp``): ``"%d.%02d.%03d.%03d "`` - minutes, seconds, milliseconds,
  microseconds since the server started - then the level letter (``I``, ``W``, ``E``, ``D``).
  No wall-clock stamp: lines are placed by anchoring this relative time on the arrival stamps
  taken while the run captured the log (without them a line cannot be placed).
- ``tools/server/server-common.h``: ``SLT_INF(slot, fmt) = LOG_INF("slot %12.*s: id %2d | task
  %d | " fmt, 12, __func__, …)`` and ``SRV_INF(fmt) = LOG_INF("srv  %12.*s: " fmt, …)``.
- ``tools/server/server-context.cpp``: ``launch_slot_…: "processing task, is_child = %d"`` (a
  slot becomes busy), ``release: "stop processing: n_tokens = %d, truncated = %d"`` (it is free
  again), ``print_timings: "prompt eval time = %10.2f ms / %5d tokens (…)"`` and ``"       eval
  time = %10.2f ms / %5d tokens (…)"``, ``load_model: "initializing, n_slots = %d, n_ctx_slot =
  %d, kv_unified = '%s'"`` (older builds: ``"initializing slots, n_slots = %d"``).

Normalised: running = busy slots (each slot from its launch line to its release line; exact,
not sampled); waiting is not logged at the default verbosity (deferred tasks are debug lines), so
it stays NaN - no data, never zero; generated and prompt tokens/s spread each request's
``eval time`` / ``prompt eval time`` tokens evenly over the time it took, ending at the line.
"""

from __future__ import annotations

import re

import numpy as np

from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.server.families import ServerFamily
from llm_locust.analysis.server.series import breakpoints_from_intervals, series_from_breakpoints
from llm_locust.analysis.server.serverlog.base import LogClock, LogText, ServerLogResult, count_int
from llm_locust.analysis.server.serverlog.clock import anchor_relative, resolve

REL_RE = re.compile(r"^(\d+)\.(\d\d)\.(\d\d\d)\.(\d\d\d) ")
LAUNCH_RE = re.compile(r"slot\s+launch_slot_: id\s+(\d+) \| task (-?\d+) \| processing task")
RELEASE_RE = re.compile(r"slot\s+release: id\s+(\d+) \| task (-?\d+) \| stop processing")
PROMPT_RE = re.compile(r"\|\s+prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens")
EVAL_RE = re.compile(r"\|\s+eval time =\s+([\d.]+) ms /\s+(\d+) tokens")

KEEP: tuple[str, ...] = ("processing task", "stop processing", "eval time =")
"""Literals of the lines read beyond the log's head (see :mod:`llm_locust.analysis.server.serverlog.reader`)."""

MARKERS: tuple[str, ...] = ("launch_slot_", "llama_server", "n_slots =", "llama_context:", "srv  ")


def relative_s(log: LogText, lines: np.ndarray) -> np.ndarray:
    """Seconds since the server started, from each line's prefix (NaN without one)."""
    out = np.full(len(lines), np.nan)
    for k, number in enumerate(lines):
        match = REL_RE.match(log.line(int(number)))
        if match:
            minutes, seconds, ms, us = (float(g) for g in match.groups())
            out[k] = minutes * 60 + seconds + ms / 1e3 + us / 1e6
    return out


def _own(log: LogText, lines: np.ndarray, anchor_s: float | None) -> np.ndarray:
    rel = relative_s(log, lines)
    return rel + anchor_s if anchor_s is not None else np.full(len(lines), np.nan)


def _anchor(log: LogText, most: int = 20_000) -> float | None:
    """Server time zero on the wall clock, from (at most ``most``) arrival-stamped lines."""
    if log.arrival_s is None:
        return None
    kept = log.kept_lines()
    stamped = kept[np.isfinite(log.arrival(kept))]
    if len(stamped) > most:
        stamped = stamped[np.linspace(0, len(stamped) - 1, most).astype(int)]
    return anchor_relative(relative_s(log, stamped), stamped, log) if len(stamped) else None


def place(log: LogText, lines: np.ndarray, clock: LogClock) -> np.ndarray:
    """Unix s of arbitrary lines: relative stamp + anchor, else arrival stamp."""
    return resolve(_own(log, lines, _anchor(log)), lines, log, clock, prefer_own=True)[0]


def parse(log: LogText, clock: LogClock) -> ServerLogResult:
    """Slot lines -> busy-slot intervals -> running; print_timing -> tokens/s; n_slots -> config."""
    anchor = _anchor(log)
    events = []  # (line, kind, slot)
    for anchor_text, regex, kind in (
        ("processing task", LAUNCH_RE, "launch"),
        ("stop processing", RELEASE_RE, "release"),
    ):
        for number in log.lines_with(anchor_text):
            match = regex.search(log.line(number))
            slot = count_int(match.group(1)) if match else None
            if slot is not None:
                events.append((number, kind, slot))
    events.sort()
    ev_lines = np.array([e[0] for e in events], dtype=np.int64)
    ev_times, how = resolve(_own(log, ev_lines, anchor), ev_lines, log, clock, prefer_own=True)
    starts, ends, open_at = [], [], {}
    for (_number, kind, slot), t in zip(events, ev_times):
        if not np.isfinite(t):
            continue
        if kind == "launch":
            open_at[slot] = t
        elif slot in open_at:
            starts.append(open_at.pop(slot))
            ends.append(t)
    bounds = place(log, np.array([0, log.n_lines - 1]), clock) if log.n_lines else np.array([])
    known = [float(v) for v in (*bounds, log.end_s(), *ev_times) if v is not None and np.isfinite(v)]
    columns = {}
    if known:
        valid_from, valid_to = min(known), max(known)
        for t in open_at.values():  # still busy at the end of the log
            starts.append(t)
            ends.append(valid_to)
        columns["running"] = breakpoints_from_intervals(
            np.array(starts), np.array(ends), valid_from_s=valid_from, valid_to_s=valid_to
        )
        columns.update(_token_rates(log, clock, anchor, valid_from, valid_to))
    unplaced = tuple(int(n) + 1 for n in ev_lines[~np.isfinite(ev_times)])
    notes = ["waiting requests are not in llama.cpp's log at the default verbosity (no data)"]
    if anchor is None and len(ev_lines):
        notes.append(
            "llama.cpp stamps count from the server start; without arrival stamps "
            "(a log captured with --server-log) its lines cannot be placed"
        )
    elif anchor is not None:
        how = "the lines' relative stamps anchored on arrival stamps taken during the run"
    return ServerLogResult(
        family=ServerFamily.LLAMACPP,
        series=series_from_breakpoints(columns, source="log"),
        config=config(log),
        data_lines=len(ev_lines),
        unplaced_lines=unplaced,
        time_source=how,
        notes=tuple(notes),
    )


def _token_rates(log, clock, anchor, valid_from, valid_to) -> dict:
    out = {}
    for column, regex, anchor_text in (
        ("gen_tps", EVAL_RE, "eval time ="),
        ("prompt_tps", PROMPT_RE, "prompt eval time ="),
    ):
        lines, durations, tokens = [], [], []
        for number in log.lines_with(anchor_text):
            text = log.line(number)
            match = regex.search(text)
            if match and (column == "prompt_tps" or "prompt eval" not in text):
                lines.append(number)
                durations.append(float(match.group(1)) / 1e3)
                tokens.append(float(match.group(2)))
        if not lines:
            continue
        arr = np.array(lines, dtype=np.int64)
        t_end, _ = resolve(_own(log, arr, anchor), arr, log, clock, prefer_own=True)
        duration = np.array(durations)
        if column == "prompt_tps":  # the prompt was evaluated before the generation
            t_end = t_end - _eval_after(log, arr)
        ok = np.isfinite(t_end) & (duration > 0)
        out[column] = breakpoints_from_intervals(
            t_end[ok] - duration[ok],
            t_end[ok],
            np.array(tokens)[ok] / duration[ok],
            valid_from_s=valid_from,
            valid_to_s=valid_to,
        )
    return out


def _eval_after(log: LogText, prompt_lines: np.ndarray) -> np.ndarray:
    """For each ``prompt eval time`` line, the ``eval time`` (s) on the line after it."""
    out = np.zeros(len(prompt_lines))
    for k, number in enumerate(prompt_lines):
        if number + 1 < log.n_lines:
            match = EVAL_RE.search(log.line(int(number) + 1))
            if match and "prompt eval" not in log.line(int(number) + 1):
                out[k] = float(match.group(1)) / 1e3
    return out


SLOTS_RE = re.compile(r"n_slots = (\d+)(?:, n_ctx_slot = (\d+))?")
BUILD_RE = re.compile(r"build(?:_info)?[:=]\s*\"?([\w.-]+(?: \([0-9a-f]+\))?)")


def config(log: LogText) -> ServerConfig:
    """``n_slots`` (the batch ceiling: ``--parallel``) and ``n_ctx_slot`` from the startup log."""
    out = ServerConfig(engine=ServerFamily.LLAMACPP.value)
    head = log.text[:4_000_000]
    match = SLOTS_RE.search(head)
    slots = count_int(match.group(1)) if match else None
    if match and slots is not None:
        src = f"{log.name} line {int(log.line_no(match.start())) + 1}"
        out = out.with_value("batch_ceiling", slots, src, batch_ceiling_name="n_slots")
        per_slot = count_int(match.group(2))
        if per_slot is not None:
            out = out.with_value("max_model_len", per_slot, src)
            out = out.with_value("kv_capacity_tokens", slots * per_slot, src)
    build = BUILD_RE.search(head)
    if build:
        out = out.with_value("version", build.group(1), f"{log.name} line {int(log.line_no(build.start())) + 1}")
    return out
