"""Library entry point of ``llm-locust compare``: rounds in, round table + attribution out.

:func:`compare_rounds` loads and computes (no writing); :func:`write_comparison` writes
``compare.json``, ``rounds.csv``, ``summary.md`` and the PNGs into the output folder.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from llm_locust.analysis.atomicwrite import write_text_atomic
from llm_locust.analysis.compare.attribution import Attribution, attribute
from llm_locust.analysis.compare.changes import (
    RoundDirs,
    change_summary,
    check_same_load_axis,
    check_same_workload,
    describe_changes,
    fingerprint,
    fingerprint_differences,
    load_round,
    round_settings,
)
from llm_locust.analysis.compare.plots import plot_rounds_throughput, plot_rounds_ttft, plot_single_decode
from llm_locust.analysis.compare.rounds import RoundSummary, summarize_round
from llm_locust.analysis.compare.table import markdown_round_table, round_table, rounds_axis
from llm_locust.analysis.loadaxis import RATE
from llm_locust.analysis.pipeline import PLOT_STYLE

COMPARE_SCHEMA = 2
"""Version of the ``compare.json`` layout (:func:`comparison_json`)."""

PNG_NAMES: tuple[str, ...] = ("throughput_by_round.png", "ttft_by_round.png", "single_decode_by_round.png")
"""PNGs written by :func:`write_comparison`."""


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """Rounds side by side.

    Attributes
    ----------
    rounds : list of RoundSummary
        In the order given; the first is the baseline round.
    changes : list of list of str
        Per round, what differs from the baseline round (:func:`describe_changes`); the first is
        empty.
    table : pandas.DataFrame
        :func:`llm_locust.analysis.compare.table.round_table`.
    attributions : list of Attribution
        Each later round against the baseline round.
    workload_differences : list of str
        Fingerprint differences accepted with ``allow_different_workload`` (else empty).
    fingerprint : dict
        The baseline round's workload fingerprint.
    out_dir : Path or None
        Set by :func:`write_comparison`.
    """

    rounds: list[RoundSummary]
    changes: list[list[str]]
    table: pd.DataFrame
    attributions: list[Attribution]
    workload_differences: list[str]
    fingerprint: dict
    out_dir: Path | None = None

    @property
    def change_cells(self) -> list[str]:
        return ["baseline"] + [change_summary(c) for c in self.changes[1:]]


def compare_rounds(paths: list[Path | str], *, allow_different_workload: bool = False) -> Comparison:
    """Load the rounds, check their workloads match, build the table and the attributions.

    Parameters
    ----------
    paths : list of Path or str
        Two or more rounds (:func:`llm_locust.analysis.compare.changes.load_round`), baseline first.
    allow_different_workload : bool, default False
        Compare even when the workload fingerprints differ (the differences are listed).

    Returns
    -------
    Comparison

    Raises
    ------
    ValueError
        Fewer than two rounds, or one folder given twice.
    llm_locust.analysis.compare.changes.WorkloadMismatch
        The fingerprints differ and ``allow_different_workload`` is false.
    llm_locust.analysis.compare.changes.LoadAxisMismatch
        One round's ladder is a concurrency ladder and another's a request-rate ladder (whatever
        ``allow_different_workload`` says).
    llm_locust.analysis.rundir.reader.RunDirError
        A run directory cannot be read.
    """
    if len(paths) < 2:
        raise ValueError(f"compare needs two rounds or more, got {len(paths)}")
    seen: dict[Path, int] = {}
    for k, path in enumerate(paths, start=1):
        first = seen.setdefault(Path(path).resolve(), k)
        if first != k:  # a repeated path reads as a confident "no difference"
            raise ValueError(f"{path} is given twice (rounds {first} and {k}): compare needs a different run per round")
    rounds: list[RoundDirs] = [load_round(p) for p in paths]
    check_same_load_axis(rounds)
    differences = fingerprint_differences(rounds)
    if not allow_different_workload:
        check_same_workload(rounds)
    summaries = [summarize_round(r) for r in rounds]
    settings = [round_settings(r, s.server_config) for r, s in zip(rounds, summaries)]
    changes: list[list[str]] = [[]] + [describe_changes(settings[0], s) for s in settings[1:]]
    cells = ["baseline"] + [change_summary(c) for c in changes[1:]]
    attributions = [
        attribute(summaries[0], s, client_changes_only=bool(c) and all(x.startswith("client.") for x in c))
        for s, c in zip(summaries[1:], changes[1:])
    ]
    return Comparison(
        rounds=summaries,
        changes=changes,
        table=round_table(summaries, cells),
        attributions=attributions,
        workload_differences=differences if allow_different_workload else [],
        fingerprint=fingerprint(rounds[0].runs[0]),
    )


def comparison_json(comparison: Comparison) -> dict:
    """The ``compare.json`` object, ``schema`` 2 (2: the attribution's concurrent ratios are of the
    prorated throughput, ``*_prorated_ratio``, and it adds ``batch_ceiling``,
    ``critical_concurrency``, ``shares``, ``concurrent.batching_gain`` and the single request's
    ``server_prefill_ms_ratio``, ``ttft_is_wait``, ``moved``: :meth:`Attribution.to_json`):
    ``load_axis`` (``concurrency`` or ``rate``), ``rounds`` (each
    row of the table plus the changes, the single-request intervals and ``output_tps_by_step``:
    one object per step keyed ``users`` or ``rate_rps``, a rate step with its
    ``achieved_rate_rps``), ``attribution`` (the second round against the first),
    ``attributions`` (every later round against the first), ``workload`` (fingerprint) and
    ``workload_differences``."""
    axis = rounds_axis(comparison.rounds)
    rows = []
    for summary, changes, record in zip(
        comparison.rounds, comparison.changes, comparison.table.to_dict(orient="records")
    ):
        rows.append(
            {
                **{k: _clean(v) for k, v in record.items()},
                "changes": changes,
                "single_ttft_ms_ci": summary.single_ttft_ms.to_json(),
                "single_decode_tps_ci": summary.single_decode_tps.to_json(),
                "output_tps_by_step": [
                    {
                        axis.value_key: u,
                        **e.to_json(),
                        **(
                            {"achieved_rate_rps": _clean(summary.step_value(u, "achieved_rate_rps"))}
                            if axis is RATE
                            else {}
                        ),
                    }
                    for u, e in sorted(summary.step_tps.items())
                ],
            }
        )
    attributions = [a.to_json() for a in comparison.attributions]
    return {
        "schema": COMPARE_SCHEMA,
        "load_axis": axis.quantity,
        "baseline_round": comparison.rounds[0].name,
        "rounds": rows,
        "attribution": attributions[0] if attributions else None,
        "attributions": attributions,
        "workload": comparison.fingerprint,
        "workload_differences": comparison.workload_differences,
    }


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value.item() if hasattr(value, "item") else value


def attribution_lines(comparison: Comparison) -> list[str]:
    """``Attribution (round k vs round 1): <kind>`` followed by its evidence, per later round."""
    lines = []
    for k, attribution in enumerate(comparison.attributions, start=2):
        lines.append(f"Attribution (round {k} vs round 1): {attribution.kind}")
        lines += [f"  {line}" for line in attribution.evidence]
    return lines


def summary_markdown(comparison: Comparison) -> str:
    """``summary.md``: rounds, changes, the table, the attribution with evidence, the figures."""
    lines = ["# Round comparison", ""]
    for k, summary in enumerate(comparison.rounds, start=1):
        lines.append(f"- round {k}: `{summary.name}`" + (" (baseline)" if k == 1 else ""))
        for change in comparison.changes[k - 1]:
            lines.append(f"  - {change}")
    if comparison.workload_differences:
        lines += [
            "",
            "**Workloads differ (compared anyway):**",
            "",
            *[f"- {d}" for d in comparison.workload_differences],
        ]
    lines += [
        "",
        "## Round table",
        "",
        markdown_round_table(comparison.table),
        "",
        "Table as CSV: [rounds.csv](rounds.csv); everything as data: [compare.json](compare.json)",
        "",
        "## Attribution",
        "",
    ]
    for k, attribution in enumerate(comparison.attributions, start=2):
        lines += [
            f"**Round {k} vs round 1: {attribution.kind}**",
            "",
            *[f"- {line}" for line in attribution.evidence],
            "",
        ]
    lines += ["## Figures", "", *[f"![{name[:-4]}]({name})\n" for name in PNG_NAMES]]
    return "\n".join(lines)


def write_comparison(comparison: Comparison, out_dir: Path | str) -> Comparison:
    """Write ``compare.json``, ``rounds.csv``, ``summary.md`` and :data:`PNG_NAMES` to ``out_dir``
    (created if missing); returns the comparison with ``out_dir`` set."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(
        out / "compare.json", json.dumps(comparison_json(comparison), indent=2, ensure_ascii=False) + "\n"
    )
    write_text_atomic(out / "rounds.csv", comparison.table.to_csv(index=False))
    write_text_atomic(out / "summary.md", summary_markdown(comparison))
    cells = comparison.change_cells
    drawers = (plot_rounds_throughput, plot_rounds_ttft, plot_single_decode)
    with matplotlib.rc_context(PLOT_STYLE):
        for name, draw in zip(PNG_NAMES, drawers):
            fig = Figure(figsize=(10, 5.5), layout="constrained")
            draw(fig.add_subplot(), comparison.rounds, cells)
            fig.savefig(out / name)
    return replace(comparison, out_dir=out)
