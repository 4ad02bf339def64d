"""Library entry point: run directory -> per-step table -> critical concurrency -> ``report/``.

:func:`analyze` is pure (a loaded :class:`~analysis.rundir.Run` in, an :class:`AnalysisResult`
out); :func:`write_report` is the only writer (PNGs, ``steps.csv``, ``summary.md``);
:func:`analyze_run` chains load, analyze and write.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from analysis.baseline import Baseline, baseline_medians
from analysis.configcheck import ConfigCheck, check_config
from analysis.knee import CriticalConcurrency, find_critical_concurrency, fmt_users
from analysis.metrics import end_time_s, inflight_binned, inflight_series
from analysis.outcome import RunOutcome, error_examples, error_lines, judge_outcome, outcome_line
from analysis.plots import plot_latency, plot_throughput, plot_timeline
from analysis.rundir import Run, load_run
from analysis.serverlog.errors import count_by_kind
from analysis.serversource import (
    ServerEvidence, ServerOptions, choose_step_means, describe_sources, gather,
    step_server_means,
)
from analysis.steps import step_table, step_windows

PLOT_STYLE: dict[str, object] = {
    "figure.dpi": 100, "savefig.dpi": 110, "font.size": 10, "axes.grid": True,
    "grid.alpha": 0.3, "legend.fontsize": "small", "legend.framealpha": 0.85,
}
"""rc settings applied (via ``rc_context``) while the report figures are drawn."""

DISPLAY_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("step", "step", "{:.0f}"), ("target_users", "users", "users"),
    ("client_inflight", "in-flight", "{:.2f}"), ("server_running", "running", "{:.2f}"),
    ("server_waiting", "waiting", "{:.2f}"), ("kv_usage_ratio", "KV", "{:.1%}"),
    ("output_tps", "out tok/s", "{:.1f}"), ("request_rps", "req/s", "{:.2f}"),
    ("ttft_p50_ms", "TTFT p50 ms", "{:.0f}"), ("ttft_p95_ms", "TTFT p95 ms", "{:.0f}"),
    ("tpot_p50_ms", "TPOT p50 ms", "{:.1f}"), ("e2e_p50_ms", "E2E p50 ms", "{:.0f}"),
    ("completed", "ok", "{:.0f}"), ("errors", "errors", "{:.0f}"),
)
"""(column, header, format) of the printed and markdown step tables."""

MARKDOWN_EXTRA_COLUMNS: dict[str, tuple[str, str, str]] = {
    "output_tps": ("output_tps_prorated", "out tok/s prorated", "{:.1f}"),
}
"""Columns only ``summary.md``'s table shows, each after the column named by its key."""

SINGLE_LEVEL_LINE = "one load level: no ladder to judge"
"""Start of the verdict line of a run without shape steps (``shape.kind == "none"``)."""


@dataclass(frozen=True, kw_only=True)
class ReportPaths:
    """Files written into ``<run_dir>/report/``."""

    report_dir: Path
    throughput_png: Path | None
    """None when there is nothing to draw against concurrency (no ladder, no success)."""
    latency_png: Path | None
    """None like ``throughput_png``."""
    timeline_png: Path
    steps_csv: Path
    summary_md: Path


