"""Judging a run: where it stops scaling and why.

In: the per-step table (:mod:`llm_locust.analysis.perstep.table`) and the server's evidence
(:mod:`llm_locust.analysis.server`). Out: the critical concurrency (:mod:`~llm_locust.analysis.verdict.knee`), whether
the batching settings took effect (:mod:`~llm_locust.analysis.verdict.configcheck`), and the bottleneck with
its evidence and recommendations (:func:`diagnose`, :mod:`~llm_locust.analysis.verdict.types`).
"""

from llm_locust.analysis.verdict.batching import ServerSide
from llm_locust.analysis.verdict.client import ClientSide
from llm_locust.analysis.verdict.rules import diagnose
from llm_locust.analysis.verdict.types import RULES, BottleneckKind, Evidence, Recommendation, Rules, Verdict

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
