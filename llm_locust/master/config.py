"""The master's settings for one run, read once from Locust's parsed options.

Locust hands the master an ``argparse.Namespace`` whose fields the web UI may still change
before a test starts (``--api-key``, the host). :func:`MasterConfig.from_options` reads every
field the master's capture uses, once, at ``test_start``, into a frozen value that the recorder,
the server capture and the scrapers take; nothing deeper reads ``parsed_options``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llm_locust.analysis.schema import source_names
from llm_locust.client.config import client_workload_meta
from llm_locust.master.scraper import DEFAULT_MAX_BYTES, default_timeout_s
from llm_locust.options import split_named_url, validate_options


def parse_labels(pairs: list[str]) -> dict[str, str]:
    """``["quant=awq", "gpu=a10"]`` → ``{"quant": "awq", "gpu": "a10"}``.

    Raises
    ------
    ValueError
        A pair without ``=``.
    """
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--label must be KEY=VALUE, got {pair!r}")
        labels[key] = value
    return labels


@dataclass(frozen=True, kw_only=True)
class MasterConfig:
    """What the master needs of llm-locust's options (see :mod:`llm_locust.options` for each).

    Attributes
    ----------
    run_dir : str
        ``--run-dir`` ("" when none).
    model, protocol, prompts_file : str
        ``--model`` ("" = ask the server), ``--protocol``, ``--prompts-file``.
    max_tokens : int
    ignore_eos : bool
    temperature : float
    api_key : str
        ``--api-key``; left out of ``repr`` (never logged).
    metrics_url : str
        ``--metrics-url`` ("" = ``HOST/metrics``, "none" = none).
    server_metrics_url : tuple of str
        Every ``--server-metrics-url`` as given (each may be comma-separated).
    scrape_interval_s : float
    scrape_timeout_s : float
        ``--scrape-timeout-s``, its default
        (:func:`~llm_locust.master.scraper.default_timeout_s`) filled in, s.
    scrape_max_bytes : int
        ``--scrape-max-bytes``, its default filled in.
    server_log, server_log_cmd, server_log_format : str
        ``--server-log``, ``--server-log-cmd``, ``--server-log-format`` ("" when none).
    labels : dict
        ``--label KEY=VALUE`` pairs.
    workload_meta : dict
        run.json ``workload`` keys of the client knobs
        (:func:`llm_locust.client.config.client_workload_meta`).
    """

    run_dir: str = ""
    model: str = ""
    protocol: str = "openai-chat"
    prompts_file: str = ""
    max_tokens: int = 64
    ignore_eos: bool = True
    temperature: float = 0.0
    api_key: str = field(default="", repr=False)
    metrics_url: str = ""
    server_metrics_url: tuple[str, ...] = ()
    scrape_interval_s: float = 1.0
    scrape_timeout_s: float = 2.9
    scrape_max_bytes: int = DEFAULT_MAX_BYTES
    server_log: str = ""
    server_log_cmd: str = ""
    server_log_format: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    workload_meta: dict = field(default_factory=dict)

    @classmethod
    def from_options(cls, options) -> MasterConfig:
        """Read Locust's parsed options (llm-locust's registered).

        Raises
        ------
        ValueError
            From :func:`~llm_locust.options.validate_options` or :func:`parse_labels`.
        """
        validate_options(options)
        return cls(
            run_dir=options.run_dir or "", model=options.model or "", protocol=options.protocol,
            prompts_file=options.prompts_file or "", max_tokens=options.max_tokens,
            ignore_eos=options.ignore_eos, temperature=options.temperature, api_key=options.api_key or "",
            metrics_url=options.metrics_url or "", server_metrics_url=tuple(options.server_metrics_url or ()),
            scrape_interval_s=options.scrape_interval_s,
            scrape_timeout_s=options.scrape_timeout_s or default_timeout_s(options.scrape_interval_s),
            scrape_max_bytes=options.scrape_max_bytes or DEFAULT_MAX_BYTES, server_log=options.server_log or "",
            server_log_cmd=getattr(options, "server_log_cmd", "") or "",
            server_log_format=options.server_log_format or "", labels=parse_labels(options.label or []),
            workload_meta=client_workload_meta(options),
        )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class MetricsTarget:
    """One Prometheus endpoint the run scrapes, and why.

    Attributes
    ----------
    name : str
        Its label in the run directory and the report: the ``NAME`` of ``--server-metrics-url
        NAME=URL``, else the URL's ``host:port`` (:func:`llm_locust.analysis.schema.source_names`).
    url : str
    origin : str
        ``"--metrics-url"``, ``"--server-metrics-url"`` or ``"default"`` (``HOST/metrics``).
    """

    name: str
    url: str
    origin: str

    def to_json(self) -> dict:
        """run.json ``metrics_sources`` item."""
        return {"name": self.name, "url": self.url, "origin": self.origin}


def metrics_targets(config, host: str | None) -> list[MetricsTarget]:
    """Endpoints to scrape, each with its name and origin.

    ``--metrics-url`` (comma-separated; ``none`` for none) when given; else every
    ``--server-metrics-url`` (repeatable, comma-separated, each ``URL`` or ``NAME=URL``) **instead
    of** the default ``HOST/metrics`` (a gateway's ``/metrics`` reaches one backend or another:
    scraped beside the backends, one server would be counted twice); ``HOST/metrics`` only when
    neither is given. ``--server-metrics-url`` given with ``--metrics-url`` adds to it. Without
    repeats (the first occurrence of a URL is kept).

    ``config`` is a :class:`MasterConfig` (or anything with its ``metrics_url`` and
    ``server_metrics_url``).

    Raises
    ------
    ValueError
        Two endpoints given the same name (:func:`llm_locust.analysis.schema.source_names`).
    """
    explicit = []
    value = config.metrics_url.strip()
    if value and value.lower() != "none":
        explicit = [("", url.strip(), "--metrics-url") for url in value.split(",") if url.strip()]
    extra = [
        (*split_named_url(part), "--server-metrics-url")
        for item in config.server_metrics_url or ()
        for part in item.split(",")
        if part.strip()
    ]
    chosen = explicit + extra
    if not value and not extra and host:
        chosen = [("", host.rstrip("/") + "/metrics", "default")]
    unique = list({url: (name, url, origin) for name, url, origin in reversed(chosen)}.values())[::-1]
    names = source_names([url for _, url, _ in unique], {url: name for name, url, _ in unique if name})
    return [MetricsTarget(name=names[url], url=url, origin=origin) for _, url, origin in unique]


def targets_line(targets: list[MetricsTarget], host: str | None) -> str:
    """The console line saying which ``/metrics`` endpoints a run scrapes, and why.

    >>> t = [MetricsTarget(name="a", url="http://r1:8001/metrics", origin="--server-metrics-url")]
    >>> targets_line(t, "http://gw:80")
    'server metrics: scraping a = http://r1:8001/metrics (--server-metrics-url replaces the default http://gw:80/metrics)'
    """
    if not targets:
        return "server metrics: none scraped"
    named = ", ".join(t.url if t.name in t.url else f"{t.name} = {t.url}" for t in targets)  # a given name shown
    why = ""
    if host and all(t.origin == "--server-metrics-url" for t in targets):
        why = f" (--server-metrics-url replaces the default {host.rstrip('/')}/metrics)"
    return f"server metrics: scraping {named}{why}"


def metrics_urls(config, host: str | None) -> list[str]:
    """The URLs of :func:`metrics_targets`, in order."""
    return [target.url for target in metrics_targets(config, host)]
