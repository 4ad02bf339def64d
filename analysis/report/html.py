"""``report/index.html`` of one run: the verdict, ``summary.md`` and the figures on one static page.

The page reads only what :func:`analysis.report.pipeline.write_report` wrote beside it
(``summary.md``, ``verdict.json`` in the layout of ``analysis/verdict/verdict.schema.json``, the
PNGs, ``steps.csv``) and links the run directory's own files. No script, no server: it opens from
the file system. A diagnosis' page (:mod:`analysis.compare.html`) is built from the same pieces.
"""

from __future__ import annotations

import json
import os
from html import escape
from pathlib import Path

from analysis.atomicwrite import write_text_atomic

RUN_PNGS: tuple[str, ...] = ("throughput.png", "latency.png", "timeline.png", "errors.png")
"""Single-run figures shown (those that exist)."""

RUN_FILES: tuple[str, ...] = (
    "run.json", "requests.csv", "client_report.json", "client_load.csv", "server_metrics.csv", "server.log",
)  # fmt: skip
"""Files of the run directory linked from its page (those that exist)."""

STYLE = """body{font-family:sans-serif;margin:2em;max-width:1200px}img{max-width:100%;border:1px solid #ddd}
table{border-collapse:collapse;font-size:90%}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#eef}pre{background:#f6f6f6;padding:1em;overflow-x:auto}.kind{font-size:120%;font-weight:bold}"""


def link(base: Path, target: Path, text: str | None = None) -> str:
    """An ``<a>`` from a page in ``base`` to ``target`` (relative, so the folder can be moved)."""
    rel = os.path.relpath(target, base)
    return f'<a href="{escape(rel)}">{escape(text or rel)}</a>'


def verdict_html(path: Path) -> list[str]:
    """The bottleneck, its evidence and the recommendations of a ``verdict.json``; [] when the
    file is missing or unreadable, or holds a baseline (no ``bottleneck``)."""
    try:
        verdict = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(verdict, dict) or "bottleneck" not in verdict:
        return []
    critical = (
        f"critical rate: {verdict.get('critical_rate_rps')} req/s"
        if "critical_rate_rps" in verdict
        else f"critical concurrency: {verdict.get('critical_concurrency')}"
    )
    out = [
        f'<p class="kind">Bottleneck: {escape(str(verdict.get("bottleneck")))}; {escape(critical)}</p>',
        "<ul>",
    ]
    out += [
        f"<li>{escape(str(e.get('text', e)))}</li>"
        for e in verdict.get("evidence", [])
        if not isinstance(e, dict) or e.get("holds", True)
    ]
    out.append("</ul>")
    recs = verdict.get("recommendations") or []
    if recs:
        out += ["<p>Recommendations:</p>", "<ol>"]
        for r in recs:
            out.append(
                f"<li>{escape(str(r.get('change')))} <code>{escape(str(r.get('flag') or ''))}</code>"
                f" &mdash; because {escape(str(r.get('because')))}; verify: {escape(str(r.get('verify')))}</li>"
            )
        out.append("</ol>")
    return out


def report_html(base: Path, report: Path, *, summary_open: bool) -> list[str]:
    """The verdict, ``summary.md`` (folded unless ``summary_open``) and the PNGs of one
    ``report/`` folder, for a page in ``base``."""
    out = verdict_html(report / "verdict.json")
    summary = report / "summary.md"
    if summary.exists():
        text = summary.read_text(encoding="utf-8")
        out.append(
            f"<details{' open' if summary_open else ''}><summary>summary.md</summary><pre>{escape(text)}</pre></details>"
        )
    for png in RUN_PNGS:
        if (report / png).exists():
            out.append(f'<p><img src="{escape(os.path.relpath(report / png, base))}" alt="{escape(png)}"></p>')
    return out


def page(title: str, body: list[str]) -> str:
    """A whole static HTML page (UTF-8, the house style sheet inline)."""
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def write_run_index(report: Path, run_dir: Path) -> Path:
    """Write ``<report>/index.html`` for one run.

    Parameters
    ----------
    report : Path
        The run's report folder, after ``summary.md``, ``verdict.json`` and the PNGs are written.
    run_dir : Path
        The run directory (its files in :data:`RUN_FILES` are linked).

    Returns
    -------
    Path
        The page.
    """
    own = [link(report, report / f) for f in ("summary.md", "steps.csv", "verdict.json") if (report / f).exists()]
    data = [link(report, run_dir / f) for f in RUN_FILES if (run_dir / f).exists()]
    body = [
        f"<h1>llm-locust run: {escape(run_dir.name)}</h1>",
        f"<p>{' &middot; '.join(own)}</p>",
        f"<p>Run directory: {' &middot; '.join(data)}</p>",
        *report_html(report, report, summary_open=True),
    ]
    path = report / "index.html"
    return write_text_atomic(path, page(f"llm-locust run: {run_dir.name}", body))
