"""``report/index.html`` of a diagnosis: the round table and attribution, then each round's card.

Reads only what the runs wrote: ``<round>/{baseline,ladder}/report/`` (``summary.md``,
``verdict.json`` in the layout of ``llm_locust/analysis/verdict/verdict.schema.json``, ``steps.csv``, the PNGs);
the round table and attribution come from the comparison. Each round shows its *ladder's* verdict
first (the baseline's ``verdict.json`` has ``bottleneck: null`` and states only the medians), then
the baseline's card. Rendered by the single-run page's template (:mod:`llm_locust.analysis.report.html`); no
script, no network: the page opens from the file system.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from llm_locust.analysis.atomicwrite import write_text_atomic
from llm_locust.analysis.compare.report import PNG_NAMES, Comparison
from llm_locust.analysis.compare.table import table_cells
from llm_locust.analysis.report.html import link_item, render_page, report_section


def _round_section(base: Path, name: str, folder: Path, notes: list[str]) -> dict[str, Any]:
    reports = []
    for part, label in (("ladder", "ladder"), ("baseline", "single-request baseline")):
        report = folder / part / "report"
        if not report.is_dir():
            continue
        section = report_section(base, report, heading=f"Round {name}: {label}", anchor=f"-{name}-{part}")
        section["links"].append(link_item(base, folder / part, "run directory"))
        reports.append(section)
    return {"heading": f"Round {name}: {folder.name}", "anchor": f"round-{name}", "notes": notes, "reports": reports}


def _comparison(base: Path, comparison: Comparison) -> dict[str, Any]:
    headers, rows = table_cells(comparison.table)
    out: dict[str, Any] = {
        "columns": [f"round {i + 1}" for i in range(len(rows))],
        "rows": [{"header": h, "cells": [r[i] for r in rows]} for i, h in enumerate(headers)],
        "attributions": [
            {"label": f"round {k} vs round 1", "kind": a.kind, "evidence": list(a.evidence)}
            for k, a in enumerate(comparison.attributions, start=2)
        ],
        "links": [],
    }
    if comparison.out_dir is not None:
        out["links"] = [
            link_item(base, comparison.out_dir / f)
            for f in ("summary.md", "compare.json", "rounds.csv", *PNG_NAMES)
            if (comparison.out_dir / f).exists()
        ]
    return out


def write_index(
    out: Path,
    rounds: list[tuple[str, Path, list[str]]],
    comparison: Comparison | None,
    *,
    compare_to: Path | None = None,
    problem: str = "",
) -> Path:
    """Write ``<out>/report/index.html``.

    Parameters
    ----------
    out : Path
        The diagnosis folder.
    rounds : list of (name, folder, notes)
        Rounds measured, each a folder with ``baseline/`` and ``ladder/`` run directories.
    comparison : Comparison or None
        The A/B comparison (written, so ``out_dir`` is set), when there is one.
    compare_to : Path, optional
        The earlier round compared with.
    problem : str
        Why there is no comparison (e.g. the workloads differ), shown on the page.

    Returns
    -------
    Path
        The page.
    """
    base = out / "report"
    base.mkdir(parents=True, exist_ok=True)
    sections = [_round_section(base, name, folder, notes) for name, folder, notes in rounds]
    comp = _comparison(base, comparison) if comparison is not None else None
    if comp is not None and comparison is not None and comparison.out_dir is not None:
        figures = [
            {"src": os.path.relpath(comparison.out_dir / p, base), "caption": f"Rounds side by side: {p}"}
            for p in PNG_NAMES
            if (comparison.out_dir / p).exists()
        ]
        if figures:
            sections.append(
                {
                    "heading": "Comparison figures",
                    "anchor": "comparison-figures",
                    "notes": [],
                    "reports": [
                        {"heading": "", "anchor": "", "verdict": None, "links": [], "steps": None,
                         "figures": figures, "summary_html": "", "summary_open": False}
                    ],
                }
            )  # fmt: skip
    headlines = [
        {"name": section["heading"], "anchor": section["anchor"], **card}
        for section in sections
        for report in section["reports"][:1]
        if (card := report["verdict"]) is not None and not card["baseline"]
    ]
    text = render_page(
        headlines=headlines,
        title="llm-locust diagnosis",
        intro="Order: single-request baseline, startup-config check, ladder until the knee, verdict and "
        "recommendations" + (", A/B round table and attribution (first below)" if comparison else "") + ".",
        comparison=comp,
        problem=problem,
        compare_to=link_item(base, compare_to, str(compare_to)) if compare_to is not None else None,
        sections=sections,
    )
    return write_text_atomic(base / "index.html", text)
