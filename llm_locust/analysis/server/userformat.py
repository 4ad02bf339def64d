"""A user format file: how to read a server this package has no parser for.

A small TOML file of named-group regular expressions for the log and a metric-name table for
``/metrics``. Example (a server that logs ``batch size=3, wait=12.5ms, queue=4``)::

    name = "deepinfer"

    [log]
    timestamp = '^(?P<ts>\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d(?:\\.\\d+)?)'
    timestamp_format = "iso"      # iso | epoch | epoch_ms | a strptime format
    timezone = "UTC"              # for stamps without a zone
    max_hold_s = 10               # a line's values hold at most this long

    [[log.series]]                # groups named after series columns
    pattern = 'batch size=(?P<running>\\d+), wait=[\\d.]+ms, queue=(?P<waiting>\\d+)'

    [[log.batches]]               # one line = one batch: batch_size, batch_wait_ms, queue
    pattern = 'batch started size=(?P<batch_size>\\d+) wait=(?P<batch_wait_ms>[\\d.]+)ms'

    [[log.config]]                # groups named after ServerConfig attributes
    pattern = 'max_batch_size=(?P<batch_ceiling>\\d+)'
    batch_ceiling_name = "max_batch_size"

    [[log.errors]]                # tried before the built-in error patterns
    kind = "queue_full"
    pattern = 'queue is full'     # a group named path: the request's path (see below)
    setting = "max_queue_size"    # optional: the server's or gateway's setting behind these lines,
                                  # named by the verdict's recommendation (nginx: proxy_read_timeout)

    [metrics]                     # series column = sample name (a gauge) or a table
    running = "deepinfer_batch_size"
    waiting = "deepinfer_queue_size"
    gen_tps = { name = "deepinfer_generated_tokens_total", kind = "counter" }

    [metrics.config]              # ServerConfig attribute = sample name
    batch_ceiling = "deepinfer_max_batch_size"

Series groups: :data:`SERIES_GROUPS`; batch groups: :data:`BATCH_GROUPS`; config groups:
:data:`CONFIG_GROUPS`. An error pattern may name the request's path (group ``path``, e.g. from a
gateway's ``request: "GET /metrics HTTP/1.1"``): lines of the scraper's own requests (the path of
a scraped URL) are then counted apart, never as the users' failures.

Format files shipped with the package (:data:`FORMATS_DIR`, named by :func:`shipped_formats`):
``--server-log-format nginx-error`` reads nginx's error log (``limit_conn`` / ``limit_req``
refusals, ``upstream timed out``, ``upstream prematurely closed``); :func:`format_file_path`
turns a name or a path into the file.

Patterns are matched line by line (``re.search``), and a pattern sees at most the first
:data:`llm_locust.analysis.server.serverlog.base.USER_PATTERN_CHARS` (8,192) characters of a line: a
pattern that backtracks quadratically on a long line (``(\\d+) running`` on a run of digits)
then costs at most ~0.5 s per such line, however long the line. Nothing bounds a pattern that
backtracks exponentially (a repeat inside a repeat that can match the same text in many ways,
``(\\d+)+x``); write each repeat so it can match a given text only one way (``\\d+x``, or
an atomic group ``(?>…)`` / possessive ``\\d++``).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.server.families import ServerFamily
from llm_locust.analysis.server.prometheus.mapping import (
    Combine,
    FamilyMapping,
    SampleKind,
    SeriesSpec,
    latest_value,
)

SERIES_GROUPS: tuple[str, ...] = (
    "running",
    "waiting",
    "kv_usage_ratio",
    "kv_usage_percent",
    "gen_tps",
    "prompt_tps",
    "preemptions_per_s",
)
"""Named groups a ``[[log.series]]`` pattern may use (``ts`` too: the line's stamp)."""

BATCH_GROUPS: tuple[str, ...] = ("batch_size", "batch_wait_ms", "queue")
"""Named groups a ``[[log.batches]]`` pattern may use (``ts`` too): each matching line is one
batch - its size (sequences), how long it waited to fill (ms), the requests left queued."""

CONFIG_GROUPS: dict[str, type] = {
    "batch_ceiling": int,
    "token_budget": int,
    "kv_capacity_tokens": int,
    "max_model_len": int,
    "reported_max_concurrency": float,
    "version": str,
    "chunked_prefill": bool,
    "batch_wait_max_ms": float,
}
"""Named groups a ``[[log.config]]`` pattern may use, and their types."""

METRIC_COLUMNS: tuple[str, ...] = ("running", "waiting", "kv_usage_ratio", "gen_tps", "prompt_tps", "preemptions_per_s")


class UserFormatError(ValueError):
    """A format file that cannot be used (the message names the file and the problem)."""


FORMATS_DIR = Path(__file__).resolve().parent / "formats"
"""The format files shipped with the package (``<name>.toml``)."""


def shipped_formats() -> dict[str, Path]:
    """``{name: path}`` of the shipped format files, by name.

    >>> "nginx-error" in shipped_formats()
    True
    """
    return {path.stem: path for path in sorted(FORMATS_DIR.glob("*.toml"))}


def format_file_path(value: str | Path) -> Path:
    """The format file ``--server-log-format`` names: a file that exists, else a shipped
    format's name (``nginx-error``, with or without ``.toml``).

    Raises
    ------
    UserFormatError
        Neither a file nor a shipped name (the message lists the shipped names).
    """
    path = Path(value)
    if path.is_file():
        return path
    shipped = shipped_formats()
    name = str(value).removesuffix(".toml")
    if name in shipped:
        return shipped[name]
    raise UserFormatError(f"{value}: no such file, and not a shipped format (shipped: {', '.join(shipped)})")


@dataclass(frozen=True, kw_only=True)
class ConfigPattern:
    """One ``[[log.config]]`` entry."""

    regex: re.Pattern
    names: dict[str, str]


@dataclass(frozen=True, kw_only=True)
class UserFormat:
    """A parsed format file (see the module docstring)."""

    name: str
    source: str
    series_patterns: tuple[re.Pattern, ...] = ()
    batch_patterns: tuple[re.Pattern, ...] = ()
    config_patterns: tuple[ConfigPattern, ...] = ()
    error_patterns: tuple[tuple[str, str], ...] = ()
    timestamp: re.Pattern | None = None
    timestamp_format: str = "iso"
    timezone: str | None = None
    max_hold_s: float | None = None
    metric_specs: tuple[SeriesSpec, ...] = ()
    metric_config: tuple[tuple[str, str], ...] = ()
    error_settings: tuple[tuple[str, str], ...] = ()
    """``(kind, setting)`` of each ``[[log.errors]]`` entry that names its ``setting``: the server's
    or gateway's option whose value makes those lines (a gateway's read timeout behind its
    ``timeout`` lines), named by the verdict's recommendation."""
    error_pattern_settings: tuple[str, ...] = ()
    """The ``setting`` of each entry of :attr:`error_patterns`, in its order ("" where the entry
    names none): what :func:`~llm_locust.analysis.server.serverlog.errors.scan_errors` records on
    each line a pattern matched."""

    @property
    def has_log_patterns(self) -> bool:
        """Whether the file reads the log at all (series, batch or config patterns): a file with
        ``[[log.batches]]`` or ``[[log.config]]`` and no ``[[log.series]]`` still reads it."""
        return bool(self.series_patterns or self.batch_patterns or self.config_patterns)

    def family_mapping(self) -> FamilyMapping | None:
        """The ``generic`` metrics mapping, or None when the file has no ``[metrics]``."""
        if not self.metric_specs:
            return None

        def config(samples: pd.DataFrame) -> ServerConfig:
            out = ServerConfig(engine=self.name)
            for attribute, metric in self.metric_config:
                sampled = latest_value(samples, metric)
                value: object = None
                if sampled is not None and attribute != "version":
                    value = CONFIG_GROUPS[attribute](sampled)
                elif sampled is not None:
                    value = str(sampled)
                out = out.with_value(attribute, value, f"/metrics {metric}")
            return out

        return FamilyMapping(family=ServerFamily.GENERIC, prefixes=(), specs=self.metric_specs, config=config)


def _regex(source: str, where: str, pattern) -> re.Pattern:
    if not isinstance(pattern, str):
        raise UserFormatError(f"{source}: {where}: pattern must be a string")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise UserFormatError(f"{source}: {where}: bad regular expression {pattern!r}: {exc}") from None


def _check_keys(source: str, where: str, table: dict, known: set[str]) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise UserFormatError(f"{source}: {where}: unknown keys {unknown}; known {sorted(known)}")


def error_settings(user_format: UserFormat | None, errors: pd.DataFrame | None = None) -> dict[str, str]:
    """``{error kind: setting}`` of a format file's ``[[log.errors]] setting`` keys (several
    settings of one kind joined with " / "); empty without a format file or a setting.

    With ``errors`` (:func:`~llm_locust.analysis.server.serverlog.errors.scan_errors`' lines, its
    ``setting`` column), a kind whose lines name settings gets only those, in the order of the
    lines: nginx's read-timeout lines name ``proxy_read_timeout`` alone, not its connect-timeout
    pattern's setting too.

    >>> fmt = load_user_format('[[log.errors]]\\nkind = "timeout"\\npattern = "upstream timed out"\\n'
    ...                        'setting = "proxy_read_timeout"')
    >>> error_settings(fmt)
    {'timeout': 'proxy_read_timeout'}
    """
    out: dict[str, list[str]] = {}
    for kind, setting in user_format.error_settings if user_format is not None else ():
        out.setdefault(kind, []).append(setting)
    if errors is not None and "setting" in errors.columns:
        named = errors[errors["setting"].astype(str) != ""]
        for kind, lines in named.groupby("kind", sort=False):
            out[str(kind)] = list(dict.fromkeys(lines["setting"].astype(str)))
    return {kind: " / ".join(settings) for kind, settings in out.items()}


def toml_hint(exc: Exception) -> str:
    """A hint after a TOML error a regular expression causes: backslashes in a double-quoted
    (basic) string are escapes, ``"\\d"`` is refused with ``Unescaped '\\' in a string``.

    >>> import tomllib
    >>> try:
    ...     tomllib.loads('pattern = "\\d+"')
    ... except tomllib.TOMLDecodeError as exc:
    ...     print(toml_hint(exc))
    ; write regular expressions in single quotes ('\\d+ running'): TOML takes a single-quoted string as it is
    """
    if "Unescaped '\\'" in str(exc) or "escape" in str(exc).lower():
        return (
            "; write regular expressions in single quotes ('\\d+ running'): TOML takes a single-quoted string as it is"
        )
    return ""


def load_user_format(text: str, *, source: str = "format file") -> UserFormat:
    """Parse a format file's TOML text.

    Raises
    ------
    UserFormatError
        Invalid TOML, unknown keys, a bad regular expression, a series pattern without any
        known named group, a config group or metric column that is not known.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserFormatError(f"{source}: not valid TOML ({exc}){toml_hint(exc)}") from None
    _check_keys(source, "top level", data, {"name", "log", "metrics"})
    log = data.get("log", {}) or {}
    _check_keys(
        source,
        "[log]",
        log,
        {"timestamp", "timestamp_format", "timezone", "max_hold_s", "series", "batches", "config", "errors"},
    )
    series = []
    for k, entry in enumerate(log.get("series", []) or []):
        _check_keys(source, f"[[log.series]] #{k + 1}", entry, {"pattern"})
        regex = _regex(source, f"[[log.series]] #{k + 1}", entry.get("pattern"))
        if not set(regex.groupindex) & set(SERIES_GROUPS):
            raise UserFormatError(f"{source}: [[log.series]] #{k + 1}: no named group among {list(SERIES_GROUPS)}")
        series.append(regex)
    batches = []
    for k, entry in enumerate(log.get("batches", []) or []):
        where = f"[[log.batches]] #{k + 1}"
        _check_keys(source, where, entry, {"pattern"})
        regex = _regex(source, where, entry.get("pattern"))
        if "batch_size" not in regex.groupindex:
            raise UserFormatError(
                f"{source}: {where}: needs a group named batch_size (and optionally batch_wait_ms, queue, ts)"
            )
        batches.append(regex)
    configs = []
    for k, entry in enumerate(log.get("config", []) or []):
        where = f"[[log.config]] #{k + 1}"
        _check_keys(source, where, entry, {"pattern", "batch_ceiling_name", "token_budget_name"})
        regex = _regex(source, where, entry.get("pattern"))
        bad = sorted(set(regex.groupindex) - set(CONFIG_GROUPS))
        if bad or not regex.groupindex:
            raise UserFormatError(f"{source}: {where}: groups {bad or '(none)'} are not among {list(CONFIG_GROUPS)}")
        configs.append(
            ConfigPattern(
                regex=regex, names={k2: entry[k2] for k2 in ("batch_ceiling_name", "token_budget_name") if k2 in entry}
            )
        )
    errors = []
    error_settings: list[tuple[str, str]] = []
    pattern_settings: list[str] = []
    for k, entry in enumerate(log.get("errors", []) or []):
        where = f"[[log.errors]] #{k + 1}"
        _check_keys(source, where, entry, {"kind", "pattern", "setting"})
        _regex(source, where, entry.get("pattern"))
        if not isinstance(entry.get("kind"), str) or not entry["kind"]:
            raise UserFormatError(f"{source}: {where}: needs a kind")
        errors.append((entry["kind"], entry["pattern"]))
        if "setting" in entry:
            if not isinstance(entry["setting"], str) or not entry["setting"].strip():
                raise UserFormatError(f"{source}: {where}: setting must be a non-empty string (an option's name)")
            error_settings.append((entry["kind"], entry["setting"].strip()))
        pattern_settings.append(entry["setting"].strip() if "setting" in entry else "")
    stamp = log.get("timestamp")
    stamp_re = _regex(source, "[log] timestamp", stamp) if stamp is not None else None
    if stamp_re is not None and "ts" not in stamp_re.groupindex:
        raise UserFormatError(f"{source}: [log] timestamp needs a group named ts")
    metrics = data.get("metrics", {}) or {}
    specs, metric_config = [], []
    for column, value in metrics.items():
        if column == "config":
            _check_keys(source, "[metrics.config]", value, set(CONFIG_GROUPS))
            metric_config += [(attr, str(name)) for attr, name in value.items()]
            continue
        if column not in METRIC_COLUMNS:
            raise UserFormatError(f"{source}: [metrics] {column!r} is not among {list(METRIC_COLUMNS) + ['config']}")
        entry = {"name": value} if isinstance(value, str) else dict(value)
        _check_keys(source, f"[metrics] {column}", entry, {"name", "kind", "scale", "combine"})
        try:
            specs.append(
                SeriesSpec(
                    column=column,
                    metrics=(str(entry["name"]),),
                    kind=SampleKind(entry.get("kind", "gauge")),
                    combine=Combine(entry.get("combine", "mean" if column == "kv_usage_ratio" else "sum")),
                    scale=float(entry.get("scale", 1.0)),
                )
            )
        except (KeyError, ValueError) as exc:
            raise UserFormatError(f"{source}: [metrics] {column}: {exc}") from None
    hold = log.get("max_hold_s")
    return UserFormat(
        name=str(data.get("name") or "generic"),
        source=source,
        series_patterns=tuple(series),
        batch_patterns=tuple(batches),
        config_patterns=tuple(configs),
        error_patterns=tuple(errors),
        timestamp=stamp_re,
        timestamp_format=str(log.get("timestamp_format", "iso")),
        timezone=log.get("timezone"),
        max_hold_s=None if hold is None else float(hold),
        metric_specs=tuple(specs),
        metric_config=tuple(metric_config),
        error_settings=tuple(dict.fromkeys(error_settings)),
        error_pattern_settings=tuple(pattern_settings),
    )
