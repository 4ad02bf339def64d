"""Light end-to-end runs side by side: each an embedded server and an ``llm-locust run`` of its own.

A module that checks several independent runs (one per scenario or engine flavour) need not wait
for each in turn: one run with an embedded server, a master and one or two workers uses about a
fifth of a core, most of it the processes' start (measured: 5.8 s of CPU over a 29 s run on this
2-core machine), so a few at once leave the machine half idle and take the time of one.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from llm_locust.run.launcher import stop_process

T = TypeVar("T")

Start = Callable[[], tuple[subprocess.Popen, subprocess.Popen]]
"""Starts one run: returns (its embedded server, its ``llm-locust run`` with stdout piped, text)."""


def run_side_by_side(starts: dict[str, Start], *, width: int, timeout_s: float) -> dict[str, tuple[int | None, str]]:
    """Run ``starts`` ``width`` at a time; every process is stopped (by PID) before this returns.

    Returns
    -------
    dict
        ``{name: (exit code of the run, None if it was stopped at timeout_s; its console output)}``.
    """
    results: dict[str, tuple[int | None, str]] = {}
    names = list(starts)
    for first in range(0, len(names), width):
        started: dict[str, tuple[subprocess.Popen, subprocess.Popen]] = {}
        try:
            for name in names[first : first + width]:
                started[name] = starts[name]()
            for name, (_server, process) in started.items():
                try:
                    output, _ = process.communicate(timeout=timeout_s)
                    results[name] = (process.returncode, output or "")
                except subprocess.TimeoutExpired:
                    stop_process(process, grace_s=10)
                    output, _ = process.communicate()
                    results[name] = (None, output or "")
        finally:
            for server, process in started.values():
                stop_process(process, grace_s=10)
                stop_process(server, grace_s=10)
    return results


def all_at_once(runs: dict[str, Callable[[], T]]) -> dict[str, T]:
    """Call every function of ``runs`` at once, each in a thread of its own, for runs that drive
    their processes themselves (a kill in mid-run, network namespaces) rather than through a
    :data:`Start`; each run stops its own processes. Returns ``{name: what its call returned}``;
    the first exception raised by a call is raised here, once every call has ended."""
    with ThreadPoolExecutor(max_workers=len(runs)) as pool:
        futures = {name: pool.submit(run) for name, run in runs.items()}
        return {name: future.result() for name, future in futures.items()}
