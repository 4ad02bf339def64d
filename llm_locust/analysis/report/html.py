"""``report/index.html`` of one run: the verdict card, the step table, the figures, the summary.

The page reads only what :func:`llm_locust.analysis.pipeline.write_report` wrote beside it
(``summary.md``, ``verdict.json`` in the layout of ``llm_locust/analysis/verdict/verdict.schema.json``, the
PNGs, ``steps.csv``) and links the run directory's own files. It is rendered from one Jinja2
template (``templates/report.html.j2``); ``summary.md`` is rendered by markdown-it-py. No script,
no network: the page opens from the file system. A diagnosis' page (:mod:`llm_locust.analysis.compare.html`)
is built from the same pieces and the same template.
"""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any

import jinja2
from markdown_it import MarkdownIt

from llm_locust.analysis.atomicwrite import write_text_atomic

RUN_PNGS: tuple[tuple[str, str], ...] = (
    ("throughput.png", "Output throughput and server running/waiting per step; the critical step is marked."),
    ("latency.png", "TTFT, TPOT and E2E latency percentiles per step."),
    ("timeline.png", "The run over time: users, in-flight requests and the server's counts."),
    ("errors.png", "Failed requests per step, by error kind."),
)
"""Single-run figures shown (those that exist), with their captions."""

RUN_FILES: tuple[str, ...] = (
    "run.json", "requests.csv", "client_report.json", "client_load.csv", "server_metrics.csv", "server.log",
)  # fmt: skip
"""Files of the run directory linked from its page (those that exist)."""

STEP_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("step", "step", "int"),
    ("target_users", "users", "int"),
    ("target_rate_rps", "rate req/s", "f2"),
    ("client_inflight", "in-flight", "f2"),
    ("server_running", "running", "f2"),
    ("server_waiting", "waiting", "f2"),
    ("kv_usage_ratio", "KV %", "pct"),
    ("output_tps", "out tok/s", "f1"),
    ("request_rps", "req/s", "f2"),
    ("ttft_p50_ms", "TTFT p50 ms", "f0"),
    ("ttft_p95_ms", "TTFT p95 ms", "f0"),
    ("tpot_p50_ms", "TPOT p50 ms", "f1"),
    ("e2e_p50_ms", "E2E p50 ms", "f0"),
    ("completed", "ok", "int"),
    ("errors", "errors", "int"),
    ("invalid_reason", "not used because", "text"),
)
"""``steps.csv`` columns shown in the step table: (column, header with its unit, format)."""