@dataclass(frozen=True, kw_only=True)
class AnalysisResult:
    """Everything computed from one run directory.

    Attributes
    ----------
    run : Run
        The loaded run directory.
    table : pandas.DataFrame
        Per-step table (:func:`analysis.steps.step_table`).
    critical : CriticalConcurrency
    server : pandas.DataFrame
        Normalised server series drawn on the timeline (:mod:`analysis.series`; metrics, or the
        log under the ``log`` policy or without metrics); empty without server data.
    inflight : pandas.DataFrame
        Client in-flight, 1 s averages (:func:`analysis.metrics.inflight_binned`).
    baseline : Baseline or None
        Medians of a baseline run (``shape.kind == "baseline"``), else None.
    paths : ReportPaths or None
        Written files; None until :func:`write_report` ran.
    evidence : ServerEvidence or None
        Everything read about the server (metrics, log, configuration).
    server_source_line : str
        Which source the step table's server columns came from (also the first line of the
        critical-concurrency evidence).
    config_check : ConfigCheck or None
        "Batching settings took effect: …".
    outcome : RunOutcome
        Whether any request succeeded (:mod:`analysis.outcome`); without one there is no verdict
        and :attr:`exit_code` is 1.
    errors : pandas.DataFrame
        Failures by kind with one example message each (:func:`analysis.outcome.error_examples`).
    single_level : bool
        The run had no shape steps (``shape.kind == "none"``): one load level of unknown target
        concurrency, no ladder to judge.
    notes : tuple of str
        What the analysis had to assume (e.g. a run that ended without a clean stop).
    no_verdict_line : str
        The line shown instead of the critical concurrency when there is none to judge
        ("No verdict: no requests were recorded: …", "No verdict: no successful request: …",
        "One load level: no ladder to judge …"); "" when there is a verdict.
    """

    run: Run
    table: pd.DataFrame
    critical: CriticalConcurrency
    server: pd.DataFrame
    inflight: pd.DataFrame
    baseline: Baseline | None = None
    paths: ReportPaths | None = None
    evidence: ServerEvidence | None = None
    server_source_line: str = ""
    config_check: ConfigCheck | None = None
    outcome: RunOutcome = RunOutcome.MEASURED
    errors: pd.DataFrame | None = None
    single_level: bool = False
    notes: tuple[str, ...] = ()
    no_verdict_line: str = ""

    @property
    def exit_code(self) -> int:
        """0 when some request succeeded, 1 when none did or none was recorded."""
        return self.outcome.exit_code

    @property
    def vs_concurrency(self) -> bool:
        """Whether throughput and latency can be drawn against concurrency (a ladder, a success)."""
        return self.outcome is RunOutcome.MEASURED and not self.single_level


def analyze(run: Run, *, min_gain_per_doubling: float = 1.15, waiting_threshold: float = 0.5,
            ttft_growth: float = 1.5, server: ServerOptions | None = None) -> AnalysisResult:
    """Compute the step table, server series, critical concurrency and config check (no I/O).

    A run without shape steps (``shape.kind == "none"``) is treated as one step spanning the
    whole run with unknown target concurrency: one load level, no ladder to judge, so no
    critical concurrency (:data:`SINGLE_LEVEL_LINE`, with the achieved in-flight). A run with no
    request, or no successful one, gets no verdict either (:mod:`analysis.outcome`). Thresholds
    are those of
    :func:`analysis.knee.find_critical_concurrency`. The step table's server columns come from
    the source chosen by ``server.source`` (:mod:`analysis.serversource`): ``auto`` (default)
    uses metrics first and the log where metrics have no value; the table's ``server_source``
    column and the first evidence line say which source each step used.

    Raises
    ------
    ValueError
        An unknown ``server.family`` or time zone, or an unusable user format file.
    """
    options = server or ServerOptions()
    steps = run.steps
    single_level = bool(steps.empty)
    if single_level:
        steps = pd.DataFrame({"step": [0], "target_users": [float("nan")],
                              "start_s": [run.started_at_s], "end_s": [run.ended_at_s]})
    evidence = gather(run, options)
    policy = evidence.resolve(options.source)
    windows = step_windows(steps, run.warmup_s)
    table = step_table(run.requests, windows, None)
    means, labels = choose_step_means(step_server_means(windows, evidence.metrics),
                                      step_server_means(windows, evidence.log_series), policy)
    for column in means.columns:
        table[column] = means[column].to_numpy("float64")
    table["server_source"] = pd.Series(labels, index=table.index, dtype=str)
    critical = find_critical_concurrency(table, min_gain_per_doubling=min_gain_per_doubling,
                                         waiting_threshold=waiting_threshold,
                                         ttft_growth=ttft_growth)
    source_line = describe_sources(evidence, options.source, labels)
    critical = replace(critical, evidence=(source_line,) + critical.evidence)
    outcome, no_verdict_line = judge_outcome(run.requests), ""
    if outcome is not RunOutcome.MEASURED:
        why = outcome_line(outcome, len(run.requests))
        critical, no_verdict_line = _no_verdict(None, why), f"No verdict: {why}"
    elif single_level:
        level = table.iloc[0]
        why = (f"{SINGLE_LEVEL_LINE} (shape none: achieved concurrency "
               f"{level['client_inflight']:.2f} requests in flight, {level['output_tps']:.1f} "
               f"output tokens/s)")
        critical, no_verdict_line = _no_verdict(source_line, why), why[0].upper() + why[1:]
    server_series = evidence.series(options.source)
    check = check_config(evidence.config, server_series, table, window_start_s=run.started_at_s,
                         window_end_s=run.ended_at_s, request_tokens=_request_tokens(run),
                         waiting_threshold=waiting_threshold)
    inflight = inflight_binned(inflight_series(run.requests["t_start_s"], end_time_s(run.requests)))
    shape = run.meta.get("shape") or {}
    baseline = baseline_medians(run.requests, shape.get("requests")) if shape.get("kind") == "baseline" else None
    return AnalysisResult(run=replace(run, steps=steps), table=table, critical=critical,
                          server=server_series, inflight=inflight, baseline=baseline,
                          evidence=evidence, server_source_line=source_line, config_check=check,
                          outcome=outcome, errors=error_examples(run.requests),
                          single_level=single_level, notes=run.notes,
                          no_verdict_line=no_verdict_line)


