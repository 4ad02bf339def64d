"""A workload that shares prefixes on a server whose prefix cache hits nothing.

Whether the prompts share a prefix is known from the inputs (run.json ``workload``:
``shared_prefix_tokens`` - the first K tokens of every prompt are one sequence - or
``session_turns`` > 1 - each turn resends the session's history); whether the server reused it is
its own counters' (``prefix_cache_hit_ratio`` per step, :mod:`llm_locust.analysis.perstep.inputs`). Each request
then prefills the shared part again: TTFT and the prefill's share of the engine carry work a
prefix cache would skip. This is a note beside the verdict (kind ``none``), never the primary
kind: it names a cost, not what stopped the scaling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.verdict.types import BottleneckKind, Evidence, Recommendation, Rules

RULE = "prefix_cache_unused"

ENABLE_FLAGS: dict[str, str] = {
    "vllm": "--enable-prefix-caching",
    "sglang": "leave out --disable-radix-cache",
    "llamacpp": '"cache_prompt": true in the request (the default) and --cache-reuse N',
}
"""Each family's switch for its prefix cache (vLLM ``engine/arg_utils.py``; SGLang
``server_args.py``, the radix cache is on unless disabled; llama.cpp ``tools/server/README.md``)."""


@dataclass(frozen=True, kw_only=True)
class SharedPrefix:
    """How the run's prompts share prefixes, from run.json ``workload``.

    Attributes
    ----------
    shared_prefix_tokens : int
        ``--shared-prefix-tokens``: tokens every prompt starts with (0: none).
    input_tokens : int or None
        ``--input-tokens``: each prompt's length, tokens.
    session_turns : int
        ``--session-turns``: turns per session (each resends the history; 0 or 1: no sessions).
    """

    shared_prefix_tokens: int = 0
    input_tokens: int | None = None
    session_turns: int = 0

    @classmethod
    def from_workload(cls, workload: dict | None) -> SharedPrefix | None:
        """The shared prefixes of run.json's ``workload``; None when its prompts share none."""
        workload = workload or {}

        def count(key: str) -> int:
            value = workload.get(key)
            return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0

        out = cls(
            shared_prefix_tokens=count("shared_prefix_tokens"),
            input_tokens=count("input_tokens") or None,
            session_turns=count("session_turns"),
        )
        return out if out.shared_prefix_tokens > 0 or out.session_turns > 1 else None

    @property
    def text(self) -> str:
        """What is shared, in words."""
        parts = []
        if self.shared_prefix_tokens:
            of = f" of {self.input_tokens}" if self.input_tokens else ""
            parts.append(f"their first {self.shared_prefix_tokens}{of} tokens (--shared-prefix-tokens)")
        if self.session_turns > 1:
            parts.append(f"each session's history over {self.session_turns} turns (--session-turns)")
        return " and ".join(parts)


