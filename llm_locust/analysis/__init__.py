"""Post-run analysis of an llm-locust run directory (pure pandas/matplotlib; imports
neither locust nor gevent, nor any of ``llm_locust`` outside ``llm_locust.analysis``).

In: a run directory (:mod:`llm_locust.analysis.schema` defines its files and columns). Flow:
:func:`load_run` (:mod:`llm_locust.analysis.rundir.reader`) -> :func:`llm_locust.analysis.server.sources.gather` (the server's
metrics, log and configuration) and :func:`llm_locust.analysis.perstep.table.step_table` ->
:func:`llm_locust.analysis.verdict.rules` (client validity per step, the critical concurrency of
:func:`find_critical_concurrency` on the valid steps, the bottleneck with its evidence and
recommendations) and :func:`llm_locust.analysis.verdict.configcheck.check_config` ->
:func:`llm_locust.analysis.pipeline.write_report`. Out: ``report/`` (PNGs, ``steps.csv``,
``summary.md``, ``verdict.json``). :func:`analyze_run` runs all of it.

The names below are imported on first use (a module ``__getattr__``), so that importing
:mod:`llm_locust.analysis.schema` from a Locust worker does not pull in pandas or matplotlib.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    "AnalysisResult": "llm_locust.analysis.pipeline",
    "ReportPaths": "llm_locust.analysis.pipeline",
    "analyze": "llm_locust.analysis.pipeline",
    "analyze_run": "llm_locust.analysis.pipeline",
    "write_report": "llm_locust.analysis.pipeline",
    "CriticalConcurrency": "llm_locust.analysis.verdict.knee",
    "find_critical_concurrency": "llm_locust.analysis.verdict.knee",
    "RunOutcome": "llm_locust.analysis.perrequest.outcome",
    "Run": "llm_locust.analysis.rundir.reader",
    "RunDirError": "llm_locust.analysis.rundir.reader",
    "load_run": "llm_locust.analysis.rundir.reader",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from llm_locust.analysis.perrequest.outcome import RunOutcome
    from llm_locust.analysis.pipeline import AnalysisResult, ReportPaths, analyze, analyze_run, write_report
    from llm_locust.analysis.rundir.reader import Run, RunDirError, load_run
    from llm_locust.analysis.verdict.knee import CriticalConcurrency, find_critical_concurrency


def __getattr__(name: str) -> Any:
    """Import the module that defines ``name`` on first access (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'llm_locust.analysis' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
