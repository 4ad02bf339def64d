"""Text Generation Inference logs: per-request ``Success`` spans (text and JSON), startup Args.

Formats, copied from TGI's source:

- ``router/src/server.rs`` (TGI 2.x-3.x), ``generate_stream_internal``: the request span records
  ``total_time``, ``validation_time``, ``queue_time``, ``inference_time``, ``time_per_token``
  (each ``format!("{:?}", Duration)``: ``"1.234567s"``, ``"12.3ms"``, ``"45µs"``) and ``seed``,
  then ``tracing::info!(parent: &span, "Success")``. ``generate`` does the same.
- tracing-subscriber output (``router/src/logging.rs``): text ``2024-05-07T12:39:22.141566Z  INFO
  generate_stream{parameters=… total_time="1.5s" validation_time="312µs" queue_time="21µs"
  inference_time="1.5s" time_per_token="23ms" seed="None"}: text_generation_router::server:
  router/src/server.rs:NNN: Success`` (timestamps in UTC); with ``--json-output`` one JSON object
  per line: ``{"timestamp": …, "level": "INFO", "message": "Success", "span": {…the fields…},
  "spans": [...]}``.
- startup: the launcher's ``Args { … max_concurrent_requests: 128, … max_batch_total_tokens:
  Some(16000), … max_batch_size: Some(4), … }`` (``launcher/src/main.rs``, ``{:?}`` or pretty
  ``{:#?}``), and the router's ``"Setting max batch total tokens to {n}"``.

Placement: TGI's stamps are UTC with microseconds, so in ``auto`` they are used before arrival
stamps (which carry the capture's polling delay and would blur request boundaries).

Normalised from each request: it was queued over ``[end - inference_time - queue_time, end -
inference_time)`` and running over ``[end - inference_time, end)``, where ``end`` is the Success
line's time; running and waiting are the counts of such intervals (exact for every request that
finished within the log; one still in flight at the end of the log is not seen). Generated
tokens/s = sum over running requests of ``1 / time_per_token``.
"""

from __future__ import annotations

import json
import re

import numpy as np

from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.server.families import ServerFamily
from llm_locust.analysis.server.series import breakpoints_from_intervals, series_from_breakpoints
from llm_locust.analysis.server.serverlog.base import LogClock, LogText, ServerLogResult, count_int
from llm_locust.analysis.server.serverlog.clock import place_with_date, resolve

STAMP_RE = re.compile(
    r"^(?:\{\"timestamp\":\s*\")?(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?"
    r"(?:Z|[+-]\d\d:?\d\d)?)"
)
FIELD_RE = re.compile(r"\b(queue_time|inference_time|time_per_token)=\"?([\d.]+\s?[µμun]?m?s)\"?")
DURATION_RE = re.compile(r"^([\d.]+)\s?(s|ms|µs|μs|us|ns)$")
_UNITS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "μs": 1e-6, "us": 1e-6, "ns": 1e-9}

KEEP: tuple[str, ...] = ("Success",)
"""Literals of the lines read beyond the log's head (see :mod:`llm_locust.analysis.server.serverlog.reader`)."""

MARKERS: tuple[str, ...] = ("text_generation_router", "text_generation_launcher", "inference_time=")


def duration_s(text: str) -> float:
    """Seconds of a Rust ``Duration`` debug string.

    >>> duration_s("1.5s"), duration_s("23ms"), duration_s("21µs")
    (1.5, 0.023, 2.1e-05)
    """
    match = DURATION_RE.match(text.strip())
    if not match:
        return float("nan")
    return float(match.group(1)) * _UNITS[match.group(2)]


def own_times(log: LogText, lines: np.ndarray, clock: LogClock) -> np.ndarray:
    """Unix s from the leading ISO 8601 stamp (text or JSON output)."""
    stamps, where = [], []
    for k, number in enumerate(lines):
        match = STAMP_RE.match(log.line(int(number)))
        if match:
            stamps.append(match.group(1))
            where.append(k)
    out = np.full(len(lines), np.nan)
    if stamps:
        out[np.array(where, int)] = place_with_date(stamps, clock)
    return out


def place(log: LogText, lines: np.ndarray, clock: LogClock) -> np.ndarray:
    """Unix s of arbitrary lines under the clock's policy."""
    return resolve(own_times(log, lines, clock), lines, log, clock, prefer_own=True)[0]


def _fields(text: str) -> dict[str, float] | None:
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):  # not JSON, or nested too deep to decode
            return None
        if not isinstance(obj, dict) or obj.get("message") != "Success":
            return None
        spans = [obj.get("span") or {}] + list(reversed(obj.get("spans") or []))
        found = {}
        for span in spans:
            for key in ("queue_time", "inference_time", "time_per_token"):
                if key not in found and isinstance(span, dict) and key in span:
                    found[key] = duration_s(str(span[key]))
        return found if {"queue_time", "inference_time"} <= set(found) else None
    if not text.rstrip().endswith("Success"):
        return None
    found = {key: duration_s(value) for key, value in FIELD_RE.findall(text)}
    return found if {"queue_time", "inference_time"} <= set(found) else None