def prefix_cache_unused(
    usable: pd.DataFrame,
    shared: SharedPrefix | None,
    config: ServerConfig,
    *,
    replicas: int,
    rules: Rules,
) -> Evidence:
    """Rule ``prefix_cache_unused``: the prompts share prefixes, the server's prefix cache hit
    next to none of them.

    Holds when ``shared`` is given, some usable step has a ``prefix_cache_hit_ratio`` from the
    server's counters (0 where it took prompts in and looked none up), and the highest of them is below
    ``rules.max_prefix_hit_ratio``. Values: that highest ratio, the prompt tokens looked up over
    those steps, the shared prefix, the replicas scraped and, as read from the configuration,
    whether prefix caching was on (1/0, NaN unknown).

    Parameters
    ----------
    usable : pandas.DataFrame
        The usable steps (``prefix_cache_hit_ratio`` 0-1, ``prefix_cache_queried_tokens``
        tokens: :mod:`llm_locust.analysis.perstep.inputs`).
    shared : SharedPrefix or None
        How the prompts share prefixes (:meth:`SharedPrefix.from_workload`).
    config : ServerConfig
        Its ``prefix_caching`` says whether to ask for the cache or look elsewhere.
    replicas : int
        Servers scraped (1 for one server).
    rules : Rules
        ``max_prefix_hit_ratio``.

    Returns
    -------
    Evidence
        Kind ``none``: a note beside the verdict, never its primary kind.
    """
    values = {
        "prefix_cache_hit_ratio_max": math.nan,
        "prefix_cache_queried_tokens": math.nan,
        "shared_prefix_tokens": float(shared.shared_prefix_tokens) if shared else math.nan,
        "replicas": float(replicas),
        "prefix_caching_configured": math.nan if config.prefix_caching is None else float(config.prefix_caching),
    }
    units = {
        "prefix_cache_hit_ratio_max": "ratio",
        "prefix_cache_queried_tokens": "tokens",
        "shared_prefix_tokens": "tokens",
        "replicas": "servers",
        "prefix_caching_configured": "flag",
    }

    def result(holds: bool, text: str) -> Evidence:
        return Evidence(rule=RULE, kind=BottleneckKind.NONE, holds=holds, values=values, units=units, text=text)

    if shared is None:
        return result(False, "the prompts share no prefix (no --shared-prefix-tokens, no sessions)")
    ratio = usable.get("prefix_cache_hit_ratio", pd.Series(dtype=float)).astype(float)
    queried = usable.get("prefix_cache_queried_tokens", pd.Series(np.nan, index=usable.index)).astype(float)
    measured = ratio.notna()
    if not measured.any():
        return result(
            False, "the server reports no prefix-cache counters: whether it reused the shared prefix is unknown"
        )
    highest = float(ratio[measured].max())
    values["prefix_cache_hit_ratio_max"] = highest
    values["prefix_cache_queried_tokens"] = float(queried[measured].sum(min_count=1))
    if highest >= rules.max_prefix_hit_ratio:
        return result(False, f"the server's prefix cache hit up to {highest:.1%} of the prompt tokens it looked up")
    tokens = values["prefix_cache_queried_tokens"]
    if tokens == 0:
        found = "looked up none of its prompt tokens in a prefix cache"
    else:
        of = f" of the {tokens:,.0f} prompt tokens it looked up" if math.isfinite(tokens) else ""
        found = f"prefix cache hit at most {highest:.1%}{of} in any step"
    text = (
        f"the prompts share {shared.text}, yet the server {found} (its own counters: steps.csv "
        "prefix_cache_hit_ratio); every request prefilled the shared part again, and TTFT carries that work"
    )
    if config.prefix_caching is False:
        text += f"; its configuration says prefix caching is off ({config.sources.get('prefix_caching', 'config')})"
    elif config.prefix_caching is True:
        text += (
            "; its configuration says prefix caching is on: the shared part may be shorter than one KV block "
            "(only whole blocks are reused), or evicted between requests"
        )
    if replicas >= 2:
        text += f"; {replicas} replicas serve: requests sharing a prefix that land on different replicas miss"
    return result(True, text)


def prefix_cache_recommendations(evidence: Evidence, family: str | None) -> tuple[Recommendation, ...]:
    """The changes :func:`prefix_cache_unused` calls for (none when it does not hold): turn the
    prefix cache on (unless the configuration says it is), and with several replicas send the
    requests that share a prefix to the same one."""
    if not evidence.holds:
        return ()
    verify = (
        "rerun the same ladder with the same script and inputs, only this change, and check that "
        "steps.csv prefix_cache_hit_ratio rises toward the shared share of the prompt and TTFT p50 falls"
    )
    out = []
    if evidence.values.get("prefix_caching_configured") != 1.0:
        out.append(
            Recommendation(
                change="turn the server's prefix cache on",
                flag=ENABLE_FLAGS.get((family or "").lower(), "the server's prefix-cache setting"),
                because=RULE,
                verify=verify,
            )
        )
    if evidence.values.get("replicas", 0) >= 2:
        out.append(
            Recommendation(
                change="route the requests that share a prefix (a session's turns) to the same replica",
                flag="the router's session affinity (sticky sessions, or prefix-aware routing)",
                because=RULE,
                verify=verify,
            )
        )
    return tuple(out)
