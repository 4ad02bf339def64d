"""Post-run analysis of an llm-locust run directory (pure pandas/matplotlib; never imports
locust, gevent or ``llm_locust``).

In: a run directory (:mod:`analysis.schema` defines its files and columns). Flow:
:func:`load_run` (:mod:`analysis.rundir`) -> :func:`analysis.server.sources.gather` (the server's
metrics, log and configuration) and :func:`analysis.steps.step_table` ->
:func:`analysis.verdict.diagnose` (client validity per step, the critical concurrency of
:func:`find_critical_concurrency` on the valid steps, the bottleneck with its evidence and
recommendations) and :func:`analysis.verdict.configcheck.check_config` ->
:func:`analysis.report.pipeline.write_report`. Out: ``report/`` (PNGs, ``steps.csv``,
``summary.md``, ``verdict.json``). :func:`analyze_run` runs all of it.

The names below are imported on first use (a module ``__getattr__``), so that importing
:mod:`analysis.schema` from a Locust worker does not pull in pandas or matplotlib.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    "AnalysisResult": "analysis.report.pipeline",
    "ReportPaths": "analysis.report.pipeline",
    "analyze": "analysis.report.pipeline",
    "analyze_run": "analysis.report.pipeline",
    "write_report": "analysis.report.pipeline",
    "CriticalConcurrency": "analysis.verdict.knee",
    "find_critical_concurrency": "analysis.verdict.knee",
    "RunOutcome": "analysis.outcome",
    "Run": "analysis.rundir",
    "RunDirError": "analysis.rundir",
    "load_run": "analysis.rundir",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from analysis.outcome import RunOutcome
    from analysis.report.pipeline import AnalysisResult, ReportPaths, analyze, analyze_run, write_report
    from analysis.rundir import Run, RunDirError, load_run
    from analysis.verdict.knee import CriticalConcurrency, find_critical_concurrency


def __getattr__(name: str) -> Any:
    """Import the module that defines ``name`` on first access (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'analysis' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