_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("llm_locust.analysis.report", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable("table")


def rel(base: Path, target: Path) -> str:
    """The path of ``target`` relative to a page in ``base`` (so the folder can be moved)."""
    return os.path.relpath(target, base)


def link_item(base: Path, target: Path, text: str | None = None) -> dict[str, str]:
    """A link for the template: ``{"href", "text"}`` from a page in ``base`` to ``target``."""
    href = rel(base, target)
    return {"href": href, "text": text or href}


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _cell(value: str, fmt: str) -> str:
    """One table cell: a blank for a missing, NaN or infinite number (never ``nan``/``None``)."""
    if fmt == "text":
        return value if value not in ("nan", "None") else ""
    number = _number(value)
    if number is None:
        return ""
    if fmt == "int":
        return f"{number:.0f}"
    if fmt == "pct":
        return f"{100 * number:.1f}"
    return f"{number:.{int(fmt[1])}f}"


def load_verdict(path: Path) -> dict[str, Any] | None:
    """A ``verdict.json`` as a dict, or None when it is missing, unreadable or not an object."""
    try:
        verdict = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return verdict if isinstance(verdict, dict) else None


def _users_label(value: Any) -> str:
    number = _number(value)
    if number is None:
        return "?"
    return f"{number:g}"


def verdict_card(verdict: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the verdict card shows, from a ``verdict.json`` (schema 1; an unknown kind is shown as it is).

    Parameters
    ----------
    verdict : dict or None
        The parsed file (:func:`load_verdict`).

    Returns
    -------
    dict or None
        None without a verdict. For a baseline run (``shape == "baseline"`` or ``bottleneck`` null):
        ``baseline`` True, ``baseline_line`` (the medians) and ``note``. Otherwise ``kind``,
        ``critical_label`` ("concurrency" or "rate"), ``critical`` (a number with its unit, or "not
        reached up to N users/req/s" when the file has null), ``why`` (the primary rule's sentence),
        ``secondary``, ``recommendations``, ``invalid`` (steps not used, each with its reason) and
        ``evidence``.
    """
    if verdict is None:
        return None
    if verdict.get("shape") == "baseline" or verdict.get("bottleneck") is None:
        base = verdict.get("baseline") or {}
        parts = []
        for key, label, unit in (
            ("ttft_p50_ms", "TTFT p50", "ms"),
            ("tpot_p50_ms", "TPOT p50", "ms"),
            ("decode_tps_p50", "decode rate p50", "tokens/s"),
            ("e2e_p50_ms", "E2E p50", "ms"),
            ("output_tokens_p50", "output tokens p50", ""),
        ):
            number = _number(base.get(key))
            if number is not None:
                shown = f"{number:.0f}" if key == "output_tokens_p50" else f"{number:.1f}"
                parts.append(f"{label} {shown}{(' ' + unit) if unit else ''}")
        requests = _number(base.get("requests"))
        failed = _number(base.get("failed"))
        head = f"{requests:.0f} requests, one at a time" if requests is not None else "one request at a time"
        if failed:
            head += f" ({failed:.0f} failed)"
        return {
            "baseline": True,
            "baseline_line": head + (": " + ", ".join(parts) if parts else ""),
            "note": str(verdict.get("note") or ""),
        }
    kind = str(verdict["bottleneck"])
    steps = [s for s in verdict.get("steps") or [] if isinstance(s, dict)]
    rate = "critical_rate_rps" in verdict or any("rate_rps" in s for s in steps)
    key, unit, label = (
        ("critical_rate_rps", "req/s", "rate") if rate else ("critical_concurrency", "users", "concurrency")
    )
    value = _number(verdict.get(key))
    if value is not None:
        critical = f"{value:g} {unit}"
    else:
        tops = [_number(s.get("rate_rps" if rate else "users")) for s in steps]
        top = max((t for t in tops if t is not None), default=None)
        critical = f"not reached up to {top:g} {unit}" if top is not None else "not reached (no usable step)"
    evidence = [e for e in verdict.get("evidence") or [] if isinstance(e, dict)]
    why = next((str(e.get("text", "")) for e in evidence if e.get("holds") and e.get("kind") == kind), "")
    if not why:
        why = next((str(e.get("text", "")) for e in evidence if e.get("holds")), "")
    invalid = [
        f"{_users_label(s.get('rate_rps') if rate else s.get('users'))} {unit}: {s.get('invalid_reason') or 'not valid'}"
        for s in steps
        if s.get("valid") is False
    ]
    recs = [
        {k: str(r.get(k) or "") for k in ("change", "flag", "because", "verify")}
        for r in verdict.get("recommendations") or []
        if isinstance(r, dict)
    ]
    return {
        "baseline": False,
        "kind": kind,
        "critical_label": label,
        "critical": critical,
        "why": why,
        "secondary": ", ".join(str(s) for s in verdict.get("secondary") or []),
        "recommendations": recs,
        "invalid": invalid,
        "evidence": [
            {"rule": str(e.get("rule", "")), "holds": bool(e.get("holds")), "text": str(e.get("text", ""))}
            for e in evidence
        ],
    }


def step_table(path: Path, verdict: dict[str, Any] | None) -> dict[str, Any] | None:
    """The step table of a ``steps.csv`` (columns of :data:`STEP_COLUMNS` that hold a value).

    Returns None when the file is missing or has no rows. Each row has ``cells`` and ``css``:
    ``critical`` for the critical step (users or rate equal to the verdict's critical value),
    ``invalid`` for a step whose ``valid`` column is False.
    """
    try:
        with path.open(encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, csv.Error, UnicodeDecodeError):
        return None
    if not rows:
        return None
    columns = [c for c in STEP_COLUMNS if any(_cell(r.get(c[0], ""), c[2]) for r in rows)]
    critical = None
    rate_key = "target_users"
    if verdict is not None:
        critical = _number(verdict.get("critical_concurrency"))
        if critical is None and _number(verdict.get("critical_rate_rps")) is not None:
            critical, rate_key = _number(verdict.get("critical_rate_rps")), "target_rate_rps"
    out = []
    for r in rows:
        css = ""
        if str(r.get("valid", "True")).strip().lower() in ("false", "0"):
            css = "invalid"
        elif critical is not None and _number(r.get(rate_key)) == critical:
            css = "critical"
        out.append({"cells": [_cell(r.get(c[0], ""), c[2]) for c in columns], "css": css})
    return {"headers": [c[1] for c in columns], "rows": out}


def render_markdown(text: str, prefix: str) -> str:
    """``text`` (CommonMark with tables) as HTML, by markdown-it-py; relative links and image
    sources are prefixed with ``prefix`` (the folder of the markdown file, relative to the page)."""
    tokens = _MARKDOWN.parse(text)
    for token in tokens:
        for child in [token, *(token.children or [])]:
            for attr in ("href", "src"):
                value = child.attrGet(attr)
                if isinstance(value, str) and prefix not in ("", ".") and not _absolute(value):
                    child.attrSet(attr, f"{prefix}/{value}")
    return str(_MARKDOWN.renderer.render(tokens, _MARKDOWN.options, {}))


def _absolute(url: str) -> bool:
    return url.startswith(("#", "/")) or ":" in url.split("/", 1)[0]


def report_section(
    base: Path, report: Path, *, heading: str = "", anchor: str = "", summary_open: bool = False
) -> dict[str, Any]:
    """One report folder's card, links, step table, figures and rendered summary, for a page in ``base``."""
    verdict = load_verdict(report / "verdict.json")
    summary = report / "summary.md"
    summary_html = ""
    if summary.exists():
        summary_html = render_markdown(summary.read_text(encoding="utf-8", errors="replace"), rel(base, report))
    links = [
        link_item(base, report / f)
        for f in ("index.html", "summary.md", "steps.csv", "verdict.json")
        if (report / f).exists() and report / f != base / "index.html"
    ]
    return {
        "heading": heading,
        "anchor": anchor,
        "verdict": verdict_card(verdict),
        "links": links,
        "steps": step_table(report / "steps.csv", verdict),
        "figures": [
            {"src": rel(base, report / png), "caption": caption} for png, caption in RUN_PNGS if (report / png).exists()
        ],
        "summary_html": summary_html,
        "summary_open": summary_open,
    }


def render_page(**context: Any) -> str:
    """The whole page from the template; keys not given default to empty."""
    defaults: dict[str, Any] = {
        "intro": "",
        "headlines": [],
        "comparison": None,
        "problem": "",
        "compare_to": None,
        "sections": [],
    }
    return _TEMPLATES.get_template("report.html.j2").render({**defaults, **context})


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
    section = report_section(report, report)
    section["links"] += [link_item(report, run_dir / f) for f in RUN_FILES if (run_dir / f).exists()]
    text = render_page(
        title=f"llm-locust run: {run_dir.name}",
        sections=[{"heading": "", "anchor": "", "notes": [], "reports": [section]}],
    )
    return write_text_atomic(report / "index.html", text)
