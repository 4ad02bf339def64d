"""``report/verdict.json``: the verdict as data, in the layout of ``verdict.schema.json``.

The schema file ships in this package (:data:`SCHEMA_PATH`) and documents every field;
``tests/unit/analysis/verdict/test_verdict_json.py`` validates written files against it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from llm_locust.analysis.atomicwrite import write_text_atomic
from llm_locust.analysis.loadaxis import RATE, load_axis
from llm_locust.analysis.perstep.baseline import Baseline
from llm_locust.analysis.verdict.types import Verdict, _number

SCHEMA_VERSION = 2
"""``schema`` of the files written here."""

SCHEMA_PATH = Path(__file__).with_name("verdict.schema.json")
"""The JSON Schema (draft 2020-12) of ``verdict.json``."""


def verdict_json(verdict: Verdict, thresholds: Sequence = ()) -> dict:
    """The ``verdict.json`` object of ``verdict``, with the ``--fail-on`` checks of the run
    (:class:`llm_locust.analysis.thresholds.ThresholdCheck`; ``thresholds`` is ``[]`` without any).

    Returns
    -------
    dict
        ``schema``, ``critical_concurrency`` (int or None: the ladder step's users),
        ``bottleneck`` (kind name), ``secondary``, ``candidates`` and ``tells_apart`` (with
        ``undetermined``: the kinds the run is compatible with and what separates them; ``[]``
        and None otherwise), ``evidence`` (each
        :meth:`~llm_locust.analysis.verdict.types.Evidence.to_json`), ``recommendations``, ``steps``
        (``users``, ``valid``, ``invalid_reason``, in ladder order), ``thresholds`` (each
        :meth:`~llm_locust.analysis.thresholds.ThresholdCheck.to_json`). A request-rate ladder
        (:mod:`llm_locust.analysis.loadaxis`) adds ``critical_rate_rps`` (requests/s or None; its
        ``critical_concurrency`` is then None) and each step's ``rate_rps``.
    """
    axis = load_axis(verdict.table)
    table = verdict.table.sort_values(axis.column, kind="stable")
    rate = axis is RATE
    critical_rate = verdict.critical.users if rate and verdict.critical.users is not None else None
    return {
        "schema": SCHEMA_VERSION,
        "critical_concurrency": None if rate else verdict.critical_concurrency,
        **({"critical_rate_rps": critical_rate} if rate else {}),
        "bottleneck": verdict.bottleneck.value,
        "secondary": [kind.value for kind in verdict.secondary],
        "candidates": [kind.value for kind in verdict.candidates],
        "tells_apart": verdict.tells_apart or None,
        "evidence": [e.to_json() for e in verdict.evidence],
        "recommendations": [r.to_json() for r in verdict.recommendations],
        "steps": [
            {
                "users": _users(r.target_users),
                **({"rate_rps": float(getattr(r, RATE.column))} if rate else {}),
                "valid": bool(r.valid),
                "invalid_reason": str(r.invalid_reason),
            }
            for r in table.itertuples(index=False)
        ],
        "thresholds": [check.to_json() for check in thresholds],
    }


def write_verdict_json(verdict: Verdict, path: Path, *, thresholds: Sequence = ()) -> Path:
    """Write :func:`verdict_json` to ``path`` (UTF-8, indented); returns ``path``."""
    return write_text_atomic(path, json.dumps(verdict_json(verdict, thresholds), indent=2, ensure_ascii=False) + "\n")


BASELINE_NOTE = (
    "single-request baseline: one stream at a time, so no concurrency verdict applies (no critical "
    "concurrency, no bottleneck); run a ladder (--shape ladder) for that, with these medians as its reference"
)
"""``note`` of a baseline run's ``verdict.json``."""


def baseline_verdict_json(baseline: Baseline, thresholds: Sequence = ()) -> dict:
    """The ``verdict.json`` object of a single-request baseline run (``shape`` ``baseline``).

    It states the baseline - ``baseline``: ``requests``, ``failed``, and the medians
    ``ttft_p50_ms``, ``tpot_p50_ms``, ``e2e_p50_ms`` (ms), ``decode_tps_p50`` (tokens/s),
    ``output_tokens_p50`` (NaN -> null) - and that no concurrency verdict applies (``note``):
    ``bottleneck`` and ``critical_concurrency`` null, ``secondary``, ``evidence``,
    ``recommendations`` and ``steps`` empty; ``thresholds`` as :func:`verdict_json`.
    """
    return {
        "schema": SCHEMA_VERSION,
        "shape": "baseline",
        "critical_concurrency": None,
        "bottleneck": None,
        "secondary": [],
        "candidates": [],
        "tells_apart": None,
        "evidence": [],
        "recommendations": [],
        "steps": [],
        "baseline": {
            "requests": int(baseline.requests),
            "failed": int(baseline.failed),
            "ttft_p50_ms": _number(baseline.ttft_ms),
            "tpot_p50_ms": _number(baseline.tpot_ms),
            "e2e_p50_ms": _number(baseline.e2e_ms),
            "decode_tps_p50": _number(baseline.decode_tps),
            "output_tokens_p50": _number(baseline.output_tokens),
        },
        "note": BASELINE_NOTE,
        "thresholds": [check.to_json() for check in thresholds],
    }


def write_baseline_json(baseline: Baseline, path: Path, *, thresholds: Sequence = ()) -> Path:
    """Write :func:`baseline_verdict_json` to ``path`` (UTF-8, indented); returns ``path``."""
    return write_text_atomic(
        path, json.dumps(baseline_verdict_json(baseline, thresholds), indent=2, ensure_ascii=False) + "\n"
    )


def _users(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)
