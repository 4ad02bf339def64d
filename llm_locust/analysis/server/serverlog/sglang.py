"""SGLang server logs: Prefill and Decode batch lines (old and new punctuation), startup config.

Formats, copied from SGLang's source:

- line prefix (``python/sglang/srt/utils/common.py`` ``configure_logger``): ``"[%(asctime)s{prefix}]
  %(message)s"`` where prefix is e.g. ``" TP0"`` or ``" DP1 TP0"``; datefmt ``"%m-%d %H:%M:%S"``
  (2025, no year), ``"%Y-%m-%d %H:%M:%S"`` (2024) or ``"%H:%M:%S"`` (early 2024).
- new punctuation (``python/sglang/srt/managers/scheduler_metrics_mixin.py``, 2025):
  ``"Prefill batch, #new-seq: {n}, #new-token: {n}, #cached-token: {n}, token usage: {:.2f},
  #running-req: {n}, #queue-req: {n}, "`` and ``"Decode batch, #running-req: {n}, #token: {n},
  token usage: {:.2f}, cuda graph: {b}, gen throughput (token/s): {:.2f}, #queue-req: {n}, "``.
- old punctuation (``python/sglang/srt/managers/scheduler.py``, 0.3-0.4): ``"Prefill batch.
  #new-seq: …, #new-token: …, #cached-token: …, token usage: …, #running-req: …, #queue-req: …"``
  (earlier ``"Prefill batch(mixed #running-req: {n}). #new-seq: …"``) and ``"Decode batch.
  #running-req: …, #token: …, token usage: …, gen throughput (token/s): …, #queue-req: …"``.
- startup (scheduler): ``"max_total_num_tokens={}, chunked_prefill_size={}, max_prefill_tokens={},
  max_running_requests={}, context_len={}, available_gpu_mem={:.2f} GB"``.

Normalised: a Prefill line's running = the last ``#running-req`` (requests already decoding) +
``#new-seq`` (admitted now); a Decode line's running = ``#running-req``; waiting = ``#queue-req``;
KV usage = ``token usage`` (0-1; ``full token usage`` on hybrid models); gen tokens/s from Decode
lines. Data-parallel ranks (``DPn`` in the prefix) are summed.
"""

from __future__ import annotations

import re

import numpy as np

from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.server.families import ServerFamily
from llm_locust.analysis.server.serverlog.base import (
    LogClock,
    LogText,
    ServerLogResult,
    count_int,
    hold_limit_s,
    keyed_series,
)
from llm_locust.analysis.server.serverlog.clock import place_with_date, place_without_year, resolve

PREFIX_RE = re.compile(
    r"^\[(?:(?P<date>\d{4}-\d\d-\d\d) |(?P<md>\d\d-\d\d) )?"
    r"(?P<hms>\d\d:\d\d:\d\d(?:\.\d+)?)(?P<tags>[^\]]*)\]"
)
KIND_RE = re.compile(r"(Prefill|Decode) batch[ .,(\[]")
RUNNING_RE = re.compile(r"#running-req: (\d+)")
NEW_SEQ_RE = re.compile(r"#new-seq: (\d+)")
QUEUE_RE = re.compile(r"#queue-req: (\d+)")
USAGE_RE = re.compile(r"(?<![\w-])(?:full )?token usage: ([\d.]+)")
GEN_RE = re.compile(r"gen throughput \(token/s\): ([\d.]+)")
DP_RE = re.compile(r"\bDP(\d+)")

KEEP: tuple[str, ...] = ("Decode batch", "Prefill batch", "max_total_num_tokens=")
"""Literals of the lines read beyond the log's head (see :mod:`llm_locust.analysis.server.serverlog.reader`)."""

MARKERS: tuple[str, ...] = ("Decode batch", "Prefill batch", "sglang", "max_running_requests=")


def own_times(log: LogText, lines: np.ndarray, clock: LogClock) -> np.ndarray:
    """Unix s from the ``[stamp TPn]`` prefix (NaN without date, or without prefix)."""
    dated, md, where_dated, where_md = [], [], [], []
    for k, number in enumerate(lines):
        match = PREFIX_RE.match(log.line(int(number)))
        if not match:
            continue
        if match.group("date"):
            dated.append(f"{match.group('date')} {match.group('hms')}")
            where_dated.append(k)
        elif match.group("md"):
            md.append(f"{match.group('md')} {match.group('hms')}")
            where_md.append(k)
    out = np.full(len(lines), np.nan)
    if dated:
        out[np.array(where_dated, int)] = place_with_date(dated, clock)
    if md:
        out[np.array(where_md, int)] = place_without_year(md, clock)
    return out


