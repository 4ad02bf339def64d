"""``report/index.html`` of a diagnosis: one static page linking every round's files.

Reads only what the runs wrote: ``<round>/{baseline,ladder}/report/summary.md``,
``<round>/ladder/report/verdict.json`` (the verdict's schema-1 layout: ``bottleneck``,
``critical_concurrency`` or a rate ladder's ``critical_rate_rps``, ``evidence[].text``, ``recommendations[].change/flag/because/verify``)
and the PNGs next to them; the round table and attribution come from the comparison. No script,
no server: the page opens from the file system.
"""

from __future__ import annotations

import os
from html import escape
from pathlib import Path

from analysis.atomicwrite import write_text_atomic
from analysis.compare.report import PNG_NAMES, Comparison
from analysis.compare.table import table_cells
from analysis.report.html import link, page, report_html


def _round_html(base: Path, name: str, folder: Path, notes: list[str]) -> list[str]:
    out = [f"<h2>Round {escape(name)}: {escape(folder.name)}</h2>"]
    out += [f"<p>Note: {escape(n)}</p>" for n in notes]
    for part in ("baseline", "ladder"):
        report = folder / part / "report"
        if not report.is_dir():
            continue
        links = [
            link(base, report / f)
            for f in ("index.html", "summary.md", "steps.csv", "verdict.json")
            if (report / f).exists()
        ]
        out.append(
            f"<h3>{part}</h3><p>{' &middot; '.join(links)} &middot; {link(base, folder / part, 'run directory')}</p>"
        )
        out += report_html(base, report, summary_open=part == "baseline")
    return out


def _comparison_html(base: Path, comparison: Comparison) -> list[str]:
    headers, rows = table_cells(comparison.table)
    table = ["<table>", "<tr><th></th>" + "".join(f"<th>round {i + 1}</th>" for i in range(len(rows))) + "</tr>"]
    for i, header in enumerate(headers):
        table.append(f"<tr><th>{escape(header)}</th>" + "".join(f"<td>{escape(r[i])}</td>" for r in rows) + "</tr>")
    table.append("</table>")
    out = ["<h2>Round table</h2>", *table]
    for k, attribution in enumerate(comparison.attributions, start=2):
        out += [
            f'<p class="kind">Attribution (round {k} vs round 1): {escape(attribution.kind)}</p>',
            "<ul>",
            *[f"<li>{escape(line)}</li>" for line in attribution.evidence],
            "</ul>",
        ]
    out_dir = comparison.out_dir
    if out_dir is not None:
        out.append(
            "<p>"
            + " &middot; ".join(link(base, out_dir / f) for f in ("summary.md", "compare.json", "rounds.csv"))
            + "</p>"
        )
        out += [f'<p><img src="{escape(os.path.relpath(out_dir / p, base))}" alt="{escape(p)}"></p>' for p in PNG_NAMES]
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
    body = [
        "<h1>llm-locust diagnosis</h1>",
        "<p>Order: single-request baseline &rarr; startup-config check &rarr; ladder until the knee "
        "&rarr; verdict and recommendations"
        + (" &rarr; A/B round table and attribution" if comparison else "")
        + "</p>",
    ]
    if comparison is not None:
        body += _comparison_html(base, comparison)
    if problem:
        body.append(f"<pre>{escape(problem)}</pre>")
    if compare_to is not None:
        body.append(f"<p>Compared with the earlier round {link(base, compare_to, str(compare_to))}</p>")
    for name, folder, notes in rounds:
        body += _round_html(base, name, folder, notes)
    text = page("llm-locust diagnosis", body)
    return write_text_atomic(base / "index.html", text)
