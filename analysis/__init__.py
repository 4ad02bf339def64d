"""Post-run analysis of an llm-locust run directory (pure pandas/matplotlib; never imports
locust, gevent or ``llm_locust``).

Data flow: :func:`load_run` (``rundir``) -> :func:`analysis.serversource.gather` (the server's
metrics, log and configuration: ``prometheus``, ``serverlog``) and
:func:`analysis.steps.step_table` -> :func:`find_critical_concurrency` (``knee``) and
:func:`analysis.configcheck.check_config` -> :func:`analysis.report.write_report` (PNGs,
``steps.csv``, ``summary.md``). :func:`analyze_run` runs all of it.
"""

from analysis.knee import CriticalConcurrency, find_critical_concurrency
from analysis.outcome import RunOutcome
from analysis.report import AnalysisResult, ReportPaths, analyze, analyze_run, write_report
from analysis.rundir import Run, RunDirError, load_run

__all__ = [
    "AnalysisResult", "CriticalConcurrency", "ReportPaths", "Run", "RunDirError", "RunOutcome",
    "analyze",
    "analyze_run", "find_critical_concurrency", "load_run", "write_report",
]
