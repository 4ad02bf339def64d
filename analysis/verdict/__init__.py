"""Judging a run: where it stops scaling and why.

In: the per-step table (:mod:`analysis.steps`) and the server's evidence
(:mod:`analysis.server`). Out: the critical concurrency (:mod:`~analysis.verdict.knee`), whether
the batching settings took effect (:mod:`~analysis.verdict.configcheck`), and the bottleneck with
its evidence and recommendations (:func:`diagnose`, :mod:`~analysis.verdict.types`).
"""

from analysis.verdict.batching import ServerSide
from analysis.verdict.client import ClientSide
from analysis.verdict.diagnose import diagnose
from analysis.verdict.types import RULES, BottleneckKind, Evidence, Recommendation, Rules, Verdict

__all__ = [
    "RULES",
    "BottleneckKind",
    "ClientSide",
    "Evidence",
    "Recommendation",
    "Rules",
    "ServerSide",
    "Verdict",
    "diagnose",
]