def _no_verdict(source_line: str | None, why: str) -> CriticalConcurrency:
    """A :class:`CriticalConcurrency` without a value whose last evidence line says why."""
    return CriticalConcurrency(users=None, saturated_step=None, saturated_users=None,
                               highest_tested_users=None, server_data=False,
                               evidence=(*([source_line] if source_line else []), why),
                               kneed_users=None)


def _request_tokens(run: Run) -> float | None:
    """Mean prompt tokens of successful requests + max_tokens: the KV one request holds at most."""
    ok = run.requests[run.requests["error_kind"] == ""]
    prompt = ok["prompt_tokens"].mean() if len(ok) else float("nan")
    max_tokens = (run.meta.get("workload") or {}).get("max_tokens")
    if max_tokens is None:
        max_tokens = ok["output_tokens"].mean() if len(ok) else float("nan")
    total = (0.0 if pd.isna(prompt) else float(prompt)) + (0.0 if pd.isna(max_tokens) else float(max_tokens))
    return total if total > 0 else None


def analyze_run(run_dir: Path | str, *, min_gain_per_doubling: float = 1.15,
                waiting_threshold: float = 0.5, ttft_growth: float = 1.5,
                write: bool = True, server: ServerOptions | None = None,
                server_log: Path | str | None = None,
                server_log_format: Path | str | None = None) -> AnalysisResult:
    """Load a run directory, analyse it and (by default) write ``<run_dir>/report/``.

    Parameters
    ----------
    run_dir : Path or str
    min_gain_per_doubling, waiting_threshold, ttft_growth : float
        Critical-concurrency thresholds (:func:`analysis.knee.find_critical_concurrency`).
    write : bool, default True
        Write the PNGs, ``steps.csv`` and ``summary.md``.
    server : ServerOptions, optional
        Which server source to use and how to read the log (:mod:`analysis.serversource`).
    server_log, server_log_format : Path or str, optional
        A server log / user format file to read instead of the run directory's own.

    Returns
    -------
    AnalysisResult
        With ``paths`` set when ``write`` is true.

    Raises
    ------
    analysis.rundir.RunDirError
        If the run directory is missing files or holds unreadable data.
    """
    run = load_run(run_dir, server_log=server_log, server_log_format=server_log_format)
    result = analyze(run, min_gain_per_doubling=min_gain_per_doubling,
                     waiting_threshold=waiting_threshold, ttft_growth=ttft_growth, server=server)
    return write_report(result) if write else result


