"""Process entry of the simulated server: wire engine, driver, logs and HTTP; serve until a signal.

Startup prints, in this order, to the log (stdout, or ``--stats-log``)::

    INFO 11-30 12:21:49 [api_utils.py:286] non-default args: {'model_tag': 'sim-llama', ...}
    INFO 11-30 12:21:49 [kv_cache_utils.py:2327] GPU KV cache size: 65,536 tokens, Maximum concurrency for 2,048 tokens per request: 32.00x
    INFO 11-30 12:21:49 [entry.py:140] Starting vLLM server on http://127.0.0.1:8000

The last line carries the port actually bound (useful with ``--port 0``); when the log goes to a
file, that line is printed to stdout as well, so a parent process can always read the port from
stdout with ``Starting vLLM server on http://(?P<host>[^\\s]+):(?P<port>\\d+)``.

With ``--flavor`` other than ``vllm`` the log holds that engine's startup, batch and request
lines and ``/metrics`` its names (``flavors/``); the stdout port line stays the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import signal
import socket
import sys
import time
from typing import cast

from aiohttp import web

from llm_locust.simserver.app import SimServerApp
from llm_locust.simserver.config import ENGINE_DEFAULTS, SimConfig
from llm_locust.simserver.driver import EngineDriver
from llm_locust.simserver.engine import BatchEngine
from llm_locust.simserver.flavors import make_flavor
from llm_locust.simserver.flavors.vllm import startup_lines
from llm_locust.simserver.log import LogWriter, format_log_line, make_access_logger

SHUTDOWN_TIMEOUT_S = 0.5
"""Grace period for open responses at shutdown before their handlers are cancelled, s."""


def make_engine(config: SimConfig) -> BatchEngine:
    """A :class:`BatchEngine` with ``config``'s scheduler parameters."""
    return BatchEngine(**{name: getattr(config, name) for name in ENGINE_DEFAULTS})


class BindError(OSError):
    """The server's address cannot be bound (port taken, unknown host, no permission)."""


def _bind(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise BindError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        reason = (exc.strerror or str(exc)).lower()
        raise BindError(exc.errno, f"cannot listen on {host}:{port}: {reason}") from None
    return sock


async def serve(config: SimConfig, *, stop: asyncio.Event | None = None) -> None:
    """Serve ``config`` until ``stop`` is set (or SIGTERM/SIGINT when ``stop`` is None).

    Raises
    ------
    BindError
        When the address cannot be bound (an OSError).
    """
    loop = asyncio.get_running_loop()
    if stop is None:
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
    writer = LogWriter.open(config.stats_log)
    engine = make_engine(config)
    started_s = time.time()
    flavor = make_flavor(config.flavor, config=config, engine=engine, writer=writer, started_s=started_s)
    driver = EngineDriver(engine=engine, listener=flavor)
    app = SimServerApp(
        config=config,
        driver=driver,
        registry=flavor.registry(),
        started_s=started_s,
        extra_routes=flavor.routes(),
        final_fields=flavor.final_fields,
    )
    access = {"access_log_class": make_access_logger(writer)} if flavor.access_log else {"access_log": None}
    runner = web.AppRunner(
        app.build(),
        handler_cancellation=True,
        shutdown_timeout=SHUTDOWN_TIMEOUT_S,
        **access,
    )
    await runner.setup()
    tasks: list[asyncio.Task] = []
    try:
        sock = _bind(config.host, config.port)
        await web.SockSite(runner, sock).start()
        port = sock.getsockname()[1]
        flavor.startup(port)
        if not writer.is_stdout:  # the port line always reaches stdout
            source, message = startup_lines(config, port)[-1]
            print(format_log_line(source=source, message=message, wall_s=time.time()), flush=True)
        tasks = [asyncio.create_task(driver.run()), asyncio.create_task(flavor.run_intervals())]
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
            cast(io.TextIOWrapper, sys.stdout).reconfigure(line_buffering=True)
    asyncio.run(serve(config))
