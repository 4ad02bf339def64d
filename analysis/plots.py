"""Plots of one run. Each function draws on the ``ax`` it is given and returns nothing; figures
are built, styled (``matplotlib.rc_context``) and saved in :mod:`analysis.report` only."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.ticker import FixedLocator, NullLocator

from analysis.knee import CriticalConcurrency, fmt_users

STEP_SHADES: tuple[str, str] = ("#dde6f0", "#f3f3f3")
"""Alternating background colours of ladder steps on the timeline."""


def _concurrency_axis(ax: Axes, users: np.ndarray) -> None:
    """log2 x axis with ticks at the tested concurrencies."""
    tested = np.unique(users[np.isfinite(users) & (users > 0)])
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(tested))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([fmt_users(u) for u in tested])
    if len(tested) == 1:
        ax.set_xlim(tested[0] / 1.5, tested[0] * 1.5)
    ax.set_xlabel("target concurrency (users, log2 scale)")


def _mark_critical(ax: Axes, critical: CriticalConcurrency | None, annotate: bool) -> None:
    if critical is None or critical.users is None:
        return
    ax.axvline(critical.users, color="tab:red", linestyle="--", linewidth=1.2,
               label=f"critical concurrency = {fmt_users(critical.users)}")
    if annotate:
        ax.annotate(f"critical\nconcurrency {fmt_users(critical.users)}",
                    xy=(critical.users, 0.04), xycoords=("data", "axes fraction"),
                    xytext=(-6, 0), textcoords="offset points", ha="right", va="bottom",
                    color="tab:red")


def plot_throughput(ax: Axes, table: pd.DataFrame,
                    critical: CriticalConcurrency | None = None) -> None:
    """Output throughput vs target concurrency, with achieved concurrency on a twin axis.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    table : pandas.DataFrame
        Per-step table; uses ``target_users``, ``output_tps`` (tokens/s), ``client_inflight``
        and ``server_running`` (requests).
    critical : CriticalConcurrency, optional
        Drawn as a vertical line with an annotation when it has a value.
    """
    data = table.sort_values("target_users")
    users = data["target_users"].to_numpy(float)
    ax.plot(users, data["output_tps"], marker="o", color="tab:blue", linewidth=2,
            label="output throughput (tokens/s)")
    ax.set_ylabel("output throughput (tokens/s)")
    ax.set_ylim(bottom=0)
    _concurrency_axis(ax, users)
    _mark_critical(ax, critical, annotate=True)
    twin = ax.twinx()
    twin.plot(users, data["client_inflight"], marker="s", markersize=4, linestyle=":",
              color="tab:gray", label="client in-flight (achieved, requests)")
    if data["server_running"].notna().any():
        twin.plot(users, data["server_running"], marker="^", markersize=4, linestyle=":",
                  color="tab:green", label="server running (requests)")
    twin.set_ylabel("requests (time-averaged)")
    twin.set_ylim(bottom=0)
    handles, labels = ax.get_legend_handles_labels()
    twin_handles, twin_labels = twin.get_legend_handles_labels()
    ax.legend(handles + twin_handles, labels + twin_labels, loc="upper left")
    ax.set_title("Output throughput vs concurrency (steady windows)")


def plot_latency(ax: Axes, table: pd.DataFrame,
                 critical: CriticalConcurrency | None = None) -> None:
    """TTFT p50/p95 and TPOT p50 vs target concurrency; log y axis when they span >20x.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    table : pandas.DataFrame
        Per-step table; uses ``target_users``, ``ttft_p50_ms``, ``ttft_p95_ms``, ``tpot_p50_ms``.
    critical : CriticalConcurrency, optional
        Drawn as a vertical line when it has a value.
    """
    data = table.sort_values("target_users")
    users = data["target_users"].to_numpy(float)
    series = (("ttft_p50_ms", "TTFT p50", "tab:orange", "-", "o"),
              ("ttft_p95_ms", "TTFT p95", "tab:brown", "--", "v"),
              ("tpot_p50_ms", "TPOT p50", "tab:purple", "-", "s"))
    for column, label, color, style, marker in series:
        ax.plot(users, data[column], marker=marker, color=color, linestyle=style, label=label)
    values = data[[s[0] for s in series]].to_numpy(float)
    positive = values[np.isfinite(values) & (values > 0)]
    if len(positive) and positive.max() / positive.min() > 20:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    _concurrency_axis(ax, users)
    _mark_critical(ax, critical, annotate=False)
    ax.set_ylabel("latency (ms)")
    ax.legend(loc="upper left")
    ax.set_title("Latency vs concurrency (successful requests, steady windows)")


def plot_timeline(ax: Axes, *, steps: pd.DataFrame, warmup_s: float, inflight: pd.DataFrame,
                  server: pd.DataFrame, t0_s: float) -> None:
    """Client in-flight and server running/waiting over the run, ladder steps shaded.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    steps : pandas.DataFrame
        ``step``, ``target_users``, ``start_s``, ``end_s`` (Unix s). Steps are shaded
        alternately and labelled with their concurrency; the warm-up part is hatched. Empty for
        a run without a ladder: nothing shaded, and the title does not mention steps.
    warmup_s : float
        Warm-up at the start of each step, s.
    inflight : pandas.DataFrame
        :func:`analysis.metrics.inflight_binned` (``t_s`` bin start, ``inflight`` bin average).
    server : pandas.DataFrame
        :func:`analysis.server.server_series` (``t_s``, ``running``, ``waiting``); may be empty.
    t0_s : float
        Wall clock (Unix s) shown as 0 on the x axis.
    """
    label_transform = ax.get_xaxis_transform()
    for k, step in enumerate(steps.itertuples(index=False)):
        start, end = step.start_s - t0_s, step.end_s - t0_s
        ax.axvspan(start, end, color=STEP_SHADES[k % 2], linewidth=0, zorder=0)
        warm_end = min(start + warmup_s, end)
        if warm_end > start:
            ax.axvspan(start, warm_end, facecolor="none", edgecolor="#9aa5b1", hatch="///",
                       linewidth=0, zorder=0, label="warm-up (excluded)" if k == 0 else None)
        if not math.isnan(step.target_users):
            ax.text((start + end) / 2, 0.98, f"c={fmt_users(step.target_users)}",
                    transform=label_transform, ha="center", va="top", fontsize="small")
    if not inflight.empty:
        ax.plot(inflight["t_s"] - t0_s, inflight["inflight"], drawstyle="steps-post",
                color="tab:gray", linewidth=1.2, label="client in-flight (1 s average)")
    if not server.empty:
        ax.plot(server["t_s"] - t0_s, server["running"], drawstyle="steps-post",
                color="tab:green", linewidth=1.5, label="server running")
        ax.plot(server["t_s"] - t0_s, server["waiting"], drawstyle="steps-post",
                color="tab:red", linewidth=1.5, label="server waiting")
    top = max([1.0] + [float(np.nanmax(frame[c])) for frame, c in
                       ((inflight, "inflight"), (server, "running"), (server, "waiting"))
                       if not frame.empty and frame[c].notna().any()])
    ax.set_ylim(0, top * 1.15)
    ax.set_xlabel("time since run start (s)")
    ax.set_ylabel("requests")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.set_title("Requests in flight over the run"
                 + (" (shaded: ladder steps)" if len(steps) else ""))