def place(log: LogText, lines: np.ndarray, clock: LogClock) -> np.ndarray:
    """Unix s of arbitrary lines under the clock's policy."""
    return resolve(own_times(log, lines, clock), lines, log, clock)[0]


def parse(log: LogText, clock: LogClock) -> ServerLogResult:
    """Batch lines -> normalised series; the scheduler's startup line -> config."""
    numbers = sorted(set(log.lines_with("Decode batch")) | set(log.lines_with("Prefill batch")))
    lines: list[int] = []
    keys: list[str] = []
    cols: dict[str, list[float]] = {c: [] for c in ("running", "waiting", "kv_usage_ratio", "gen_tps")}
    for number in numbers:
        text = log.line(number)
        kind = KIND_RE.search(text)
        running = RUNNING_RE.findall(text)
        queue = QUEUE_RE.search(text)
        if not kind or not running or not queue:
            continue
        count, waiting = count_int(running[-1]), count_int(queue.group(1))
        if count is None or waiting is None:
            continue
        if kind.group(1) == "Prefill":
            new = NEW_SEQ_RE.search(text)
            count += (count_int(new.group(1)) or 0) if new else 0
        usage, gen = USAGE_RE.search(text), GEN_RE.search(text)
        prefix = PREFIX_RE.match(text)
        dp = DP_RE.search(prefix.group("tags")) if prefix else None
        lines.append(number)
        keys.append(dp.group(1) if dp else "0")
        cols["running"].append(float(count))
        cols["waiting"].append(float(waiting))
        cols["kv_usage_ratio"].append(float(usage.group(1)) if usage else np.nan)
        cols["gen_tps"].append(float(gen.group(1)) if gen else np.nan)
    line_arr = np.array(lines, dtype=np.int64)
    times, how = resolve(own_times(log, line_arr, clock), line_arr, log, clock)
    key_arr = np.array(keys, dtype=object)
    values = {c: np.array(v, float) for c, v in cols.items()}
    hold = hold_limit_s(times[key_arr == key_arr[0]]) if len(key_arr) else None
    series = keyed_series(times, key_arr, values, max_hold_s=hold)
    n_ranks = len(set(keys))
    notes = (f"{n_ranks} data-parallel ranks summed",) if n_ranks > 1 else ()
    suffix = f" (read as local time {clock.tz})" if "own stamps" in how else ""
    return ServerLogResult(
        family=ServerFamily.SGLANG,
        series=series,
        config=config(log),
        data_lines=len(line_arr),
        unplaced_lines=tuple(int(n) + 1 for n in line_arr[~np.isfinite(times)]),
        time_source=how + suffix,
        notes=notes,
    )


CONFIG_RES: dict[str, re.Pattern] = {
    "kv": re.compile(r"max_total_num_tokens=(\d+)"),
    "prefill": re.compile(r"max_prefill_tokens=(\d+)"),
    "running": re.compile(r"max_running_requests=(\d+)"),
    "ctx": re.compile(r"context_len=(\d+)"),
}
"""One pattern per key of the scheduler's startup line, each searched alone (linear; a single
pattern joining them with ``.*?`` backtracks quadratically on a line that repeats the keys)."""
CHUNK_RE = re.compile(r"chunked_prefill_size=(-?\d+|None)")
VERSION_RE = re.compile(r"sglang(?: version|==| v)\s*(\d+\.\d+\.\d+\S*)", re.IGNORECASE)


def config(log: LogText) -> ServerConfig:
    """``max_running_requests`` (the batch ceiling), ``max_total_num_tokens`` (KV pool),
    ``max_prefill_tokens`` (token budget), ``chunked_prefill_size``, ``context_len``."""
    out = ServerConfig(engine=ServerFamily.SGLANG.value)
    for number in log.lines_with("max_total_num_tokens="):
        text = log.line(number)
        found = {key: count_int(m.group(1)) if (m := regex.search(text)) else None for key, regex in CONFIG_RES.items()}
        if None in (found["kv"], found["prefill"], found["running"]):
            continue
        src = f"{log.name} line {number + 1}"
        out = out.with_value("batch_ceiling", found["running"], src, batch_ceiling_name="max_running_requests")
        out = out.with_value("kv_capacity_tokens", found["kv"], src)
        out = out.with_value("token_budget", found["prefill"], src, token_budget_name="max_prefill_tokens")
        out = out.with_value("max_model_len", found["ctx"], src)
        chunk = CHUNK_RE.search(text)
        if chunk:
            out = out.with_value("chunked_prefill", chunk.group(1) not in ("None", "-1"), src)
        break
    version = VERSION_RE.search(log.text[:2_000_000])
    if version:
        out = out.with_value("version", version.group(1), f"{log.name} line {int(log.line_no(version.start())) + 1}")
    return out
