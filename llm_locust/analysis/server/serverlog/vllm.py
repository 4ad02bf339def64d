"""vLLM server logs: V1 and V0 stats lines, data-parallel engines, startup configuration.

Formats, copied from vLLM's source:

- line prefix (``vllm/logger.py``, 0.32.0): ``"{VLLM_LOGGING_PREFIX}(%(vllm_process_name)s
  pid=%(process)d) %(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s"`` with
  datefmt ``"%m-%d %H:%M:%S"`` (local time, no year); V0 (0.6.x): ``"%(levelname)s %(asctime)s
  %(filename)s:%(lineno)d] %(message)s"``.
- V1 stats (``vllm/v1/metrics/loggers.py``, 0.32.0, ``LoggingStatLogger.log``): prefix
  ``"Engine {:03d}: "`` or, aggregated over data-parallel engines, ``"{} Engines Aggregated: "``;
  then ``"Avg prompt throughput: %.1f tokens/s"``, ``"Avg generation throughput: %.1f tokens/s"``,
  ``"Running: %d reqs"``, ``"Waiting: %d reqs"``, optional ``"Deferred: %d reqs"``, ``"KV fetch:
  …"``, ``"Preemptions: %d"`` (in the interval), ``"%s KV cache usage: %.1f%%"`` (GPU, CPU, XPU…),
  optional ``"Prefix cache hit rate: %.1f%%"``, joined by ``", "``. A line is skipped while the
  engine is idle.
- V0 stats (``vllm/engine/metrics.py``, 0.6.x): ``"Avg prompt throughput: %.1f tokens/s, Avg
  generation throughput: %.1f tokens/s, Running: %d reqs, Swapped: %d reqs, Pending: %d reqs,
  GPU KV cache usage: %.1f%%, CPU KV cache usage: %.1f%%."``.
- startup: ``"non-default args: %s"`` (``vllm/entrypoints/serve/utils/api_utils.py:286``, a
  Python dict), V0 ``"args: Namespace(...)"``, ``"Initializing a V1 LLM engine (v%s) with config:
  %s"`` (``vllm/v1/engine/core.py``), ``"%s KV cache size: %s tokens, Maximum concurrency for %s
  tokens per request: %.2fx"`` (``vllm/v1/core/kv_cache_utils.py:2328``), ``"Chunked prefill is
  enabled with max_num_batched_tokens=%d."`` (``vllm/config/scheduler.py:308``).

Normalised: running = Running; waiting = Waiting (V1, which already includes deferred and
preempted requests) or Pending + Swapped (V0); KV usage = the first "KV cache usage" / 100;
gen/prompt tokens/s as logged (the average over the interval ending at the line);
preemptions/s = Preemptions / time since the engine's previous line. Engines are summed; when
"Engines Aggregated" lines exist, per-engine lines are ignored so nothing counts twice.
"""

from __future__ import annotations

import ast
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
from llm_locust.analysis.server.serverlog.clock import place_without_year, resolve

ANCHOR = "Avg prompt throughput: "
STAMP_RE = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)")
STATS_RE = re.compile(
    r"Avg prompt throughput: (?P<prompt>[\d.]+) tokens/s, "
    r"Avg generation throughput: (?P<gen>[\d.]+) tokens/s, Running: (?P<running>\d+) reqs, "
    r"(?:Swapped: (?P<swapped>\d+) reqs, Pending: (?P<pending>\d+) reqs"
    r"|Waiting: (?P<waiting>\d+) reqs)"
    r"(?P<rest>.*)$"
)
"""Matched at the anchor (``re.match`` at its offset), never searched: linear in the line."""
ENGINE_RE = re.compile(r"(?:Engine (?P<engine>\d+): |(?<!\d)(?P<agg>\d+) Engines Aggregated: )$")
"""Searched only in the :data:`ENGINE_WINDOW` characters before the anchor (and linear anyway:
the look-behind starts ``\\d+`` only at the start of a run of digits)."""
ENGINE_WINDOW = 40
PREEMPT_RE = re.compile(r"Preemptions: (\d+)")
KV_RE = re.compile(r"(?<=\w) KV cache usage: ([\d.]+)%")
"""``%s KV cache usage`` (GPU, CPU, XPU): a one-character look-behind for the device word, not
``\\w+`` (which backtracks quadratically on a long run of word characters)."""

