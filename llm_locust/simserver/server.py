"""Process entry of the simulated server: wire engine, driver, logs and HTTP; serve until a signal.

Startup prints, in this order, to the log (stdout, or ``--stats-log``)::

    INFO 11-30 12:21:49 [api_utils.py:286] non-default args: {'model_tag': 'sim-llama', ...}
    INFO 11-30 12:21:49 [kv_cache_utils.py:2327] GPU KV cache size: 65,536 tokens, Maximum concurrency for 2,048 tokens per request: 32.00x
    INFO 11-30 12:21:49 [entry.py:140] Starting vLLM server on http://127.0.0.1:8000

The last line carries the port actually bound (useful with ``--port 0``); when the log goes to a
file, that line is printed to stdout as well, so a parent process can always read the port from
stdout with ``Starting vLLM server on http://(?P<host>[^\\s]+):(?P<port>\\d+)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
import time

from aiohttp import web

from llm_locust.simserver.app import SimServerApp
from llm_locust.simserver.config import SimConfig, non_default_args
from llm_locust.simserver.driver import EngineDriver
from llm_locust.simserver.engine import BatchEngine
from llm_locust.simserver.log import LogWriter, StatsLogger, format_log_line, make_access_logger
from llm_locust.simserver.metrics import build_registry

SHUTDOWN_TIMEOUT_S = 0.5
"""Grace period for open responses at shutdown before their handlers are cancelled, s."""


def make_engine(config: SimConfig) -> BatchEngine:
    """A :class:`BatchEngine` with ``config``'s scheduler parameters."""
    return BatchEngine(
        max_num_seqs=config.max_num_seqs, max_num_batched_tokens=config.max_num_batched_tokens,
        decode_base_ms=config.decode_base_ms, decode_per_seq_ms=config.decode_per_seq_ms,
        prefill_ms_per_token=config.prefill_ms_per_token,
        kv_capacity_tokens=config.kv_capacity_tokens, max_queue=config.max_queue,
        slowdown=config.slowdown,
    )


def _bind(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    return sock


def _startup_lines(config: SimConfig, port: int) -> list[tuple[str, str]]:
    args = non_default_args(config)
    args["port"] = port
    concurrency = config.kv_capacity_tokens / config.max_model_len
    return [
        ("api_utils.py:286", f"non-default args: {args!r}"),
        ("kv_cache_utils.py:2327",
         f"GPU KV cache size: {config.kv_capacity_tokens:,} tokens, Maximum concurrency for "
         f"{config.max_model_len:,} tokens per request: {concurrency:.2f}x"),
        ("entry.py:140", f"Starting vLLM server on http://{config.host}:{port}"),
    ]


async def serve(config: SimConfig, *, stop: asyncio.Event | None = None) -> None:
    """Serve ``config`` until ``stop`` is set (or SIGTERM/SIGINT when ``stop`` is None).

    Raises
    ------
    OSError
        When the address cannot be bound.
    """
    loop = asyncio.get_running_loop()
    if stop is None:
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
    writer = LogWriter.open(config.stats_log)
    engine = make_engine(config)
    driver = EngineDriver(engine=engine)
    started_s = time.time()
    registry = build_registry(engine=engine, config=config, created_s=started_s)
    app = SimServerApp(config=config, driver=driver, registry=registry, started_s=started_s)
    runner = web.AppRunner(
        app.build(), handler_cancellation=True, access_log_class=make_access_logger(writer),
        shutdown_timeout=SHUTDOWN_TIMEOUT_S,
    )
    await runner.setup()
    tasks: list[asyncio.Task] = []
    try:
        sock = _bind(config.host, config.port)
        await web.SockSite(runner, sock).start()
        port = sock.getsockname()[1]
        lines = _startup_lines(config, port)
        for source, message in lines:
            writer.info(source, message)
        if not writer.is_stdout:  # the port line always reaches stdout
            source, message = lines[-1]
            print(format_log_line(source=source, message=message, wall_s=time.time()), flush=True)
        stats = StatsLogger(engine=engine, writer=writer, interval_s=config.log_stats_interval_s)
        tasks = [asyncio.create_task(driver.run()), asyncio.create_task(stats.run())]
        await stop.wait()
    finally:
        await runner.cleanup()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        writer.close()


def run(config: SimConfig) -> None:
    """Serve ``config`` in a new event loop until SIGTERM/SIGINT; returns after a clean shutdown."""
    if sys.stdout is not None:
        with contextlib.suppress(AttributeError, ValueError):
            sys.stdout.reconfigure(line_buffering=True)
    asyncio.run(serve(config))