def write_report(result: AnalysisResult, report_dir: Path | None = None) -> AnalysisResult:
    """Write throughput/latency/timeline PNGs, ``steps.csv`` and ``summary.md``.

    The throughput and latency plots are drawn against concurrency: without a ladder (one load
    level) or without a successful request they would be empty, so they are not written (and a
    stale copy from an earlier analysis is removed); ``paths`` then holds None for them.

    Parameters
    ----------
    result : AnalysisResult
    report_dir : Path, optional
        Defaults to ``<run_dir>/report``; created if missing.

    Returns
    -------
    AnalysisResult
        ``result`` with ``paths`` set.
    """
    out = Path(report_dir) if report_dir is not None else result.run.run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    drawn = result.vs_concurrency
    if not drawn:
        for name in ("throughput.png", "latency.png"):
            (out / name).unlink(missing_ok=True)
    paths = ReportPaths(report_dir=out, throughput_png=out / "throughput.png" if drawn else None,
                        latency_png=out / "latency.png" if drawn else None,
                        timeline_png=out / "timeline.png",
                        steps_csv=out / "steps.csv", summary_md=out / "summary.md")
    steps = result.run.steps.iloc[0:0] if result.single_level else result.run.steps
    with matplotlib.rc_context(PLOT_STYLE):
        if drawn:
            _save(paths.throughput_png, (9, 5.5),
                  lambda ax: plot_throughput(ax, result.table, result.critical))
            _save(paths.latency_png, (9, 5.5),
                  lambda ax: plot_latency(ax, result.table, result.critical))
        _save(paths.timeline_png, (12, 5), lambda ax: plot_timeline(
            ax, steps=steps, warmup_s=result.run.warmup_s, inflight=result.inflight,
            server=result.server, t0_s=result.run.started_at_s))
    result.table.to_csv(paths.steps_csv, index=False)
    paths.summary_md.write_text(summary_markdown(result), encoding="utf-8")
    return replace(result, paths=paths)


def _save(path: Path, size_in: tuple[float, float], draw) -> None:
    fig = Figure(figsize=size_in, layout="constrained")
    draw(fig.add_subplot())
    fig.savefig(path)


def _display_rows(table: pd.DataFrame, *, markdown: bool = False
                  ) -> tuple[list[str], list[list[str]]]:
    """Header and formatted cells; an ``error kinds`` column only when some step has errors;
    with ``markdown``, also :data:`MARKDOWN_EXTRA_COLUMNS` (those the table has)."""
    columns = []
    for column in DISPLAY_COLUMNS:
        columns.append(column)
        extra = MARKDOWN_EXTRA_COLUMNS.get(column[0])
        if markdown and extra is not None and extra[0] in table.columns:
            columns.append(extra)
    if (table["errors"] > 0).any():
        columns.append(("error_kinds", "error kinds", "text"))
    headers = [header for _, header, _ in columns]
    rows = []
    for record in table.to_dict("records"):
        cells = []
        for column, _, fmt in columns:
            value = record[column]
            if fmt == "text":
                cells.append(str(value))
            elif fmt == "users":
                cells.append(fmt_users(value))
            else:
                cells.append("-" if pd.isna(value) else fmt.format(value))
        rows.append(cells)
    return headers, rows