KEEP: tuple[str, ...] = (ANCHOR, "non-default args: ", "args: Namespace(")
"""Literals of the lines read beyond the log's head (see :mod:`llm_locust.analysis.server.serverlog.reader`)."""

MARKERS: tuple[str, ...] = (ANCHOR, "vLLM", "vllm.", "non-default args:")
"""Substrings that identify a vLLM log (family detection)."""


def own_times(log: LogText, lines: np.ndarray, clock: LogClock) -> np.ndarray:
    """Unix s of lines from their own ``MM-DD HH:MM:SS`` stamp (NaN when none)."""
    stamps, where = [], []
    for k, number in enumerate(lines):
        match = STAMP_RE.search(log.line(int(number)))
        if match:
            stamps.append(match.group(1))
            where.append(k)
    out = np.full(len(lines), np.nan)
    if stamps:
        out[np.array(where, int)] = place_without_year(stamps, clock)
    return out


def place(log: LogText, lines: np.ndarray, clock: LogClock) -> np.ndarray:
    """Unix s of arbitrary lines under the clock's policy (errors, config lines)."""
    return resolve(own_times(log, lines, clock), lines, log, clock)[0]


def parse(log: LogText, clock: LogClock) -> ServerLogResult:
    """Stats lines -> normalised series; startup lines -> :class:`ServerConfig`."""
    lines: list[int] = []
    engines: list[str] = []
    cols: dict[str, list[float]] = {
        c: [] for c in ("running", "waiting", "kv_usage_ratio", "gen_tps", "prompt_tps", "preemptions")
    }
    aggregated = False
    for number in log.lines_with(ANCHOR):
        text = log.line(number)
        at = text.find(ANCHOR)
        match = STATS_RE.match(text, at)
        if not match:
            continue
        engine = ENGINE_RE.search(text, max(0, at - ENGINE_WINDOW), at)
        agg = engine.group("agg") if engine else None
        if agg:
            aggregated = True
        lines.append(number)
        engines.append("agg" if agg else ((engine.group("engine") if engine else None) or "000"))
        rest = match.group("rest")
        waiting = (
            float(match.group("waiting"))
            if match.group("waiting") is not None
            else float(match.group("pending")) + float(match.group("swapped"))
        )
        kv = KV_RE.search(rest)
        preempt = PREEMPT_RE.search(rest)
        cols["running"].append(float(match.group("running")))
        cols["waiting"].append(float(waiting))
        cols["kv_usage_ratio"].append(float(kv.group(1)) / 100.0 if kv else np.nan)
        cols["gen_tps"].append(float(match.group("gen")))
        cols["prompt_tps"].append(float(match.group("prompt")))
        cols["preemptions"].append(float(preempt.group(1)) if preempt else 0.0)
    line_arr = np.array(lines, dtype=np.int64)
    times, how = resolve(own_times(log, line_arr, clock), line_arr, log, clock)
    keys = np.array(engines, dtype=object)
    values = {c: np.array(v, float) for c, v in cols.items()}
    if aggregated:  # never count an engine twice
        keep = keys == "agg"
        line_arr, times, keys = line_arr[keep], times[keep], keys[keep]
        values = {c: v[keep] for c, v in values.items()}
    values["preemptions_per_s"] = _rates(times, keys, values.pop("preemptions"))
    hold = hold_limit_s(times[keys == keys[0]]) if len(keys) else None
    series = keyed_series(times, keys, values, max_hold_s=hold)
    unplaced = tuple(int(n) + 1 for n in line_arr[~np.isfinite(times)])
    notes = []
    if aggregated:
        notes.append("vLLM 'Engines Aggregated' lines used; per-engine lines ignored")
    n_engines = len(set(keys.tolist()))
    if n_engines > 1:
        notes.append(f"{n_engines} data-parallel engines summed")
    return ServerLogResult(
        family=ServerFamily.VLLM,
        series=series,
        config=config(log),
        data_lines=len(line_arr),
        unplaced_lines=unplaced,
        time_source=how + _tz_note(how, clock),
        notes=tuple(notes),
    )


def _tz_note(how: str, clock: LogClock) -> str:
    return f" (read as local time {clock.tz})" if "own stamps" in how else ""