def parse(log: LogText, clock: LogClock) -> ServerLogResult:
    """Success spans -> request intervals -> running/waiting counts; Args -> config."""
    lines, queue, inference, per_token = [], [], [], []
    for number in log.lines_with("Success"):
        fields = _fields(log.line(number))
        if fields is None:
            continue
        lines.append(number)
        queue.append(fields["queue_time"])
        inference.append(fields["inference_time"])
        per_token.append(fields.get("time_per_token", np.nan))
    line_arr = np.array(lines, dtype=np.int64)
    ends, how = resolve(own_times(log, line_arr, clock), line_arr, log, clock, prefer_own=True)
    ok = np.isfinite(ends) & np.isfinite(queue) & np.isfinite(inference)
    end = ends[ok]
    run_start = end - np.array(inference)[ok]
    queue_start = run_start - np.array(queue)[ok]
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(np.array(per_token)[ok] > 0, 1.0 / np.array(per_token)[ok], np.nan)
    series = _series(log, clock, queue_start, run_start, end, rate)
    return ServerLogResult(
        family=ServerFamily.TGI,
        series=series,
        config=config(log),
        data_lines=len(line_arr),
        unplaced_lines=tuple(int(n) + 1 for n in line_arr[~np.isfinite(ends)]),
        time_source=how,
        notes=("running/waiting rebuilt from each finished request's queue_time and inference_time",),
    )


def _series(log: LogText, clock: LogClock, queue_start, run_start, end, rate):
    if not len(end):
        return series_from_breakpoints({}, source="log")
    first_line = place(log, np.array([0]), clock)[0]
    valid_from = float(np.nanmin([first_line, queue_start.min()]))
    last = log.end_s()
    last_line = place(log, np.array([log.n_lines - 1]), clock)[0]
    valid_to = float(np.nanmax([v for v in (last, last_line, end.max()) if v is not None]))
    known = np.isfinite(rate)
    return series_from_breakpoints(
        {
            "running": breakpoints_from_intervals(run_start, end, valid_from_s=valid_from, valid_to_s=valid_to),
            "waiting": breakpoints_from_intervals(queue_start, run_start, valid_from_s=valid_from, valid_to_s=valid_to),
            "gen_tps": breakpoints_from_intervals(
                run_start[known], end[known], rate[known], valid_from_s=valid_from, valid_to_s=valid_to
            ),
        },
        source="log",
    )


ARG_RES: dict[str, re.Pattern] = {
    name: re.compile(rf"\b{name}: (?:Some\(\s*)?(\d+)")
    for name in (
        "max_batch_size",
        "max_batch_total_tokens",
        "max_concurrent_requests",
        "max_batch_prefill_tokens",
        "max_total_tokens",
    )
}
EFFECTIVE_RE = re.compile(r"Setting max batch total tokens to (\d+)")
VERSION_RE = re.compile(r"\bversion: \"?(\d+\.\d+\.\d+[^\s\",]*)")


def config(log: LogText) -> ServerConfig:
    """Batch ceiling (``max_batch_size``), token budget (the effective ``max batch total
    tokens``, else ``max_batch_total_tokens`` from Args), ``max_total_tokens``."""
    out = ServerConfig(engine=ServerFamily.TGI.value)
    head = log.text[:4_000_000]
    effective = EFFECTIVE_RE.search(head)
    if effective and count_int(effective.group(1)) is not None:
        src = f"{log.name} line {int(log.line_no(effective.start())) + 1}"
        out = out.with_value(
            "token_budget", count_int(effective.group(1)), src, token_budget_name="max_batch_total_tokens"
        )
        out = out.with_value("kv_capacity_tokens", count_int(effective.group(1)), src)
    start = head.find("Args {")
    if start >= 0:
        block = head[start : head.find("}", start) + 1 if head.find("}", start) > 0 else None]
        src = f"{log.name} line {int(log.line_no(start)) + 1} (Args)"
        for name, pattern in ARG_RES.items():
            match = pattern.search(block)
            value = count_int(match.group(1)) if match else None
            if value is None:
                continue
            if name == "max_batch_size":
                out = out.with_value("batch_ceiling", value, src, batch_ceiling_name=name)
            elif name == "max_batch_total_tokens":
                out = out.with_value("token_budget", value, src, token_budget_name=name)
            elif name == "max_total_tokens":
                out = out.with_value("max_model_len", value, src)
    version = VERSION_RE.search(head)
    if version:
        out = out.with_value("version", version.group(1), f"{log.name} line {int(log.line_no(version.start())) + 1}")
    return out