def format_table(table: pd.DataFrame) -> str:
    """Per-step table as aligned plain text (NaN shown as ``-``)."""
    headers, rows = _display_rows(table)
    widths = [max(len(h), *(len(r[k]) for r in rows)) if rows else len(h)
              for k, h in enumerate(headers)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(headers, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
    return "\n".join(lines)


def markdown_table(table: pd.DataFrame) -> str:
    """Per-step table as a GitHub-flavoured markdown table (NaN shown as ``-``), with the
    prorated throughput cross-check (:mod:`analysis.steps`) after ``out tok/s``."""
    headers, rows = _display_rows(table, markdown=True)
    lines = ["| " + " | ".join(headers) + " |", "|" + "---:|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def critical_line(critical: CriticalConcurrency) -> str:
    """The one-line verdict, ``Critical concurrency: <number or "not reached ...">``."""
    return f"Critical concurrency: {critical.text}"


def shape_text(shape: dict, warmup_s: float) -> str:
    """How the load was shaped, in words, from run.json's ``shape`` object.

    >>> shape_text({"kind": "ladder", "ladder": [1, 2, 4], "dwell_s": 30.0}, 10.0)
    'shape `ladder` 1, 2, 4 users, each step held 30 s (the first 10 s warm-up)'
    >>> shape_text({"kind": "none"}, 0.0)
    'shape `none` (users set by Locust itself, no steps)'
    """
    kind = shape.get("kind") or "none"
    if kind == "ladder":
        users = ", ".join(str(u) for u in shape.get("ladder") or [s.get("users") for s in shape.get("steps") or []])
        return f"shape `ladder` {users} users, each step held {shape.get('dwell_s', 0):g} s (the first {warmup_s:g} s warm-up)"
    if kind == "baseline":
        return f"shape `baseline` (one stream at a time, {shape.get('requests', '?')} requests)"
    return f"shape `{kind}` (users set by Locust itself, no steps)"


def summary_markdown(result: AnalysisResult) -> str:
    """``summary.md``: run identity, notes, step table, critical concurrency with evidence (or
    why there is none, with the error kinds when every request failed), figures."""
    meta, crit = result.run.meta, result.critical
    workload = meta.get("workload") or {}
    shape = meta.get("shape") or {}
    lines = [
        f"# llm-locust run: {meta.get('model', '?')} at {meta.get('host', '?')}", "",
        f"- Run directory: `{result.run.run_dir}`",
        f"- Duration: {result.run.ended_at_s - result.run.started_at_s:.1f} s; {shape_text(shape, result.run.warmup_s)}",
        "- Workload: " + ", ".join(f"{k}={v}" for k, v in workload.items()),
        f"- Requests: {len(result.run.requests)}; server metrics: "
        f"{'yes' if len(result.run.server_samples) else 'none scraped'}; server log: "
        f"{'yes' if result.run.server_files.log_text else 'none'}",
        *[f"- **Note: {note}**" for note in result.notes], "",
    ]
    if result.outcome is not RunOutcome.NO_REQUESTS:
        lines += ["## Per-step table (steady windows)", "", markdown_table(result.table), "",
                  "`out tok/s`: output tokens of requests completed in the window / window "
                  "length (the headline); `out tok/s prorated`: each request's tokens spread "
                  "over its decode and integrated over the window (cross-check, see "
                  "`analysis/steps.py`).", ""]
    if result.baseline is not None and result.outcome is RunOutcome.MEASURED:
        lines += [f"**{result.baseline.text}**", ""]
    lines += ["## Critical concurrency", ""]
    if result.no_verdict_line:
        lines += [f"**{result.no_verdict_line}**", ""]
        if crit.evidence[:-1]:
            lines += [*[f"- {line}" for line in crit.evidence[:-1]], ""]
        if result.outcome is RunOutcome.NO_SUCCESS and result.errors is not None:
            lines += ["Errors by kind (one example message each):", "",
                      *[f"- {line}" for line in error_lines(result.errors)], ""]
    else:
        kneed = "no knee found" if crit.kneed_users is None else f"{crit.kneed_users:g} users"
        lines += [f"**{critical_line(crit)}**", "", *[f"- {line}" for line in crit.evidence], "",
                  f"kneed cross-check (knee of throughput vs log2 concurrency, not used for the "
                  f"verdict): {kneed}.", ""]
    figures = ["throughput", "latency"] if result.vs_concurrency else []
    lines += [*server_markdown(result), "## Figures", "",
              *[item for name in figures for item in (f"![{name}]({name}.png)", "")],
              "![timeline](timeline.png)", "", "Table as CSV: [steps.csv](steps.csv)", ""]
    return "\n".join(lines)


def config_line(result: AnalysisResult) -> str:
    """``Batching settings took effect: yes/no/cannot tell, because …`` ("" without a check)."""
    return result.config_check.line if result.config_check is not None else ""


def server_markdown(result: AnalysisResult) -> list[str]:
    """``summary.md`` lines: the batching-config check and what the server side said."""
    check, evidence = result.config_check, result.evidence
    if check is None or evidence is None:
        return []
    lines = ["## Batching configuration", "", f"**{check.line}**", "",
             *[f"- {detail}" for detail in check.details], "", "## Server side", "",
             f"- {result.server_source_line}"]
    config = evidence.config
    if not config.empty:
        lines.append("- configuration read: " + "; ".join(config.describe()))
    log = evidence.log
    if log is not None:
        family = log.family.value if log.family else "unrecognised"
        lines.append(f"- server log: {family}, {log.data_lines} data lines, placed by "
                     f"{log.time_source or '-'}")
        lines += [f"- {note}" for note in log.notes]
        if len(log.errors):
            counts = ", ".join(f"{k} {n}" for k, n in count_by_kind(log.errors).items())
            lines.append(f"- server log error lines by kind: {counts}")
            for row in result.table.itertuples(index=False):
                inside = log.errors[(log.errors["t_s"] >= row.window_start_s)
                                    & (log.errors["t_s"] < row.window_end_s)]
                if len(inside):
                    per_kind = ", ".join(f"{k} {n}" for k, n in count_by_kind(inside).items())
                    lines.append(f"  - step {row.step} ({fmt_users(row.target_users)} users): "
                                 f"{per_kind}")
    lines += [f"- {note}" for note in evidence.notes]
    return lines + [""]
