"""The server log, in vLLM V1's line format, and the periodic stats line.

Line formats (``MM-DD HH:MM:SS`` is local wall time, as vLLM prints it):

- startup: ``INFO 11-30 12:21:49 [api_utils.py:286] non-default args: {...}`` (Python dict repr),
  ``INFO ... [kv_cache_utils.py:2327] GPU KV cache size: 65,536 tokens, Maximum concurrency for
  2,048 tokens per request: 32.00x`` and ``INFO ... [entry.py:140] Starting vLLM server on
  http://127.0.0.1:8000``;
- stats, every interval: ``INFO 11-30 12:23:03 [loggers.py:335] Engine 000: Avg prompt
  throughput: 16.0 tokens/s, Avg generation throughput: 26.4 tokens/s, Running: 1 reqs, Waiting:
  0 reqs, GPU KV cache usage: 0.4%, Prefix cache hit rate: 0.0%`` (hits / queries of the last
  1,000 requests looked up, :mod:`llm_locust.simserver.prefixcache`). As in vLLM (``loggers.py``),
  ``Preemptions: N, `` is inserted before ``GPU KV cache usage`` when N > 0 preemptions happened
  in the interval, and the line is skipped when the prompt and generation throughputs of this
  and the previous interval are all zero (idle engine);
- access, one per HTTP response (uvicorn's shape): ``INFO:     127.0.0.1:54924 - "POST
  /v1/chat/completions HTTP/1.1" 200 OK``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from http import HTTPStatus
from typing import Any, TextIO

from aiohttp.abc import AbstractAccessLogger
from aiohttp.web import BaseRequest, StreamResponse

from llm_locust.simserver.engine import BatchEngine


def format_log_line(*, source: str, message: str, wall_s: float, level: str = "INFO") -> str:
    """One vLLM-format line (no newline): ``LEVEL MM-DD HH:MM:SS [source] message``.

    Parameters
    ----------
    source : str
        ``file.py:line`` tag vLLM prints in brackets.
    message : str
        Message text.
    wall_s : float
        Unix seconds, printed as local time.
    level : str, default "INFO"
    """
    stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(wall_s))
    return f"{level} {stamp} [{source}] {message}"


def format_stats_message(
    *,
    prompt_tps: float,
    generation_tps: float,
    running: int,
    waiting: int,
    preemptions: int,
    kv_usage_ratio: float,
    prefix_hit_ratio: float = 0.0,
) -> str:
    """The V1 stats message (after ``[loggers.py:335] ``); throughputs in tokens/s.

    >>> format_stats_message(prompt_tps=16.0, generation_tps=26.44, running=1, waiting=0,
    ...                      preemptions=0, kv_usage_ratio=0.004)
    'Engine 000: Avg prompt throughput: 16.0 tokens/s, Avg generation throughput: 26.4 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.4%, Prefix cache hit rate: 0.0%'
    """
    parts = [
        f"Avg prompt throughput: {prompt_tps:.1f} tokens/s",
        f"Avg generation throughput: {generation_tps:.1f} tokens/s",
        f"Running: {running} reqs",
        f"Waiting: {waiting} reqs",
    ]
    if preemptions > 0:
        parts.append(f"Preemptions: {preemptions}")
    parts.append(f"GPU KV cache usage: {kv_usage_ratio * 100:.1f}%")
    parts.append(f"Prefix cache hit rate: {prefix_hit_ratio * 100:.1f}%")
    return "Engine 000: " + ", ".join(parts)


class LogWriter:
    """Line-buffered sink of the server log (stdout or a file).

    Parameters
    ----------
    stream : TextIO
        Open text stream; each line is flushed when written.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    @classmethod
    def open(cls, path: str | None) -> LogWriter:
        """Writer to ``path`` (truncated, UTF-8, line-buffered), or to stdout when None."""
        if path is None:
            return cls(sys.stdout)
        return cls(open(path, "w", buffering=1, encoding="utf-8"))

    @property
    def is_stdout(self) -> bool:
        """True when the log goes to stdout."""
        return self._stream is sys.stdout

    def write_line(self, line: str) -> None:
        """Write ``line`` plus a newline and flush."""
        self._stream.write(line + "\n")
        self._stream.flush()

    def info(self, source: str, message: str) -> None:
        """Write an ``INFO`` line stamped with the current wall time."""
        self.write_line(format_log_line(source=source, message=message, wall_s=time.time()))

    def close(self) -> None:
        """Close the file (stdout is left open)."""
        if not self.is_stdout:
            self._stream.close()


class StatsLogger:
    """The periodic ``Engine 000: ...`` line, averaged over the interval.

    Throughputs = tokens counted by the engine since the previous call / time elapsed since it
    (monotonic clock, s); Running, Waiting and KV usage are sampled at log time.

    Parameters
    ----------
    engine : BatchEngine
        Engine whose cumulative counters are differenced.
    writer : LogWriter
        Log sink.
    interval_s : float
        Logging interval, s.
    """

    def __init__(self, *, engine: BatchEngine, writer: LogWriter, interval_s: float) -> None:
        self._engine = engine
        self._writer = writer
        self._interval_s = interval_s
        self._last_t_s: float | None = None
        self._last_counts = (0, 0, 0)
        self._last_tps = (0.0, 0.0)

    def log(self, now_s: float) -> str | None:
        """Compute the interval ending at ``now_s`` (monotonic s); write and return the message,
        or return None when skipped (first call, or idle by vLLM's rule)."""
        engine = self._engine
        counts = (engine.prompt_tokens_total, engine.generation_tokens_total, engine.num_preemptions_total)
        last_t, last_counts = self._last_t_s, self._last_counts
        self._last_t_s, self._last_counts = now_s, counts
        if last_t is None or now_s <= last_t:
            return None
        elapsed_s = now_s - last_t
        tps = ((counts[0] - last_counts[0]) / elapsed_s, (counts[1] - last_counts[1]) / elapsed_s)
        idle = not any((*tps, *self._last_tps))
        self._last_tps = tps
        if idle:
            return None
        message = format_stats_message(
            prompt_tps=tps[0],
            generation_tps=tps[1],
            running=engine.num_running,
            waiting=engine.num_waiting,
            preemptions=counts[2] - last_counts[2],
            kv_usage_ratio=engine.kv_usage_ratio,
            prefix_hit_ratio=engine.prefix_cache.recent_hit_ratio if engine.prefix_cache is not None else 0.0,
        )
        self._writer.info("loggers.py:335", message)
        return message

    async def run(self) -> None:
        """Log every ``interval_s`` on an absolute schedule until cancelled."""
        loop = asyncio.get_running_loop()
        next_t = loop.time()
        self.log(next_t)
        while True:
            next_t += self._interval_s
            await asyncio.sleep(max(0.0, next_t - loop.time()))
            self.log(loop.time())


def make_access_logger(writer: LogWriter) -> type[AbstractAccessLogger]:
    """An aiohttp access-logger class writing uvicorn-style lines to ``writer``."""

    class _UvicornStyleAccessLogger(AbstractAccessLogger):
        def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
            peer: Any = request.transport.get_extra_info("peername") if request.transport else None
            client = f"{peer[0]}:{peer[1]}" if peer else "-"
            version = f"{request.version.major}.{request.version.minor}"
            try:
                phrase = HTTPStatus(response.status).phrase
            except ValueError:
                phrase = ""
            writer.write_line(
                f'INFO:     {client} - "{request.method} {request.path_qs} HTTP/{version}" {response.status} {phrase}'
            )

    return _UvicornStyleAccessLogger
