"""What a server says about its own batching configuration, whatever the engine calls it.

Every reader (startup log lines, ``/metrics`` info samples, ``/props`` or ``/info``) returns one
:class:`ServerConfig`; :func:`merge_configs` combines them, first reader first, and keeps where
each value came from so the report can cite it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """Batching settings of one server, with their sources.

    Attributes
    ----------
    engine : str or None
        Server family (:class:`llm_locust.analysis.server.families.ServerFamily` value) or a user format's name.
    version : str or None
        Engine version, as the server prints it.
    batch_ceiling : int or None
        Most sequences batched at once, whatever its name: vLLM ``max_num_seqs``, SGLang
        ``max_running_requests``, llama.cpp ``n_slots`` (``--parallel``), TGI ``max_batch_size``,
        TensorRT-LLM ``max`` active requests.
    batch_ceiling_name : str or None
        The engine's own name for it.
    token_budget : int or None
        Tokens per engine step or per batch: vLLM ``max_num_batched_tokens``, TGI
        ``max_batch_total_tokens``, SGLang ``max_prefill_tokens``.
    token_budget_name : str or None
    chunked_prefill : bool or None
        Whether long prompts are prefilled in chunks.
    prefix_caching : bool or None
        Whether the server keeps computed prompt prefixes for later requests (vLLM
        ``enable_prefix_caching``).
    kv_capacity_tokens : int or None
        KV cache size, tokens.
    max_model_len : int or None
        Context window per request, tokens.
    reported_max_concurrency : float or None
        The engine's own figure for how many requests of ``max_model_len`` tokens fit in the KV
        cache (vLLM "Maximum concurrency for N tokens per request: X").
    batch_wait_max_ms : float or None
        Static batchers: the longest a batch waits to fill before it starts, ms (Triton's
        ``max_queue_delay_microseconds`` / 1000, an in-house server's batch timeout).
    sources : dict
        ``{attribute: where it was read}``, e.g. ``{"batch_ceiling": "server.log line 8
        (non-default args)"}``.
    """

    engine: str | None = None
    version: str | None = None
    batch_ceiling: int | None = None
    batch_ceiling_name: str | None = None
    token_budget: int | None = None
    token_budget_name: str | None = None
    chunked_prefill: bool | None = None
    prefix_caching: bool | None = None
    kv_capacity_tokens: int | None = None
    max_model_len: int | None = None
    reported_max_concurrency: float | None = None
    batch_wait_max_ms: float | None = None
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """True when nothing was read."""
        return all(getattr(self, f.name) is None for f in _VALUE_FIELDS)

    def with_value(self, name: str, value, source: str, **extra) -> ServerConfig:
        """A copy with ``name`` set from ``source`` (unchanged when ``value`` is None or ``name``
        is already set: the first reader wins). ``extra`` sets companion fields such as
        ``batch_ceiling_name`` along with it."""
        if value is None or getattr(self, name) is not None:
            return self
        return dataclasses.replace(self, **{name: value, **extra}, sources={**self.sources, name: source})

    def describe(self) -> list[str]:
        """One ``name: value (source)`` line per known value."""
        lines = []
        for f in _VALUE_FIELDS:
            value = getattr(self, f.name)
            if value is None or f.name.endswith("_name"):
                continue
            label = f.name
            if f.name in ("batch_ceiling", "token_budget") and getattr(self, f.name + "_name"):
                label = f"{f.name} ({getattr(self, f.name + '_name')})"
            source = self.sources.get(f.name)
            lines.append(f"{label}: {value}" + (f" [{source}]" if source else ""))
        return lines


_VALUE_FIELDS = tuple(f for f in dataclasses.fields(ServerConfig) if f.name != "sources")


def merge_configs(*configs: ServerConfig | None) -> ServerConfig:
    """Combine configs: for each attribute the first config that has it wins, with its source.

    >>> a = ServerConfig(batch_ceiling=4, sources={"batch_ceiling": "log"})
    >>> b = ServerConfig(batch_ceiling=8, kv_capacity_tokens=100, sources={"batch_ceiling": "x"})
    >>> m = merge_configs(a, b)
    >>> m.batch_ceiling, m.kv_capacity_tokens, m.sources["batch_ceiling"]
    (4, 100, 'log')
    """
    out = ServerConfig()
    for config in configs:
        if config is None:
            continue
        values, sources = {}, dict(out.sources)
        for f in _VALUE_FIELDS:
            mine, theirs = getattr(out, f.name), getattr(config, f.name)
            if mine is None and theirs is not None:
                values[f.name] = theirs
                if f.name in config.sources:
                    sources[f.name] = config.sources[f.name]
        out = dataclasses.replace(out, **values, sources=sources)
    return out
