"""Plots of one run. Each function draws on the ``ax`` it is given and returns nothing; figures
are built, styled (``matplotlib.rc_context``) and saved in :mod:`llm_locust.analysis.pipeline` only."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.ticker import (
    FixedLocator,
    FuncFormatter,
    LogLocator,
    MaxNLocator,
    NullFormatter,
    NullLocator,
)

from llm_locust.analysis.loadaxis import RATE, USERS, LoadAxis, load_axis
from llm_locust.analysis.perstep.table import replica_column, replica_names
from llm_locust.analysis.verdict.knee import CriticalConcurrency, fmt_users

STEP_SHADES: tuple[str, str] = ("#dde6f0", "#f3f3f3")
"""Alternating background colours of ladder steps on the timeline."""


def _concurrency_axis(ax: Axes, users: np.ndarray, axis: LoadAxis = USERS) -> None:
    """log2 x axis with ticks at the tested load levels (concurrencies, or offered rates)."""
    tested = np.unique(users[np.isfinite(users) & (users > 0)])
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(tested.tolist()))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([fmt_users(u) for u in tested])
    if len(tested) == 1:
        ax.set_xlim(tested[0] / 1.5, tested[0] * 1.5)
    ax.set_xlabel(
        "offered request rate (req/s, log2 scale)" if axis is RATE else "target concurrency (users, log2 scale)"
    )


def _mark_critical(ax: Axes, critical: CriticalConcurrency | None, annotate: bool) -> None:
    if critical is None or critical.users is None:
        return
    ax.axvline(
        critical.users,
        color="tab:red",
        linestyle="--",
        linewidth=1.2,
        label=f"critical {critical.axis.quantity} = {critical.axis.fmt(critical.users)}",
    )
    if annotate:
        ax.annotate(
            f"critical\n{critical.axis.quantity} {fmt_users(critical.users)}",
            xy=(critical.users, 0.04),
            xycoords=("data", "axes fraction"),
            xytext=(-6, 0),
            textcoords="offset points",
            ha="right",
            va="bottom",
            color="tab:red",
        )


def _mark_invalid(ax: Axes, data: pd.DataFrame, column: str) -> None:
    """Red crosses on the steps the load client limited (``valid`` false) and black ones on the
    steps dominated by failures (``failures_dominate``), when the table has those columns."""
    if "valid" in data.columns and not data["valid"].all():
        bad = data[~data["valid"].astype(bool)]
        ax.plot(
            bad[load_axis(data).column],
            bad[column],
            linestyle="none",
            marker="X",
            markersize=11,
            color="tab:red",
            label="client-limited step (invalid, left out)",
            zorder=5,
        )
    if "failures_dominate" in data.columns and data["failures_dominate"].any():
        failed = data[data["failures_dominate"].astype(bool)]
        ax.plot(
            failed[load_axis(data).column],
            failed[column],
            linestyle="none",
            marker="x",
            markersize=11,
            markeredgewidth=2.5,
            color="black",
            zorder=6,
            label="failures dominate (not healthy throughput)",
        )


def plot_throughput(ax: Axes, table: pd.DataFrame, critical: CriticalConcurrency | None = None) -> None:
    """Output throughput vs target concurrency, with achieved concurrency on a twin axis.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    table : pandas.DataFrame
        Per-step table; uses ``target_users``, ``output_tps`` (tokens/s), ``client_inflight``
        and ``server_running`` (requests); ``output_tps_prorated`` (tokens/s, what the knee
        judges) drawn beside ``output_tps`` when present.
    critical : CriticalConcurrency, optional
        Drawn as a vertical line with an annotation when it has a value.
    """
    axis = load_axis(table)
    data = table.sort_values(axis.column)
    users = data[axis.column].to_numpy(float)
    prorated = "output_tps_prorated" in data.columns and bool(np.isfinite(data["output_tps_prorated"]).any())
    ax.plot(
        users,
        data["output_tps"],
        marker="o",
        color="tab:blue",
        linewidth=2,
        label="output throughput, requests completed in the window (tokens/s)"
        if prorated
        else "output throughput (tokens/s)",
    )
    if (
        prorated
    ):  # what the knee and the verdict judge (llm_locust.analysis.perstep.table: tokens spread over each stream)
        ax.plot(
            users,
            data["output_tps_prorated"],
            marker=".",
            linestyle="--",
            color="tab:cyan",
            label="output throughput, prorated: the verdict's (tokens/s)",
        )
    ax.set_ylabel("output throughput (tokens/s)")
    ax.set_ylim(bottom=0)
    _concurrency_axis(ax, users, axis)
    _mark_critical(ax, critical, annotate=True)
    _mark_invalid(ax, data, "output_tps")
    twin = ax.twinx()
    twin.plot(
        users,
        data["client_inflight"],
        marker="s",
        markersize=4,
        linestyle=":",
        color="tab:gray",
        label="client in-flight (achieved, requests)",
    )
    if data["server_running"].notna().any():
        twin.plot(
            users,
            data["server_running"],
            marker="^",
            markersize=4,
            linestyle=":",
            color="tab:green",
            label="server running (requests)",
        )
    for k, name in enumerate(replica_names(data)):
        for column, color, marker in (("server_running", "tab:green", "v"), ("server_waiting", "tab:red", "x")):
            twin.plot(users, data[replica_column(column, name)], marker=marker, markersize=3,
                      linestyle=("--", "-.", ":")[k % 3], linewidth=0.8, color=color, alpha=0.8,
                      label=f"{column.removeprefix('server_')} {name} (requests)")  # fmt: skip
    twin.set_ylabel("requests (time-averaged)")
    twin.set_ylim(bottom=0)
    handles, labels = ax.get_legend_handles_labels()
    twin_handles, twin_labels = twin.get_legend_handles_labels()
    # below the axes: inside, it hid the curve's peak (at the knee, upper left on a log2 axis)
    ax.legend(
        handles + twin_handles,
        labels + twin_labels,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.13),
        ncol=2,
        fontsize="small",
        frameon=False,
    )
    ax.set_title(f"Output throughput vs {axis.quantity} (steady windows)")


def plot_latency(ax: Axes, table: pd.DataFrame, critical: CriticalConcurrency | None = None) -> None:
    """TTFT p50/p95 and TPOT p50 vs target concurrency; log y axis when they span >20x.

    On a log axis every 1-2-5 value is labelled (10, 20, 50, 100, …) and the other integers get
    minor ticks, so a series inside one decade (TPOT at 21-28 ms beside TTFT in seconds) can be
    read off, not only placed between 10 and 100.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    table : pandas.DataFrame
        Per-step table; uses ``target_users``, ``ttft_p50_ms``, ``ttft_p95_ms``, ``tpot_p50_ms``.
    critical : CriticalConcurrency, optional
        Drawn as a vertical line when it has a value.
    """
    axis = load_axis(table)
    data = table.sort_values(axis.column)
    users = data[axis.column].to_numpy(float)
    series: tuple[tuple[str, str, str, str, str], ...] = (
        ("ttft_p50_ms", "TTFT p50", "tab:orange", "-", "o"),
        ("ttft_p95_ms", "TTFT p95", "tab:brown", "--", "v"),
        ("tpot_p50_ms", "TPOT p50", "tab:purple", "-", "s"),
    )
    if axis is RATE:  # a request-rate run: latency also counted from the scheduled send
        series += (("ttft_from_schedule_p50_ms", "TTFT p50 from schedule", "tab:red", ":", "D"),)
    for column, label, color, style, marker in series:
        ax.plot(users, data[column], marker=marker, color=color, linestyle=style, label=label)
    values = data[[s[0] for s in series]].to_numpy(float)
    positive = values[np.isfinite(values) & (values > 0)]
    if len(positive) and positive.max() / positive.min() > 20:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:g}"))
        ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(3.0, 4.0, 6.0, 7.0, 8.0, 9.0)))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, which="minor", axis="y", alpha=0.25)
    else:
        ax.set_ylim(bottom=0)
    _concurrency_axis(ax, users, axis)
    _mark_critical(ax, critical, annotate=False)
    _mark_invalid(ax, data, "ttft_p50_ms")
    ax.set_ylabel("latency (ms)")
    ax.legend(loc="upper left")
    ax.set_title(f"Latency vs {axis.quantity} (successful requests, steady windows)")


PLOT_POINTS = 2000
"""Most points :func:`plot_timeline` draws per series (the figure is ~1,200 pixels wide): a
longer series is drawn as its time-averages over equal bins (:func:`thinned`). A day of 1-s
bins drawn whole took Agg seconds and showed nothing more."""


def thinned(
    series: pd.DataFrame, columns: tuple[str, ...], max_points: int = PLOT_POINTS
) -> tuple[pd.DataFrame, float | None]:
    """A step series (each value holds from its ``t_s`` to the next) as at most ``max_points``
    time-averages over equal bins, for drawing.

    Parameters
    ----------
    series : pandas.DataFrame
        ``t_s`` (Unix s, increasing) and ``columns`` (float; NaN where nothing was measured).
    columns : tuple of str
    max_points : int

    Returns
    -------
    (frame, bin_s) : tuple
        ``series`` itself and None when it has at most ``max_points`` rows; else ``t_s`` (bin
        start) and each column's mean over the measured time in the bin (exact: the step
        function's integral is piecewise linear; NaN for a bin with nothing measured), and the
        bin length, s.

    >>> frame, bin_s = thinned(pd.DataFrame({"t_s": [0.0, 1.0, 2.0, 3.0, 4.0], "v": [1.0, 3.0, np.nan, 5.0, 0.0]}), ("v",), 2)
    >>> bin_s, frame["v"].tolist()
    (2.0, [2.0, 5.0])
    """
    if len(series) <= max_points:
        return series, None
    t = series["t_s"].to_numpy(float)
    bin_s = (t[-1] - t[0]) / max_points
    edges = t[0] + bin_s * np.arange(max_points + 1)
    edges[-1] = t[-1]
    dt = np.diff(t)
    out = {"t_s": edges[:-1]}
    for column in columns:
        values = series[column].to_numpy(float)[:-1]
        measured = np.isfinite(values)
        integral = np.concatenate([[0.0], np.cumsum(np.where(measured, values * dt, 0.0))])
        covered = np.concatenate([[0.0], np.cumsum(np.where(measured, dt, 0.0))])
        num, den = np.diff(np.interp(edges, t, integral)), np.diff(np.interp(edges, t, covered))
        with np.errstate(divide="ignore", invalid="ignore"):
            out[column] = np.where(den > 0, num / den, np.nan)
    return pd.DataFrame(out), float(bin_s)


def clip_series(series: pd.DataFrame, end_s: float) -> pd.DataFrame:
    """A step-function series (``t_s`` breakpoints, each row holding until the next) cut at
    ``end_s``: the rows before it, and a last breakpoint at ``end_s`` repeating the value that
    held there, so a ``steps-post`` line stops at ``end_s`` instead of running on.

    >>> clip_series(pd.DataFrame({"t_s": [0.0, 2.0, 5.0], "running": [1.0, 2.0, np.nan]}), 3.0)["running"].tolist()
    [1.0, 2.0, 2.0]
    """
    before = series[series["t_s"] < end_s]
    if before.empty:
        return before
    last = before.iloc[[-1]].assign(t_s=end_s)
    return pd.concat([before, last], ignore_index=True)


def plot_timeline(
    ax: Axes,
    *,
    steps: pd.DataFrame,
    warmup_s: float,
    inflight: pd.DataFrame,
    server: pd.DataFrame,
    t0_s: float,
    invalid_steps: frozenset[int] = frozenset(),
    outages: pd.DataFrame | None = None,
    end_s: float | None = None,
    shaded: str = "ladder steps",
    replicas: dict[str, pd.DataFrame] | None = None,
) -> None:
    """Client in-flight and server running/waiting over the run, ladder steps shaded (and each
    replica's running and waiting, thin, beside the aggregate's).

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
        :func:`llm_locust.analysis.perrequest.metrics.inflight_binned` (``t_s`` bin start, ``inflight`` bin average).
    server : pandas.DataFrame
        :func:`llm_locust.analysis.server.prometheus.metrics_series` (``t_s``, ``running``, ``waiting``); may be empty.
    t0_s : float
        Wall clock (Unix s) shown as 0 on the x axis.
    invalid_steps : frozenset of int, optional
        ``step`` indices left out of the verdict (the load client limited them, the run's stop cut
        them, the server was unreachable): shaded red and labelled "invalid"; the target
        users of every step are then drawn too (dashed), against the achieved in-flight.
    outages : pandas.DataFrame, optional
        :func:`llm_locust.analysis.perrequest.faults.outage_spells` (``start_s``, ``end_s``, ``requests``,
        ``recovered_s``; Unix s): each drawn as a dark cross-hatched band from its first
        connection failure to the server's first answer (its last failure when it never
        answered), labelled "server unreachable" with its failures.
    replicas : dict of str to pandas.DataFrame, optional
        With several replicas scraped: each one's own normalised series (``t_s``, ``running``,
        ``waiting``), by name (:mod:`llm_locust.analysis.server.replicas`).
    end_s : float, optional
        The run's end (Unix s): the server's series stops there. Its last sample holds for up to
        a scrape interval (:func:`llm_locust.analysis.server.series.breakpoints_from_samples`), which would
        draw the server busy for seconds after the run had ended; samples after the end (a scrape
        during the master's stop) are not the run's. None: drawn as it is.
    shaded : str, default "ladder steps"
        What the shaded spans are, for the title ("the baseline" for a baseline run).
    """
    label_transform = ax.get_xaxis_transform()
    if end_s is not None and not server.empty:
        server = clip_series(server, end_s)
    rate = "target_rate_rps" in steps.columns and steps["target_rate_rps"].notna().any()
    for k, step in enumerate(steps.itertuples(index=False)):
        start, end = step.start_s - t0_s, step.end_s - t0_s
        ax.axvspan(start, end, color=STEP_SHADES[k % 2], linewidth=0, zorder=0)
        warm_end = min(start + warmup_s, end)
        if warm_end > start:
            ax.axvspan(
                start,
                warm_end,
                facecolor="none",
                edgecolor="#9aa5b1",
                hatch="///",
                linewidth=0,
                zorder=0,
                label="warm-up (excluded)" if k == 0 else None,
            )
        invalid = int(step.step) in invalid_steps
        if invalid:
            ax.axvspan(
                start,
                end,
                facecolor="tab:red",
                alpha=0.12,
                linewidth=0,
                zorder=0,
                label="invalid step (client-limited, cut, or server down)"
                if int(step.step) == min(invalid_steps)
                else None,
            )
        if not math.isnan(step.target_users) and invalid_steps and not rate:
            ax.hlines(
                step.target_users,
                start,
                end,
                colors="black",
                linestyles="--",
                linewidth=1,
                label="target users" if k == 0 else "",  # hlines' default: no legend entry
            )
        if not math.isnan(step.target_users):
            ax.text(
                (start + end) / 2,
                0.98,
                (f"rate={fmt_users(step.target_rate_rps)}" if rate else f"c={fmt_users(step.target_users)}")
                + ("\ninvalid" if invalid else ""),
                color="tab:red" if invalid else "black",
                transform=label_transform,
                ha="center",
                va="top",
                fontsize="small",
            )
    for k, spell in enumerate((outages if outages is not None else pd.DataFrame()).itertuples(index=False)):
        stop = spell.recovered_s if np.isfinite(spell.recovered_s) else spell.end_s
        start, stop = spell.start_s - t0_s, max(stop, spell.start_s) - t0_s
        ax.axvspan(start, max(stop, start + 0.2), facecolor="#2b2b2b", alpha=0.25, edgecolor="black", hatch="xx",
                   linewidth=0.8, zorder=1, label="server unreachable (outage)" if k == 0 else None)  # fmt: skip
        ax.text(
            (start + stop) / 2,
            0.86,
            f"server down\n{stop - start:.1f} s, {int(spell.requests)} conn. failures",
            transform=label_transform,
            ha="center",
            va="top",
            fontsize="small",
            color="black",
            bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "black", "linewidth": 0.5, "pad": 2},
            zorder=5,
        )
    inflight, inflight_bin_s = thinned(inflight, ("inflight",))
    if not inflight.empty:
        bin_s = inflight_bin_s or (float(np.diff(inflight["t_s"].to_numpy()[:2])[0]) if len(inflight) > 1 else 1.0)
        ax.plot(
            inflight["t_s"] - t0_s,
            inflight["inflight"],
            drawstyle="steps-post",
            color="tab:gray",
            linewidth=1.2,
            label=f"client in-flight ({bin_s:.3g} s average)",
        )
    server, server_bin_s = thinned(server, ("running", "waiting"))
    if not server.empty:
        average = f" ({server_bin_s:.3g} s average)" if server_bin_s else ""
        ax.plot(
            server["t_s"] - t0_s,
            server["running"],
            drawstyle="steps-post",
            color="tab:green",
            linewidth=1.5,
            label="server running" + average,
        )
        ax.plot(
            server["t_s"] - t0_s,
            server["waiting"],
            drawstyle="steps-post",
            color="tab:red",
            linewidth=1.5,
            label="server waiting" + average,
        )
    styles = ("--", ":", "-.", (0, (5, 1, 1, 1)))
    for k, (name, own) in enumerate(sorted((replicas or {}).items())):
        own = clip_series(own, end_s) if end_s is not None and not own.empty else own
        own, _ = thinned(own, ("running", "waiting"))
        for column, color in (("running", "tab:green"), ("waiting", "tab:red")):
            ax.plot(own["t_s"] - t0_s, own[column], drawstyle="steps-post", color=color, linewidth=0.9,
                    linestyle=styles[k % len(styles)], alpha=0.8, label=f"{column} {name}")  # fmt: skip
    targets = steps["target_users"] if invalid_steps and len(steps) else pd.Series(dtype=float)
    top = max(
        [1.0, *targets.dropna().tolist()]
        + [
            float(np.nanmax(frame[c]))
            for frame, c in ((inflight, "inflight"), (server, "running"), (server, "waiting"))
            if not frame.empty and frame[c].notna().any()
        ]
    )
    ax.set_ylim(0, top * 1.15)
    ax.set_xlabel("time since run start (s)")
    ax.set_ylabel("requests")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.set_title("Requests in flight over the run" + (f" (shaded: {shaded})" if len(steps) else ""))


CLIENT_KIND_COLORS: dict[str, str] = {
    "http_429": "#d62728",
    "http_5xx": "#ff7f0e",
    "http_4xx": "#8c564b",
    "connection_error": "#9467bd",
    "ttft_timeout": "#1f77b4",
    "total_timeout": "#17becf",
    "stall_timeout": "#2ca02c",
    "connect_timeout": "#bcbd22",
    "stream_error": "#e377c2",
    "truncated": "#7f7f7f",
    "bad_response": "#393b79",
}
"""Colour of each client error kind on the errors plot (server kinds are hatched greys)."""


def plot_errors(ax: Axes, table: pd.DataFrame, *, server_log: bool = True) -> None:
    """Failures by kind per step: client failures (left bar of each step, stacked by
    ``error_kind``) against the server log's error lines (right bar, stacked by kind).

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    table : pandas.DataFrame
        Step table with ``target_users``, ``error_kinds`` and, when the verdict ran,
        ``server_error_kinds`` and ``failed_share`` (``"kind:n ..."`` strings, 0-1).
    server_log : bool, default True
        False when the run has no server log: the plot says so instead of showing empty bars.
    """
    from llm_locust.analysis.verdict.failures import parse_kinds

    axis = load_axis(table)
    data = table.sort_values(axis.column).reset_index(drop=True)
    x = np.arange(len(data))
    client = [parse_kinds(k) for k in data["error_kinds"]]
    server = [parse_kinds(k) for k in data.get("server_error_kinds", pd.Series([""] * len(data)))]
    width = 0.38
    greys = ["#555555", "#888888", "#aaaaaa", "#cccccc", "#333333"]
    for side, counts, offset in (("client", client, -width / 2), ("server log", server, width / 2)):
        kinds = sorted({k for c in counts for k in c})
        bottom = np.zeros(len(data))
        for j, kind in enumerate(kinds):
            heights = np.array([c.get(kind, 0) for c in counts], float)
            color = CLIENT_KIND_COLORS.get(kind, "#444444") if side == "client" else greys[j % len(greys)]
            ax.bar(
                x + offset,
                heights,
                width,
                bottom=bottom,
                color=color,
                hatch=None if side == "client" else "//",
                edgecolor="white",
                label=f"{side}: {kind}",
            )
            bottom += heights
    if "failed_share" in data.columns:
        for k, share in enumerate(data["failed_share"]):
            if np.isfinite(share) and share > 0:
                ax.annotate(
                    f"{share:.0%}\nfailed",
                    xy=(x[k] - width / 2, sum(client[k].values())),
                    xytext=(0, 2),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize="x-small",
                )
    ax.set_xticks(x, [fmt_users(u) for u in data[axis.column]])
    ax.set_xlabel(
        ("offered rate (req/s)" if axis is RATE else "target concurrency (users)")
        + "; left bar: client failures, right bar: server log error lines"
    )
    ax.set_ylabel("requests / log lines in the steady window")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts: no 0.2 requests
    if not any(client) and not any(server):
        ax.text(
            0.5,
            0.5,
            "no failed request and no server error line in any step",
            transform=ax.transAxes,
            ha="center",
            va="center",
        )
        ax.set_ylim(0, 1)
    else:
        tallest = max([sum(c.values()) for c in client] + [sum(c.values()) for c in server])
        ax.set_ylim(0, tallest * 1.2)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    if not server_log:
        ax.text(
            0.01,
            0.97,
            "no server log captured (--server-log): server bars absent",
            transform=ax.transAxes,
            ha="left",
            va="top",
            fontsize="small",
            color="dimgray",
        )
    ax.set_title("Failures by kind per step: client vs server log")
