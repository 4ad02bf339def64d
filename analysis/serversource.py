"""Which server-side source a run's analysis uses: scraped metrics, the server log, or both.

:func:`gather` reads every source a run directory has into one :class:`ServerEvidence`;
:func:`step_server_means` averages a series over the steps' steady windows, and
:func:`choose_step_means` picks, per step and per column, the value the analysis uses under a
:class:`ServerSource` policy - and says which source gave it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.families import ServerFamily, parse_family
from analysis.prometheus import detect_family, info_config, metrics_config, metrics_series
from analysis.rundir import Run
from analysis.series import empty_series, time_average
from analysis.serverconfig import ServerConfig, merge_configs
from analysis.serverlog import LogClock, LogText, ServerLogResult, TimeSource, parse_server_log
from analysis.serverlog.clock import parse_tz, tz_from_offset
from analysis.userformat import UserFormat, load_user_format


class ServerSource(str, enum.Enum):
    """Source policy. ``METRICS`` or ``LOG``: that source only. ``BOTH``: metrics first, the
    log where metrics have no value for a step. ``AUTO``: ``BOTH`` when both exist, else the one
    there is."""

    AUTO = "auto"
    METRICS = "metrics"
    LOG = "log"
    BOTH = "both"


@dataclass(frozen=True, kw_only=True)
class ServerOptions:
    """How to read the server side of a run.

    Attributes
    ----------
    source : ServerSource
    family : str or None
        Force a family (``vllm``, ``sglang``, ``tgi``, ``llamacpp``, ``triton``, ``generic``).
    tz : str or None
        Time zone of log stamps without one; default: the run master's (``run.json``
        ``utc_offset_s``), else UTC.
    time_source : TimeSource
    """

    source: ServerSource = ServerSource.AUTO
    family: str | None = None
    tz: str | None = None
    time_source: TimeSource = TimeSource.AUTO


@dataclass(frozen=True, kw_only=True)
class ServerEvidence:
    """Everything the run directory says about the server.

    Attributes
    ----------
    metrics : pandas.DataFrame
        Normalised series from ``server_metrics.csv`` (empty without).
    metrics_family : ServerFamily or None
    metrics_sources : tuple of str
        Scraped URLs.
    log : ServerLogResult or None
        None without a server log.
    config : ServerConfig
        Merged: startup log, then ``/props`` / ``/info``, then metrics info samples.
    user_format : UserFormat or None
    notes : tuple of str
    """

    metrics: pd.DataFrame = field(default_factory=empty_series)
    metrics_family: ServerFamily | None = None
    metrics_sources: tuple[str, ...] = ()
    log: ServerLogResult | None = None
    config: ServerConfig = field(default_factory=ServerConfig)
    user_format: UserFormat | None = None
    notes: tuple[str, ...] = ()

    @property
    def log_series(self) -> pd.DataFrame:
        """The log's normalised series (empty without a parsed log)."""
        return self.log.series if self.log is not None else empty_series()

    def has(self, source: ServerSource) -> bool:
        """True when ``source`` has running or waiting data."""
        frame = self.metrics if source is ServerSource.METRICS else self.log_series
        return bool(len(frame)) and bool(frame[["running", "waiting"]].notna().to_numpy().any())

    def resolve(self, policy: ServerSource) -> ServerSource:
        """The policy in effect: ``AUTO`` becomes ``BOTH``, ``METRICS`` or ``LOG`` by what
        exists (``BOTH`` when neither: nothing to use either way)."""
        if policy is not ServerSource.AUTO:
            return policy
        metrics, log = self.has(ServerSource.METRICS), self.has(ServerSource.LOG)
        if metrics and not log:
            return ServerSource.METRICS
        if log and not metrics:
            return ServerSource.LOG
        return ServerSource.BOTH

    def series(self, policy: ServerSource) -> pd.DataFrame:
        """One series to draw: metrics unless the policy is ``LOG`` or metrics have no data."""
        policy = self.resolve(policy)
        if policy is ServerSource.LOG or not self.has(ServerSource.METRICS):
            return self.log_series if policy is not ServerSource.METRICS else self.metrics
        return self.metrics


def _clock(run: Run, options: ServerOptions, user: UserFormat | None) -> LogClock:
    tz = options.tz
    if tz is None and user is not None and user.timezone:
        tz = user.timezone
    if tz is None and run.meta.get("utc_offset_s") is not None:
        tz = tz_from_offset(float(run.meta["utc_offset_s"]))
    tz = tz or "UTC"
    parse_tz(tz)  # raises ValueError with the known forms
    return LogClock(reference_s=run.started_at_s, tz=tz, time_source=options.time_source)


