"""A worker's answer to a spawn message without rebuilding Locust's argument parser per option.

On every ``spawn`` message (each ladder step, each rebalance) Locust's worker keeps the options
the master sent that are not Locust's own, with a comprehension that calls
``argument_parser.default_args_dict()`` once per option key (``locust/runners.py``,
``WorkerRunner.handle_message``, Locust 2.47); each call builds Locust's whole argument parser
again. With llm-locust's options that is ~90 parser builds, ~0.25 s of CPU measured on this
2-core machine, during which the worker's event loop sends no heartbeat and reads no stream.
Sixteen workers on two busy cores took more than the master's heartbeat limit (3 missed 1-s
heartbeats) to get through one spawn message: the master marked every worker missing and the
run stopped with no request sent (``benchmarks/scale_workers.py``).

:func:`install_default_args_cache` makes the function compute its answer once per process: it
depends only on Locust's own options (the comment in Locust says so: "before any custom
arguments are added"), so the answer never changes; each call gets its own copy.

Why own code: the call sits inside Locust's message handler; this is the smallest change that
removes the cost, and it leaves Locust's behaviour otherwise as it is.
"""

from __future__ import annotations

import functools

from locust import argument_parser

_MARK = "_llm_locust_cached"


def install_default_args_cache() -> None:
    """Replace ``locust.argument_parser.default_args_dict`` by a cached copy (idempotent).

    The replacement returns a new ``dict`` equal to what the original returned the first time.
    """
    original = argument_parser.default_args_dict
    if getattr(original, _MARK, False):
        return
    once = functools.lru_cache(maxsize=1)(original)

    @functools.wraps(original)
    def default_args_dict() -> dict:
        return dict(once())

    setattr(default_args_dict, _MARK, True)
    argument_parser.default_args_dict = default_args_dict
