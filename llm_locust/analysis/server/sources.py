"""Which server-side source a run's analysis uses: scraped metrics, the server log, or both.

:func:`gather` reads every source a run directory has into one :class:`ServerEvidence`;
:func:`choose_step_means` takes the per-step means of each source
(:func:`llm_locust.analysis.perstep.table.step_server_means`) and picks, per step and per column, the value the analysis uses under a
:class:`ServerSource` policy - and says which source gave it.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pandas as pd

from llm_locust.analysis.server.batches import empty_batches
from llm_locust.analysis.server.config import ServerConfig, merge_configs
from llm_locust.analysis.server.families import ServerFamily, parse_family
from llm_locust.analysis.server.files import empty_scrapes
from llm_locust.analysis.server.freshness import ScrapeFreshness
from llm_locust.analysis.server.prometheus import MAPPINGS, detect_family, info_config, metrics_config, metrics_series
from llm_locust.analysis.server.replicas import (
    Duplicate,
    Replica,
    aggregate_config,
    find_duplicates,
    replicas_of,
    run_source_names,
)
from llm_locust.analysis.server.series import covered_s, empty_series
from llm_locust.analysis.server.serverlog import LogClock, ServerLogResult, TimeSource, parse_server_log
from llm_locust.analysis.server.serverlog.batchlines import batch_events
from llm_locust.analysis.server.serverlog.clock import parse_tz, tz_from_offset
from llm_locust.analysis.server.serverlog.errors import count_by_kind, scraper_lines
from llm_locust.analysis.server.userformat import UserFormat, load_user_format

if TYPE_CHECKING:  # a type only: llm_locust.analysis.rundir.reader reads server files through this package
    from llm_locust.analysis.rundir.reader import Run


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
        Scraped URLs (duplicates included).
    source_names : dict
        ``{url: name}`` of the scraped sources (:func:`llm_locust.analysis.server.replicas.run_source_names`).
    duplicates : tuple of Duplicate
        Sources that are the same server as another (:func:`llm_locust.analysis.server.replicas.find_duplicates`):
        left out of ``metrics`` and ``replicas``.
    replicas : tuple of Replica
        With two or more kept sources carrying running or waiting: each one's own series and
        configuration (:func:`llm_locust.analysis.server.replicas.replicas_of`); ``metrics`` is their
        aggregate (running and waiting summed, KV usage averaged) and ``config``'s ceilings
        their sum.
    log : ServerLogResult or None
        None without a server log.
    config : ServerConfig
        Merged: startup log, then ``/props`` / ``/info``, then metrics info samples.
    user_format : UserFormat or None
    notes : tuple of str
    batches : pandas.DataFrame
        One row per batch the log reports (:mod:`llm_locust.analysis.server.batches`; empty when the
        server logs no batches); :func:`llm_locust.analysis.server.batches.batch_stats` summarises it per
        step.
    scrapes : pandas.DataFrame
        ``server_scrapes.csv``: every scrape attempt (``t_s``, ``source``, ``ok``,
        ``error_kind``); empty for runs without it.
    """

    metrics: pd.DataFrame = field(default_factory=empty_series)
    metrics_family: ServerFamily | None = None
    metrics_sources: tuple[str, ...] = ()
    source_names: dict[str, str] = field(default_factory=dict)
    duplicates: tuple[Duplicate, ...] = ()
    replicas: tuple[Replica, ...] = ()
    log: ServerLogResult | None = None
    config: ServerConfig = field(default_factory=ServerConfig)
    user_format: UserFormat | None = None
    notes: tuple[str, ...] = ()
    batches: pd.DataFrame = field(default_factory=empty_batches)
    scrapes: pd.DataFrame = field(default_factory=empty_scrapes)

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
        (:class:`llm_locust.analysis.server.userformat.UserFormatError`).
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
        metrics_family = (
            family if family is not None and (family is not ServerFamily.GENERIC or mapping is not None) else None
        )
        metrics_family = metrics_family or detect_family(samples, mapping)
    freshness = ScrapeFreshness.from_run(run.meta, files.scrapes)
    urls = sorted(samples["source"].astype(str).unique()) if len(samples) else []
    family_mapping = (
        (mapping if metrics_family is ServerFamily.GENERIC else MAPPINGS.get(metrics_family))
        if metrics_family
        else None
    )
    duplicates = tuple(find_duplicates(samples, run.meta, family_mapping))
    urls = sorted({*urls, *(d.url for d in duplicates)})  # a duplicate scraped no further has no samples
    names = run_source_names(run.meta, urls)
    if duplicates:
        samples = samples[~samples["source"].astype(str).isin({d.url for d in duplicates})]
    metrics = (
        metrics_series(samples, metrics_family, user=mapping, freshness=freshness)
        if metrics_family is not None
        else empty_series()
    )
    replicas: tuple[Replica, ...] = ()
    if family_mapping is not None:
        replicas = replicas_of(samples, family_mapping, names=names, info=files.info, freshness=freshness,
                               info_reader=info_config)  # fmt: skip
    log = None
    batches = empty_batches()
    if files.log is not None and files.log.n_lines:
        log_family = family if family not in (None, ServerFamily.TRITON) else None
        clock = _clock(run, options, user)
        log = parse_server_log(files.log, clock=clock, family=log_family, user_format=user)
        batches = batch_events(files.log, clock=clock, family=log.family, user_format=user)
    notes = []
    if log is not None and len(log.errors):
        scraped = {*map(str, run.meta.get("metrics_urls") or ()), *files.scrapes["source"].astype(str)}
        scraped |= set(samples["source"].astype(str).unique()) if len(samples) else set()
        own = scraper_lines(log.errors, sorted(scraped))
        if own.any():
            mine = log.errors[own]
            kinds = ", ".join(f"{k} {n}" for k, n in count_by_kind(mine).items())
            paths = ", ".join(sorted(mine["path"].unique()))
            notes.append(
                f"{int(own.sum())} server log error line(s) are the scraper's own requests ({paths}: {kinds}), "
                "left out of the users' failures"
            )
            log = dataclasses.replace(log, errors=log.errors[~own].reset_index(drop=True))
    config = merge_configs(
        aggregate_config(replicas),  # a gateway's /props is one replica's, the log one replica's
        log.config if log is not None else None,
        info_config(files.info),
        metrics_config(samples, metrics_family, user=mapping) if metrics_family else None,
    )
    if not samples.empty and metrics_family is None:
        notes.append(
            "server_metrics.csv holds no metric name of a known engine (give "
            "--server-family or a format file with a [metrics] table)"
        )
    for dup in duplicates:
        notes.append(
            f"{names.get(dup.url, dup.url)} ({dup.url}) is the same server as {names.get(dup.same_as, dup.same_as)} "
            f"({dup.same_as}) (by {dup.by}): counted once, from {names.get(dup.same_as, dup.same_as)}"
        )
    return ServerEvidence(
        metrics=metrics,
        metrics_family=metrics_family,
        metrics_sources=tuple(urls),
        source_names=names,
        duplicates=duplicates,
        replicas=replicas,
        log=log,
        config=config,
        user_format=user,
        notes=tuple(notes),
        batches=batches,
        scrapes=files.scrapes,
    )


