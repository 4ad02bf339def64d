"""Plots of a round comparison. Each draws on the ``ax`` it is given; figures are built and saved
in :mod:`llm_locust.analysis.compare.report` only."""

from __future__ import annotations

import math
import textwrap

import numpy as np
from matplotlib.axes import Axes
from matplotlib.ticker import FixedLocator, NullLocator

from llm_locust.analysis.compare.rounds import RoundSummary
from llm_locust.analysis.compare.table import rounds_axis
from llm_locust.analysis.loadaxis import LoadAxis
from llm_locust.analysis.verdict.knee import fmt_users


def _label(index: int, summary: RoundSummary, change: str) -> str:
    # wrapped, not cut: the values ("4 -> 8") come last and are what the reader looks for
    tag = "baseline" if index == 0 else textwrap.fill(change, width=48, max_lines=3, placeholder=" ...")
    return f"round {index + 1}: {tag}"


def _x_axis(ax: Axes, users: list[float], axis: LoadAxis) -> None:
    tested = sorted({u for u in users if u > 0})
    if not tested:
        return
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(tested))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([fmt_users(u) for u in tested])
    ax.set_xlabel(
        "target concurrency (users, log2 scale)"
        if axis.quantity == "concurrency"
        else "offered rate (req/s, log2 scale)"
    )


def plot_rounds_throughput(ax: Axes, summaries: list[RoundSummary], changes: list[str]) -> None:
    """Output tokens/s vs target concurrency (or offered rate in request-rate rounds), one line per
    round, bootstrap interval as error bars, each round's critical load as a hollow marker.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    summaries : list of RoundSummary
    changes : list of str
        The "what changed" cell of each round (legend).
    """
    axis = rounds_axis(summaries)
    all_users = []
    for i, (summary, change) in enumerate(zip(summaries, changes)):
        users = sorted(summary.step_tps)
        if not users:
            continue
        all_users += users
        est = [summary.step_tps[u] for u in users]
        values = np.array([e.value for e in est])
        low = np.array([e.value - e.low if math.isfinite(e.low) else 0.0 for e in est])
        high = np.array([e.high - e.value if math.isfinite(e.high) else 0.0 for e in est])
        line = ax.errorbar(
            users, values, yerr=[low, high], marker="o", capsize=3, linewidth=2, label=_label(i, summary, change)
        )
        if summary.critical_users is not None and summary.critical_users in summary.step_tps:
            ax.plot(
                [summary.critical_users],
                [summary.step_tps[summary.critical_users].value],
                "o",
                markersize=14,
                markerfacecolor="none",
                color=line[0].get_color(),
            )
    _x_axis(ax, all_users, axis)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("output throughput (tokens/s)")
    ax.set_title(f"Output throughput vs {axis.quantity} by round (ring: critical {axis.quantity})")
    ax.legend(loc="upper left")


def plot_rounds_ttft(ax: Axes, summaries: list[RoundSummary], changes: list[str]) -> None:
    """TTFT p50 (solid) and p95 (dotted) vs target concurrency (or offered rate), one colour per
    round; log y axis when the values span more than 20x."""
    axis = rounds_axis(summaries)
    all_users, values = [], []
    for i, (summary, change) in enumerate(zip(summaries, changes)):
        table = summary.steps
        if table.empty:
            continue
        data = table.sort_values(summary.axis.column)
        users = data[summary.axis.column].to_numpy(float)
        all_users += list(users)
        (line,) = ax.plot(
            users, data["ttft_p50_ms"], marker="o", linewidth=2, label=_label(i, summary, change) + " p50"
        )
        ax.plot(
            users,
            data["ttft_p95_ms"],
            marker=".",
            linestyle=":",
            color=line.get_color(),
            label=_label(i, summary, change) + " p95",
        )
        values += [v for v in data[["ttft_p50_ms", "ttft_p95_ms"]].to_numpy(float).ravel() if v > 0]
    _x_axis(ax, all_users, axis)
    if values and max(values) / min(values) > 20:
        ax.set_yscale("log")
    ax.set_ylabel("TTFT (ms)")
    ax.set_title(f"Time to first token vs {axis.quantity} by round")
    ax.legend(loc="upper left")


def plot_single_decode(ax: Axes, summaries: list[RoundSummary], changes: list[str]) -> None:
    """Single-request decode rate per round: the median with its bootstrap interval, and each
    request as a dot."""
    names, top = [], 0.0
    for i, (summary, change) in enumerate(zip(summaries, changes)):
        est = summary.single_decode_tps
        names.append(_label(i, summary, change))
        values = summary.single_decode_values[np.isfinite(summary.single_decode_values)]
        if len(values):
            top = max(top, float(values.max()))
            jitter = (np.arange(len(values)) % 7 - 3) * 0.03
            ax.plot(i + 0.25 + jitter, values, ".", color="tab:gray", alpha=0.6)
        if math.isfinite(est.value):
            low = est.value - est.low if math.isfinite(est.low) else 0.0
            high = est.high - est.value if math.isfinite(est.high) else 0.0
            ax.errorbar([i], [est.value], yerr=[[low], [high]], fmt="s", markersize=8, capsize=6, color=f"C{i}")
            ax.annotate(
                est.text(),
                xy=(i, est.value),
                xytext=(-12, 0),
                textcoords="offset points",
                va="center",
                ha="right",
                fontsize="small",
            )
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=0, fontsize="small")
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_ylim(0, top * 1.15 if top > 0 else None)
    ax.set_ylabel("decode rate (tokens/s per request)")
    ax.set_title("Single-request decode rate by round (median, 95 % bootstrap interval; dots: requests)")
