"""Rounds side by side (seed 004, the playbooks' "one change per round" table) and why they differ.

Data flow: :func:`~analysis.compare.changes.load_round` (run directories) ->
:func:`~analysis.compare.changes.check_same_workload` (fingerprints) ->
:func:`~analysis.compare.rounds.summarize_round` (per-round figures, via the single-run analysis)
-> :func:`~analysis.compare.table.round_table` and :func:`~analysis.compare.attribution.attribute`
-> :func:`~analysis.compare.report.write_comparison` (``compare.json``, ``rounds.csv``,
``summary.md``, PNGs). :func:`~analysis.compare.report.compare_rounds` runs the computing part.
"""

from analysis.compare.attribution import KINDS, Attribution, attribute
from analysis.compare.changes import RoundDirs, WorkloadMismatch, load_round
from analysis.compare.report import Comparison, compare_rounds, comparison_json, write_comparison
from analysis.compare.rounds import RoundSummary, summarize_round

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