def step_server_seconds(
    windows: pd.DataFrame, metrics: pd.DataFrame, log: pd.DataFrame, metrics_means: pd.DataFrame, policy: ServerSource
) -> pd.Series:
    """Per step, the seconds of its steady window with server running/waiting data, in the
    source :func:`choose_step_means` took them from.

    Parameters
    ----------
    windows : pandas.DataFrame
        ``window_start_s``, ``window_end_s`` (Unix s) per step.
    metrics, log : pandas.DataFrame
        The normalised series of each source.
    metrics_means : pandas.DataFrame
        :func:`llm_locust.analysis.perstep.table.step_server_means` of ``metrics`` (same rows as ``windows``).
    policy : ServerSource
        Already resolved (not ``AUTO``).

    Returns
    -------
    pandas.Series
        float64, s, named ``server_data_s``; 0 where no source has data in the window.
    """
    out = []
    for i, window in enumerate(windows.itertuples(index=False)):
        from_metrics = policy is ServerSource.METRICS or (
            policy is not ServerSource.LOG
            and bool(metrics_means[["server_running", "server_waiting"]].iloc[i].notna().any())
        )
        series = metrics if from_metrics else log
        if series.empty:
            out.append(0.0)
            continue
        has_data = series["running"].notna() | series["waiting"].notna()
        out.append(covered_s(series["t_s"], has_data, float(window.window_start_s), float(window.window_end_s)))
    return pd.Series(out, index=windows.index, dtype="float64", name="server_data_s")


