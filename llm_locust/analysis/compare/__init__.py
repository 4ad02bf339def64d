"""Rounds side by side (seed 004, the playbooks' "one change per round" table) and why they differ.

Data flow: :func:`~llm_locust.analysis.compare.changes.load_round` (run directories) ->
:func:`~llm_locust.analysis.compare.changes.check_same_workload` (fingerprints) ->
:func:`~llm_locust.analysis.compare.rounds.summarize_round` (per-round figures, via the single-run analysis)
-> :func:`~llm_locust.analysis.compare.table.round_table` and :func:`~llm_locust.analysis.compare.attribution.attribute`
-> :func:`~llm_locust.analysis.compare.report.write_comparison` (``compare.json``, ``rounds.csv``,
``summary.md``, PNGs). :func:`~llm_locust.analysis.compare.report.compare_rounds` runs the computing part.
"""

from llm_locust.analysis.compare.attribution import KINDS, Attribution, attribute
from llm_locust.analysis.compare.changes import RoundDirs, WorkloadMismatch, load_round
from llm_locust.analysis.compare.report import Comparison, compare_rounds, comparison_json, write_comparison
from llm_locust.analysis.compare.rounds import RoundSummary, summarize_round

__all__ = [
    "KINDS",
    "Attribution",
    "Comparison",
    "RoundDirs",
    "RoundSummary",
    "WorkloadMismatch",
    "attribute",
    "compare_rounds",
    "comparison_json",
    "load_round",
    "summarize_round",
    "write_comparison",
]