def gather(run: Run, options: ServerOptions | None = None) -> ServerEvidence:
    """Read the server side of ``run``: metrics series, log, merged configuration.

    Raises
    ------
    ValueError
        An unknown family or time zone; a user format file that cannot be used
        (:class:`analysis.userformat.UserFormatError`).
    """
    options = options or ServerOptions()
    files = run.server_files
    user = None
    if files.format_text is not None:
        user = load_user_format(files.format_text, source=str(files.format_path))
    mapping = user.family_mapping() if user is not None else None
    family = parse_family(options.family)
    samples = run.server_samples
    metrics_family = None
    if not samples.empty:
        metrics_family = family if family is not None and (
            family is not ServerFamily.GENERIC or mapping is not None) else None
        metrics_family = metrics_family or detect_family(samples, mapping)
    metrics = (metrics_series(samples, metrics_family, user=mapping)
               if metrics_family is not None else empty_series())
    log = None
    if files.log_text:
        log_family = family if family not in (None, ServerFamily.TRITON) else None
        log = parse_server_log(
            LogText.from_text(files.log_text, arrival_s=files.arrival_s,
                              name=files.log_path.name if files.log_path else "server.log"),
            clock=_clock(run, options, user), family=log_family, user_format=user)
    config = merge_configs(
        log.config if log is not None else None, info_config(files.info),
        metrics_config(samples, metrics_family, user=mapping) if metrics_family else None)
    notes = []
    if not samples.empty and metrics_family is None:
        notes.append("server_metrics.csv holds no metric name of a known engine (give "
                     "--server-family or a format file with a [metrics] table)")
    sources = tuple(sorted(samples["source"].astype(str).unique())) if len(samples) else ()
    return ServerEvidence(metrics=metrics, metrics_family=metrics_family, metrics_sources=sources,
                          log=log, config=config, user_format=user, notes=tuple(notes))


MEAN_COLUMNS: dict[str, str] = {"server_running": "running", "server_waiting": "waiting",
                                "kv_usage_ratio": "kv_usage_ratio", "server_gen_tps": "gen_tps"}
"""Step-table column -> series column."""


def step_server_means(windows: pd.DataFrame, series: pd.DataFrame) -> pd.DataFrame:
    """Time-average of ``series`` over each step's steady window.

    Returns
    -------
    pandas.DataFrame
        One row per window, columns of :data:`MEAN_COLUMNS` (NaN where no data covers it).
    """
    rows = []
    for window in windows.itertuples(index=False):
        start, end = float(window.window_start_s), float(window.window_end_s)
        rows.append({out: (time_average(series["t_s"], series[col], start, end)
                           if len(series) else np.nan) for out, col in MEAN_COLUMNS.items()})
    return pd.DataFrame(rows, columns=list(MEAN_COLUMNS), dtype="float64")


def choose_step_means(metrics: pd.DataFrame, log: pd.DataFrame,
                      policy: ServerSource) -> tuple[pd.DataFrame, list[str]]:
    """Per step, the server means the analysis uses, and which source gave them.

    Parameters
    ----------
    metrics, log : pandas.DataFrame
        :func:`step_server_means` of each source (same rows).
    policy : ServerSource
        Already resolved (not ``AUTO``).

    Returns
    -------
    (means, sources)
        ``means`` like the inputs; ``sources[i]`` is ``"metrics"``, ``"log"``,
        ``"metrics+log"`` (columns from both) or ``""`` (no data) for step ``i``.
    """
    if policy is ServerSource.METRICS:
        chosen, from_log = metrics.copy(), pd.DataFrame(False, index=metrics.index,
                                                        columns=metrics.columns)
    elif policy is ServerSource.LOG:
        chosen, from_log = log.copy(), log.notna()
    else:
        from_log = metrics.isna() & log.notna()
        chosen = metrics.where(metrics.notna(), log)
    labels = []
    for i in range(len(chosen)):
        have = chosen.iloc[i].notna()
        logs = bool((from_log.iloc[i] & have).any())
        mets = bool((~from_log.iloc[i] & have).any())
        labels.append("metrics+log" if logs and mets else "log" if logs else
                      "metrics" if mets else "")
    return chosen, labels


def describe_sources(evidence: ServerEvidence, policy: ServerSource, labels: list[str]) -> str:
    """One evidence line: which source the server columns came from, and how it was read."""
    resolved = evidence.resolve(policy)
    parts = []
    if resolved in (ServerSource.METRICS, ServerSource.BOTH) and evidence.has(ServerSource.METRICS):
        family = evidence.metrics_family.value if evidence.metrics_family else "?"
        parts.append(f"/metrics ({family} mapping, {len(evidence.metrics_sources)} endpoint(s))")
    if resolved in (ServerSource.LOG, ServerSource.BOTH) and evidence.has(ServerSource.LOG):
        log = evidence.log
        parts.append(f"server log ({log.family.value} parser, {log.data_lines} data lines placed "
                     f"by {log.time_source})")
    counts = {name: labels.count(name) for name in ("metrics", "log", "metrics+log", "")}
    per_step = ", ".join(f"{name or 'none'} in {n}" for name, n in counts.items() if n)
    if not parts:
        return (f"server data: none (policy {policy.value}): condition (b) skipped, the verdict "
                "rests on client data")
    order = {ServerSource.BOTH: "metrics first, the log where metrics have no value",
             ServerSource.METRICS: "metrics only", ServerSource.LOG: "log only"}[resolved]
    return f"server data ({order}): {' + '.join(parts)}; steps: {per_step}"