def choose_step_means(metrics: pd.DataFrame, log: pd.DataFrame, policy: ServerSource) -> tuple[pd.DataFrame, list[str]]:
    """Per step, the server means the analysis uses, and which source gave them.

    Parameters
    ----------
    metrics, log : pandas.DataFrame
        :func:`llm_locust.analysis.perstep.table.step_server_means` of each source (same rows).
    policy : ServerSource
        Already resolved (not ``AUTO``).

    Returns
    -------
    (means, sources)
        ``means`` like the inputs; ``sources[i]`` is ``"metrics"``, ``"log"``,
        ``"metrics+log"`` (columns from both) or ``""`` (no data) for step ``i``.
    """
    if policy is ServerSource.METRICS:
        chosen, from_log = metrics.copy(), pd.DataFrame(False, index=metrics.index, columns=metrics.columns)
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
        labels.append("metrics+log" if logs and mets else "log" if logs else "metrics" if mets else "")
    return chosen, labels


def describe_sources(evidence: ServerEvidence, policy: ServerSource, labels: list[str]) -> str:
    """One evidence line: which source the server columns came from, and how it was read."""
    resolved = evidence.resolve(policy)
    parts = []
    if resolved in (ServerSource.METRICS, ServerSource.BOTH) and evidence.has(ServerSource.METRICS):
        family = evidence.metrics_family.value if evidence.metrics_family else "?"
        parts.append(f"/metrics ({family} mapping, {scraped_text(evidence)})")
    log = evidence.log  # not None when it has data
    if resolved in (ServerSource.LOG, ServerSource.BOTH) and evidence.has(ServerSource.LOG) and log is not None:
        family = log.family.value if log.family else "?"
        parts.append(f"server log ({family} parser, {log.data_lines} data lines placed by {log.time_source})")
    counts = {name: labels.count(name) for name in ("metrics", "log", "metrics+log", "")}
    per_step = ", ".join(f"{name or 'none'} in {n}" for name, n in counts.items() if n)
    absent = absent_endpoints_text(evidence.scrapes)
    tally = "" if absent and not evidence.scrapes["ok"].astype(bool).any() else scrape_counts_text(evidence.scrapes)
    scrapes = "; ".join(t for t in (tally, absent, refused_scrapes_text(evidence.scrapes)) if t)
    if not parts and log is not None and len(evidence.batches):
        family = log.family.value if log.family else "?"
        return (
            f"server data: the server log's batch lines only ({family} parser, {len(evidence.batches)} batch lines "
            f"placed by {log.time_source}): running and waiting per step are the batches' mean size and queue"
        ) + (f"; {scrapes}" if scrapes else "")
    if not parts:
        return f"server data: none (policy {policy.value}): condition (b) skipped, the verdict rests on client data" + (
            f"; {scrapes}" if scrapes else ""
        )
    order = {
        ServerSource.BOTH: "metrics first, the log where metrics have no value",
        ServerSource.METRICS: "metrics only",
        ServerSource.LOG: "log only",
    }[resolved]
    return f"server data ({order}): {' + '.join(parts)}; steps: {per_step}" + (f"; {scrapes}" if scrapes else "")


def scraped_text(evidence: ServerEvidence) -> str:
    """Which endpoints the metrics came from: ``"1 endpoint: 127.0.0.1:8000"``, ``"2 replicas
    summed: a, b"``, with ``"; b is the same server as a, counted once"`` for each duplicate."""
    names = evidence.source_names
    dup_urls = {d.url for d in evidence.duplicates}
    kept = [names.get(u, u) for u in evidence.metrics_sources if u not in dup_urls]
    if evidence.replicas:
        text = f"{len(evidence.replicas)} replicas summed: " + ", ".join(r.name for r in evidence.replicas)
    else:
        text = f"{len(kept)} endpoint{'s' if len(kept) != 1 else ''}: " + ", ".join(kept)
    for dup in evidence.duplicates:
        text += (
            f"; {names.get(dup.url, dup.url)} is the same server as {names.get(dup.same_as, dup.same_as)}, counted once"
        )
    return text


