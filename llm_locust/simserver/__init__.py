"""The embedded simulated LLM server (``llm-locust sim-server``): a continuous-batching engine
model (vLLM V1 style) served over real HTTP.

OpenAI-compatible streaming endpoints, vLLM-format logs (startup args, ``Engine 000: ...`` stats
lines) and ``vllm:`` Prometheus metrics, so load tests and every analysis path run without a GPU.
asyncio + aiohttp only: this package never imports locust or gevent.

Entry points
------------
- :func:`add_arguments` / :func:`run_from_args`: used by ``llm_locust/cli.py``;
- ``python -m llm_locust.simserver [options]``;
- :func:`run` / :func:`serve` with a :class:`SimConfig` from Python.

Modules, in data-flow order: ``config`` (settings and flags), ``openai_request`` (parse, validate,
prompt token count), ``engine`` (pure scheduler), ``driver`` (real-time stepping), ``text``
(deterministic output text), ``openai_response`` (SSE chunks and bodies), ``app`` (routes),
``metrics`` (Prometheus), ``log`` (vLLM log lines), ``flavors`` (``--flavor``: vLLM, SGLang, TGI,
llama.cpp or a generic server's log lines, metric names and ``/props`` / ``/info``), ``server``
(process wiring).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from llm_locust.simserver.config import SimConfig, add_arguments, config_from_args

if TYPE_CHECKING:
    from llm_locust.simserver.server import run, serve

__all__ = ["SimConfig", "add_arguments", "run", "run_from_args", "serve"]


def __getattr__(name: str):
    """``run`` and ``serve`` load the server (aiohttp) on first use: ``llm-locust analyze`` builds
    the command line with :func:`add_arguments` and never serves."""
    if name in ("run", "serve"):
        from llm_locust.simserver import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run_from_args(args: argparse.Namespace) -> None:
    """Build the config from ``args`` (parsed with :func:`add_arguments`' flags) and serve until
    SIGTERM/SIGINT, then return.

    Raises
    ------
    SystemExit
        With status 2 and a one-line message when a setting is out of range (see ``SimConfig``)
        or the address cannot be bound (port taken).
    """
    from llm_locust.simserver.server import BindError, run

    try:
        config = config_from_args(args)
    except ValueError as exc:
        print(f"sim-server: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    try:
        run(config)
    except BindError as exc:
        print(f"sim-server: error: {exc.strerror}", file=sys.stderr)
        raise SystemExit(2) from None
