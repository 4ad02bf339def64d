"""Did the server's batching settings take effect? Configured vs observed vs theoretical.

The seeds' second step: the startup configuration says how many sequences the server may batch
(its batch ceiling, whatever the engine calls it); the run shows the highest number it actually
ran; the KV cache bounds how many requests of this workload fit at once. :func:`check_config`
compares them and returns a verdict with its reason.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from llm_locust.analysis.loadaxis import load_axis
from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.server.series import highest


@dataclass(frozen=True, kw_only=True)
class ConfigCheck:
    """Result of :func:`check_config`.

    Attributes
    ----------
    took_effect : bool or None
        None when the data cannot tell.
    because : str
        The reason, as printed after "because".
    configured : int or None
        Configured batch ceiling.
    configured_name : str or None
        Its name in the engine (``max_num_seqs``, ``n_slots``…).
    observed_max_running : float or None
        Highest running count seen during the run (server series).
    theoretical_kv_requests : float or None
        Requests of this workload (mean prompt + max_tokens) the KV cache holds.
    details : tuple of str
        Configured / observed / theoretical lines for the report.
    """

    took_effect: bool | None
    because: str
    configured: int | None = None
    configured_name: str | None = None
    observed_max_running: float | None = None
    theoretical_kv_requests: float | None = None
    details: tuple[str, ...] = ()

    @property
    def answer(self) -> str:
        """``yes``, ``no`` or ``cannot tell``."""
        return {True: "yes", False: "no", None: "cannot tell"}[self.took_effect]

    @property
    def line(self) -> str:
        """``Batching settings took effect: yes/no/cannot tell, because …``."""
        return f"Batching settings took effect: {self.answer}, because {self.because}"


def _fmt(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.2f}"


def check_config(
    config: ServerConfig,
    series: pd.DataFrame,
    table: pd.DataFrame,
    *,
    window_start_s: float,
    window_end_s: float,
    request_tokens: float | None = None,
    waiting_threshold: float = 0.5,
    tolerance: float = 0.5,
    min_hold_s: float = 0.05,
    batches: pd.DataFrame | None = None,
) -> ConfigCheck:
    """Compare the configured batch ceiling with what the server did.

    Rules, with C the configured ceiling, R the highest running count the server reported
    during the run, L the highest tested concurrency and W the highest time-averaged waiting
    of a step:

    R counts only values that held at least ``min_hold_s`` (s). A log without a running series
    whose batch lines give each batch's size (a static batcher's ``[[log.batches]]``) has R = the
    largest batch that started within the run.

    - no running data: cannot tell;
    - R > C + ``tolerance``: **no** - the server is not running with the settings read;
    - R >= C - ``tolerance``: **yes** - running reached the configured ceiling;
    - R < C, L >= C and W > ``waiting_threshold``: **no** - requests queued while the batch
      stayed below the ceiling (the KV cache or token budget is the real limit, or the setting
      did not apply);
    - R < C, L < C and W > ``waiting_threshold``: cannot tell, but says that requests waited
      below the ceiling (something else holds them back: a KV cache or token budget);
    - R < C otherwise: cannot tell (the load never filled the batch);
    - C unknown: **no** when R <= 1 while requests queued (batching is off), else cannot tell;
    - C = 1: **no**, whatever the run shows - a ceiling of one request is batching off (checked
      first).

    Parameters
    ----------
    config : ServerConfig
    series : pandas.DataFrame
        Normalised server series (``t_s``, ``running``, ``waiting``).
    table : pandas.DataFrame
        Per-step table (``target_users``, ``server_waiting``, ``client_inflight``).
    window_start_s, window_end_s : float
        The run (Unix s): running is read within it.
    request_tokens : float, optional
        Mean prompt tokens + max_tokens of this workload (for the KV bound).
    waiting_threshold, tolerance, min_hold_s : float
    batches : pandas.DataFrame, optional
        The log's batches (:mod:`llm_locust.analysis.server.batches`: ``t_s``, ``batch_size``), read for R
        when ``series`` has no running value in the run.

    Returns
    -------
    ConfigCheck
    """
    ceiling, name = config.batch_ceiling, config.batch_ceiling_name or "batch ceiling"
    observed = (
        highest(series["t_s"], series["running"], window_start_s, window_end_s, min_hold_s=min_hold_s)
        if len(series)
        else math.nan
    )
    from_batches = False
    if not np.isfinite(observed) and batches is not None and len(batches):
        inside = batches[(batches["t_s"] >= window_start_s) & (batches["t_s"] <= window_end_s)]["batch_size"]
        if inside.notna().any():
            observed, from_batches = float(inside.max()), True
    axis = load_axis(table)
    load = float(table[axis.column].max()) if table[axis.column].notna().any() else math.nan
    waits = table["server_waiting"]
    waited = float(waits.max()) if waits.notna().any() else math.nan
    kv_requests = None
    if config.kv_capacity_tokens and request_tokens and request_tokens > 0:
        kv_requests = config.kv_capacity_tokens / request_tokens
    details = []
    if ceiling is not None:
        source = config.sources.get("batch_ceiling", "?")
        details.append(f"configured: {name} = {ceiling} [{source}]")
    else:
        details.append("configured: batch ceiling not found (startup log, /props, /info, metrics)")
    if config.token_budget is not None:
        details.append(
            f"configured: {config.token_budget_name or 'token budget'} = "
            f"{config.token_budget} [{config.sources.get('token_budget', '?')}]"
        )
    seen = "-" if not np.isfinite(observed) else _fmt(observed)
    queue = "" if not np.isfinite(waited) else f"; highest step-average waiting {waited:.2f}"
    largest = " (the largest batch of the log's batch lines)" if from_batches else ""
    details.append(f"observed: highest running {seen}{largest}{queue}")
    if kv_requests is not None:
        details.append(
            f"theoretical: KV cache of {config.kv_capacity_tokens:,} tokens holds "
            f"{kv_requests:.1f} requests of {request_tokens:.0f} tokens"
        )
    if config.reported_max_concurrency is not None:
        length = (
            f"requests of {config.max_model_len} tokens"
            if config.max_model_len
            else "requests at its full context length (max_model_len, not reported without the startup log)"
        )
        details.append(f"the engine's own figure: {config.reported_max_concurrency:.2f}x {length}")
    # the fields every answer below carries
    result = functools.partial(
        ConfigCheck,
        configured=ceiling,
        configured_name=config.batch_ceiling_name,
        observed_max_running=None if not np.isfinite(observed) else observed,
        theoretical_kv_requests=kv_requests,
        details=tuple(details),
    )
    if ceiling == 1:
        return result(
            took_effect=False,
            because=(f"the configured {name} = 1 runs one request at a time: batching is off"),
        )
    if not np.isfinite(observed):
        return result(
            took_effect=None,
            because="the server's running count is not available (no metrics or log with it)",
        )
    queued = np.isfinite(waited) and waited > waiting_threshold
    if ceiling is None:
        if observed <= 1 + 1e-9 and queued:
            return result(
                took_effect=False,
                because=(
                    f"the server ran at most {_fmt(observed)} request at a time while requests "
                    f"waited (up to {waited:.2f} on average in a step): batching is not in effect"
                ),
            )
        return result(
            took_effect=None,
            because=(f"the configured batch ceiling was not found; running reached {_fmt(observed)}"),
        )
    if observed > ceiling + tolerance:
        return result(
            took_effect=False,
            because=(
                f"running reached {_fmt(observed)}, above the configured {name} = {ceiling}: the "
                "server is not running with the settings read"
            ),
        )
    if observed >= ceiling - tolerance:
        because = f"running reached the configured {name} = {ceiling} (highest running {_fmt(observed)})"
        if kv_requests is not None and kv_requests < ceiling:
            because += f"; note the KV cache holds only {kv_requests:.1f} such requests"
        return result(took_effect=True, because=because)
    hint = (  # why running may stay below the ceiling while requests wait
        f"; the KV cache holds only {kv_requests:.1f} requests of this workload"
        if kv_requests is not None and kv_requests < ceiling
        else ""
    )
    if np.isfinite(load) and load >= ceiling and queued:
        return result(
            took_effect=False,
            because=(
                f"requests waited (up to {waited:.2f}) while running stayed at or below "
                f"{_fmt(observed)}, under the configured {name} = {ceiling}{hint}"
            ),
        )
    reach = "" if not np.isfinite(load) else f" (highest load tested {axis.fmt(load)})"
    if queued:  # below the ceiling with a queue, but the load never reached the ceiling
        return result(
            took_effect=None,
            because=(
                f"running peaked at {_fmt(observed)}, below the configured {name} = {ceiling}, while "
                f"requests waited (up to {waited:.2f}), but the load never reached the ceiling{reach}: "
                f"something below the ceiling holds requests back{hint}"
            ),
        )
    return result(
        took_effect=None,
        because=(
            f"running peaked at {_fmt(observed)}, below the configured {name} = {ceiling}, without "
            f"requests waiting: the load never filled the batch{reach}"
        ),
    )
