"""The verdict as a person reads it: the console block and ``summary.md``'s first section.

Only layout: every sentence comes from the :class:`~llm_locust.analysis.verdict.types.Evidence` and
:class:`~llm_locust.analysis.verdict.types.Recommendation` objects of :func:`llm_locust.analysis.verdict.rules`.
"""

from __future__ import annotations

from llm_locust.analysis.loadaxis import RATE, load_axis
from llm_locust.analysis.verdict.types import Verdict


def _held(verdict: Verdict) -> list:
    """Evidence shown: the primary's, then every other rule that holds."""
    first = verdict.evidence[0]
    return [first] + [e for e in verdict.evidence[1:] if e.holds]


def _invalid_steps(verdict: Verdict) -> list[str]:
    axis = load_axis(verdict.table)
    rows = verdict.table[~verdict.table["valid"]].sort_values(axis.column)
    return [
        f"step {r.step} ({axis.fmt(getattr(r, axis.column))}) invalid: {r.invalid_reason}"
        for r in rows.itertuples(index=False)
    ]


def verdict_lines(verdict: Verdict) -> list[str]:
    """The console block printed after the step table.

    ``Bottleneck: <kind> — <headline>``, the secondary kinds, one ``evidence:`` line per holding
    rule (the primary's first), the invalid steps, and one ``-> change [flag] (because rule;
    verify: ...)`` line per recommendation.
    """
    lines = [verdict.line]
    if verdict.secondary:
        lines.append("  secondary: " + ", ".join(k.value for k in verdict.secondary))
    crit = verdict.critical_concurrency
    if verdict.critical.axis is RATE:
        lines.append(f"  critical rate: {verdict.critical.axis.fmt(verdict.critical.users)}")
    else:
        lines.append(f"  critical concurrency: {crit if crit is not None else '-'}")
    for e in _held(verdict):
        if e.text != verdict.headline:
            lines.append(f"  evidence [{e.rule}]: {e.text}")
    lines += [f"  {line}" for line in _invalid_steps(verdict)]
    lines.append("Recommendations:" if verdict.recommendations else "Recommendations: none")
    for r in verdict.recommendations:
        flag = f" [{r.flag}]" if r.flag else ""
        lines.append(f"  -> {r.change}{flag} (because {r.because}); verify: {r.verify}")
    return lines


def verdict_markdown(verdict: Verdict) -> list[str]:
    """``summary.md``'s "Verdict" section (a list of lines)."""
    crit = verdict.critical_concurrency
    lines = [
        "## Verdict",
        "",
        f"**Bottleneck: `{verdict.bottleneck.value}`** — {verdict.headline}",
        "",
        (
            f"- Critical rate: **{verdict.critical.axis.fmt(verdict.critical.users)}**"
            if verdict.critical.axis is RATE and verdict.critical.users is not None
            else "- Critical rate: **not reached**"
            if verdict.critical.axis is RATE
            else f"- Critical concurrency: **{crit if crit is not None else 'not reached'}**"
        ),
    ]
    if verdict.secondary:
        lines.append("- Secondary: " + ", ".join(f"`{k.value}`" for k in verdict.secondary))
    lines += ["", "Evidence:", ""]
    for e in _held(verdict):
        numbers = ", ".join(f"{k}={_num(v)} {e.units.get(k, '')}".rstrip() for k, v in e.values.items())
        lines.append(f"- `{e.rule}`: {e.text}" + (f" ({numbers})" if numbers else ""))
    invalid = _invalid_steps(verdict)
    if invalid:
        lines += [
            "",
            "Steps left out of the verdict (the load client was the limit there, the run's stop cut "
            "them, or the server was unreachable):",
            "",
            *[f"- {line}" for line in invalid],
        ]
    if verdict.recommendations:
        lines += [
            "",
            "Recommendations (one change at a time, same script, rerun):",
            "",
            "| change | flag | because | verify |",
            "|---|---|---|---|",
        ]
        for r in verdict.recommendations:
            lines.append(f"| {r.change} | {('`' + r.flag + '`') if r.flag else '-'} | `{r.because}` | {r.verify} |")
    return lines + [
        "",
        "All evidence (also the rules that do not hold): "
        "[verdict.json](verdict.json); failures by kind: "
        "![errors](errors.png)",
        "",
    ]


def _num(value) -> str:
    value = float(value)
    if value != value:
        return "-"
    return f"{value:.0f}" if value.is_integer() or abs(value) >= 100 else f"{value:.3g}"