def _rates(times: np.ndarray, keys: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Per engine, count in the interval / length of the interval (NaN for an engine's first)."""
    out = np.full(len(times), np.nan)
    for key in set(keys.tolist()):
        idx = np.flatnonzero(keys == key)
        idx = idx[np.argsort(times[idx], kind="stable")]
        gaps = np.diff(times[idx])
        with np.errstate(divide="ignore", invalid="ignore"):
            out[idx[1:]] = np.where(gaps > 0, counts[idx[1:]] / gaps, np.nan)
    return out


_INT = r"([\d,]+)"
CONFIG_PATTERNS: tuple[tuple[str, re.Pattern], ...] = (
    ("version", re.compile(r"Initializing a(?:n| V1)? LLM engine \(v([^)\s]+)\)")),
    ("version", re.compile(r"\bversion (\d+\.\d+\.\d+\S*)")),
    ("kv", re.compile(r"(?<=\w) KV cache size: " + _INT + r" tokens")),
    ("concurrency", re.compile(r"Maximum concurrency for " + _INT + r" tokens per request: ([\d.]+)x")),
    ("chunked", re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)")),
    ("engine_chunked", re.compile(r"enable_chunked_prefill=(True|False)")),
    ("engine_prefix", re.compile(r"enable_prefix_caching=(True|False)")),
)


def config(log: LogText) -> ServerConfig:
    """Startup configuration: non-default args (or V0's Namespace), engine version, KV cache
    size and maximum concurrency, chunked prefill, prefix caching."""
    out = ServerConfig(engine=ServerFamily.VLLM.value)
    head = log.text[:4_000_000]  # startup lines are at the top; a day of stats is not needed
    args = _args(log)
    if args is not None:
        values, number = args
        src = f"{log.name} line {number} (vLLM args)"
        out = out.with_value("batch_ceiling", _int(values.get("max_num_seqs")), src, batch_ceiling_name="max_num_seqs")
        out = out.with_value(
            "token_budget", _int(values.get("max_num_batched_tokens")), src, token_budget_name="max_num_batched_tokens"
        )
        out = out.with_value("max_model_len", _int(values.get("max_model_len")), src)
        chunked = values.get("enable_chunked_prefill")
        out = out.with_value("chunked_prefill", chunked if isinstance(chunked, bool) else None, src)
    for name, pattern in CONFIG_PATTERNS:
        match = pattern.search(head)
        if not match:
            continue
        src = f"{log.name} line {int(log.line_no(match.start())) + 1}"
        if name == "version":
            out = out.with_value("version", match.group(1), src)
        elif name == "kv":
            out = out.with_value("kv_capacity_tokens", _int(match.group(1)), src)
        elif name == "concurrency":
            out = out.with_value("reported_max_concurrency", float(match.group(2)), src)
            out = out.with_value("max_model_len", _int(match.group(1)), src)
        elif name == "chunked":
            out = out.with_value("chunked_prefill", True, src)
            out = out.with_value("token_budget", _int(match.group(1)), src, token_budget_name="max_num_batched_tokens")
        elif name == "engine_chunked":
            out = out.with_value("chunked_prefill", match.group(1) == "True", src)
        elif name == "engine_prefix":
            out = out.with_value("prefix_caching", match.group(1) == "True", src)
    return out


def _int(value) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    return count_int(str(value))


_NAMESPACE_RE = re.compile(
    r"\b(max_num_seqs|max_num_batched_tokens|max_model_len|"
    r"enable_chunked_prefill)=([\w.]+)"
)


_DICT_RE = re.compile(
    r"'(max_num_seqs|max_num_batched_tokens|max_model_len|"
    r"enable_chunked_prefill)': ([\w.]+)"
)


def _literal(text: str):
    return {"True": True, "False": False, "None": None}.get(text, text)


def _args(log: LogText) -> tuple[dict, int] | None:
    """The dict of the ``non-default args:`` line (or V0's ``args: Namespace(...)``)."""
    for number in log.lines_with("non-default args: "):
        text = log.line(number)
        try:
            values = ast.literal_eval(text[text.index("non-default args: ") + 18 :].strip())
        except (ValueError, SyntaxError, RecursionError, MemoryError):  # not a literal (or
            # too deeply nested): read the keys we need
            values = {k: _literal(v) for k, v in _DICT_RE.findall(text)}
        if isinstance(values, dict):
            return values, number + 1
    for number in log.lines_with("args: Namespace("):
        found = {}
        for key, value in _NAMESPACE_RE.findall(log.line(number)):
            found[key] = _literal(value)
        return found, number + 1
    return None