def scrape_counts_text(scrapes: pd.DataFrame) -> str:
    """``"scrapes: 58 ok, 3 failed (timeout 2, too_large 1)"`` ("" without scrape records).

    >>> scrape_counts_text(pd.DataFrame({"ok": [True, False, True],
    ...                                  "error_kind": ["", "timeout", ""]}))
    'scrapes: 2 ok, 1 failed (timeout 1)'
    """
    if scrapes is None or scrapes.empty:
        return ""
    ok = scrapes["ok"].astype(bool)
    text = f"scrapes: {int(ok.sum())} ok"
    failed = scrapes.loc[~ok, "error_kind"].astype(str).replace("", "unknown")
    if len(failed):
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(failed.value_counts().items()))
        text += f", {len(failed)} failed ({kinds})"
    return text


ABSENT_STATUSES: frozenset[str] = frozenset({"404", "405", "410", "501"})
"""HTTP statuses of a first scrape that mean "no metrics endpoint here": the master scrapes such an
endpoint no further (``llm_locust/master/scraper.py`` ``ABSENT_STATUSES``, the same set)."""


def absent_endpoints_text(scrapes: pd.DataFrame) -> str:
    """The endpoints that have no metrics (their only scrape answered one of
    :data:`ABSENT_STATUSES`), in words ("" when none).

    >>> absent_endpoints_text(pd.DataFrame({"source": ["http://s/metrics"], "ok": [False],
    ...                                     "error_kind": ["http_error"], "status_code": ["404"]}))
    'http://s/metrics: no metrics endpoint (HTTP 404 on the first scrape; not scraped again)'
    """
    if scrapes is None or scrapes.empty or "status_code" not in scrapes.columns:
        return ""
    codes = scrapes["status_code"].astype(str).str.strip().str.removesuffix(".0")
    texts = []
    for source, group in scrapes.assign(code=codes).groupby("source", sort=True):
        if len(group) == 1 and not bool(group["ok"].iloc[0]) and group["code"].iloc[0] in ABSENT_STATUSES:
            texts.append(
                f"{source}: no metrics endpoint (HTTP {group['code'].iloc[0]} on the first scrape; not scraped again)"
            )
    return "; ".join(texts)


REFUSAL_STATUSES: frozenset[str] = frozenset({"429", "503"})
"""HTTP statuses of a scrape that was refused (a limit, not a broken endpoint)."""


def refused_scrapes_text(scrapes: pd.DataFrame) -> str:
    """Per endpoint that refused scrapes (HTTP 429/503, :data:`REFUSAL_STATUSES`), what that
    means for the server series ("" when none did).

    A metrics URL behind the same gateway as the load (``--host`` at nginx, ``/metrics``
    proxied to the server) is subject to its limits: each scrape takes one of its connection
    slots, and while the users hold them all it is refused like a user. The series then have
    no data where it was refused (:mod:`llm_locust.analysis.server.freshness`), which must be said, not
    left as blank steps.

    >>> scrapes = pd.DataFrame({"source": ["http://gw/metrics"] * 3, "ok": [True, False, False],
    ...                         "error_kind": ["", "http_error", "http_error"],
    ...                         "status_code": ["200", "503", "503"]})
    >>> refused_scrapes_text(scrapes)[:62]
    'http://gw/metrics refused 2 of 3 scrapes (HTTP 503 2): the end'
    """
    if scrapes is None or scrapes.empty or "status_code" not in scrapes.columns:
        return ""
    codes = scrapes["status_code"].astype(str).str.strip().str.removesuffix(".0")
    texts = []
    for source, group in scrapes.assign(code=codes).groupby("source", sort=True):
        refused = group[~group["ok"].astype(bool) & group["code"].isin(REFUSAL_STATUSES)]
        if refused.empty:
            continue
        by_code = ", ".join(f"HTTP {code} {n}" for code, n in sorted(refused["code"].value_counts().items()))
        texts.append(
            f"{source} refused {len(refused)} of {len(group)} scrapes ({by_code}): the endpoint is behind a "
            "limit that refuses the users too (a gateway's connection or rate limit, where each scrape takes "
            "one of its slots); the server series have no data where it refused (not zero) - scrape the "
            "server itself (--metrics-url http://<server>/metrics)"
        )
    return "; ".join(texts)
