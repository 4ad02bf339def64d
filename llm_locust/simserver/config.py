"""Configuration of the simulated server: one frozen dataclass and its command-line flags.

Every flag of ``llm-locust sim-server`` maps to one :class:`SimConfig` field (``--max-num-seqs`` ->
``max_num_seqs``). :func:`add_arguments` adds the flags, :func:`config_from_args` builds the config
from the parsed namespace, and :func:`non_default_args` renders the dict that the startup log
prints in vLLM's ``non-default args: {...}`` line.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llm_locust.simserver.engine import BATCHING_MODES, BatchEngine

ENGINE_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(BatchEngine) if f.init}
"""The scheduler parameters and their defaults, as :class:`BatchEngine` declares them (one place)."""
API_KEY_ENV = "VLLM_API_KEY"
"""Environment variable read for ``api_key`` when ``--api-key`` is not given (vLLM's name)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SimConfig:
    """Settings of the simulated continuous-batching server.

    Attributes
    ----------
    host : str, default "127.0.0.1"
        Address to listen on.
    port : int, default 8000
        TCP port; 0 picks a free port (the chosen one is printed at startup).
    model_name : str, default "sim-llama"
        Served model name (``/v1/models``, the ``model`` field of responses, metric labels).
    max_model_len : int, default 2048
        Context window in tokens: prompt + max_tokens must fit in it (else HTTP 400).
    max_num_seqs : int, default 8
        Batch ceiling: at most this many sequences run in one engine step.
    max_num_batched_tokens : int, default 8192
        Token budget of one engine step (one token per running sequence plus the prompts admitted).
    decode_base_ms : float, default 20.0
        Fixed part of one engine step, ms.
    decode_per_seq_ms : float, default 1.0
        Per-sequence part of one engine step, ms per running sequence. The step time is
        ``decode_base_ms + decode_per_seq_ms * B``, so output throughput ``B / step`` tends to
        ``1000 / decode_per_seq_ms`` tokens/s as the batch B grows: with ``decode_per_seq_ms``
        large against ``decode_base_ms`` (e.g. 20 against 5) throughput flattens while running
        still rises and nothing waits - the hardware (compute) at its limit.
    roofline : bool, default False
        Decode step time ``max(decode_base_ms, decode_per_seq_ms * B)`` instead of the sum:
        memory-bound (flat) up to ``decode_base_ms / decode_per_seq_ms`` sequences, then
        compute-bound - output throughput rises linearly, then stays flat while running still
        rises (a sharp compute limit, as decode on a GPU).
    prefill_ms_per_token : float, default 0.1
        Extra step time per prompt token prefilled in that step, ms.
    kv_capacity_tokens : int, default 65536
        KV cache size in tokens; must be at least ``max_model_len``. Smaller than
        ``max_num_seqs * (prompt + max_tokens)`` makes KV the limit: running sequences are
        preempted back to the head of the waiting queue (vLLM V1 recompute), counted in
        ``vllm:num_preemptions_total`` and the stats line's ``Preemptions: N``, and running
        plateaus below ``max_num_seqs``.
    max_queue : int, default 0
        Waiting requests beyond the free batch slots that are accepted; more are rejected with
        ``reject_status``. 0 means unlimited.
    reject_status : int, default 429
        HTTP status of a rejection when the queue is full: 429 (TGI answers its overload,
        ``InferError::Overloaded``, with 429 and ``{"error": "Model is overloaded",
        "error_type": "overloaded"}``; the tgi flavour writes that body) or 503 (Ray Serve's
        default back-pressure answer once ``max_queued_requests`` is reached,
        ``BackpressureConfig.status_code``; Ollama past ``OLLAMA_MAX_QUEUE``).
    effective_max_num_seqs : int, default 0
        The batch ceiling the scheduler really applies; 0 means ``max_num_seqs``. The logs,
        metrics and ``/props`` / ``/info`` still announce ``max_num_seqs``: a setting that did
        not take effect (with 1: batching off although the startup log says e.g. 8).
    batching : str, default "continuous"
        ``continuous`` (vLLM V1: admit into the running batch every step) or ``static``: a
        batch forms only when none runs and runs to completion (llama.cpp
        ``--no-cont-batching``; in-house servers).
    batch_wait_ms : float, default 0.0
        Static batching: once free, the batcher collects until the ceiling's worth of requests
        wait or this long has passed since it started collecting, ms (an in-house batcher's
        batch timeout; Triton's ``max_queue_delay_microseconds``). The generic flavour logs each
        batch's size, wait and queue.
    queue_timeout_ms : float, default 0.0
        A request still waiting for its first admission this long after arriving is dropped,
        ms; 0 = never. Only the generic flavour's ``POST /generate`` speaks it (HTTP 504
        ``{"error": "timed out in queue"}`` and a ``timed out in queue`` log line).
    slowdown : float, default 1.0
        Multiplies every step time (a slower, e.g. quantized, variant of the same model).
    enable_prefix_caching : bool, default False
        vLLM's automatic prefix caching (``--enable-prefix-caching``; on by default in vLLM V1,
        off here so that the other workloads keep their prefill cost): a request's leading full
        KV blocks already computed for an earlier prompt are not prefilled again, counted in
        ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total`` (tokens) and the
        stats line's ``Prefix cache hit rate`` (:mod:`llm_locust.simserver.prefixcache`).
    block_size : int, default 16
        KV block size, tokens (vLLM ``--block-size``; its GPU default, 128 on its CPU backend):
        only whole blocks of a shared prefix are reused.
    tokens_per_chunk : int, default 1
        Generated tokens written per SSE chunk: the stream holds each token until this many
        are ready (or the request ends) and writes their texts in one chunk, as a server that
        batches its flushes or decodes several tokens a step (speculative decoding, MTP) sends
        them; the engine's steps and every token count are unchanged. With
        ``stream_options.continuous_usage_stats`` each chunk's ``usage`` states the running
        total, so the client knows each chunk's tokens.
    seed : int, default 0
        Seed of the generated text and of early-stop lengths.
    log_stats_interval_s : float, default 2.0
        Interval of the vLLM-format stats log line, s.
    stats_log : str or None, default None
        File the log is written to (truncated at startup) instead of stdout.
    flavor : str, default "vllm"
        Engine whose log lines and metric names the server writes (:data:`FLAVOR_NAMES`); the
        scheduler is the same whatever the flavour.
    metrics : bool, default True
        Serve ``GET /metrics``; False answers it 404, as an in-house server without one.
    api_key : str, default ""
        When set, every ``/v1/...`` request must carry ``Authorization: Bearer <api_key>``, else
        HTTP 401 ``{"error": "Unauthorized"}`` (vLLM's ``--api-key`` / ``VLLM_API_KEY``:
        ``AuthenticationMiddleware`` in ``vllm/entrypoints/openai/server_utils.py``);
        ``/health``, ``/metrics`` and the flavours' info routes stay open. Never logged.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    model_name: str = "sim-llama"
    max_model_len: int = 2048
    max_num_seqs: int = ENGINE_DEFAULTS["max_num_seqs"]
    max_num_batched_tokens: int = ENGINE_DEFAULTS["max_num_batched_tokens"]
    decode_base_ms: float = ENGINE_DEFAULTS["decode_base_ms"]
    decode_per_seq_ms: float = ENGINE_DEFAULTS["decode_per_seq_ms"]
    prefill_ms_per_token: float = ENGINE_DEFAULTS["prefill_ms_per_token"]
    kv_capacity_tokens: int = ENGINE_DEFAULTS["kv_capacity_tokens"]
    max_queue: int = ENGINE_DEFAULTS["max_queue"]
    reject_status: int = 429
    slowdown: float = ENGINE_DEFAULTS["slowdown"]
    effective_max_num_seqs: int = ENGINE_DEFAULTS["effective_max_num_seqs"]
    batching: str = ENGINE_DEFAULTS["batching"]
    batch_wait_ms: float = ENGINE_DEFAULTS["batch_wait_ms"]
    roofline: bool = ENGINE_DEFAULTS["roofline"]
    queue_timeout_ms: float = ENGINE_DEFAULTS["queue_timeout_ms"]
    enable_prefix_caching: bool = ENGINE_DEFAULTS["enable_prefix_caching"]
    block_size: int = ENGINE_DEFAULTS["block_size"]
    tokens_per_chunk: int = 1
    seed: int = 0
    log_stats_interval_s: float = 2.0
    stats_log: str | None = None
    flavor: str = "vllm"
    metrics: bool = True
    api_key: str = dataclasses.field(default="", repr=False)

    def __post_init__(self) -> None:
        """Check the settings.

        Raises
        ------
        ValueError
            When a count is below 1 (``max_model_len``, ``max_num_seqs``,
            ``max_num_batched_tokens``, ``tokens_per_chunk``, ``block_size``), a time is negative, ``slowdown`` or
            ``log_stats_interval_s`` is not positive, ``max_queue`` or ``effective_max_num_seqs``
            is negative, ``reject_status`` is not 429 or 503, ``batching`` is unknown, the port
            is out of 0..65535, or ``kv_capacity_tokens < max_model_len`` (one full-length
            request must fit, as vLLM demands at startup).
        """
        for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "tokens_per_chunk", "block_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in (
            "decode_base_ms",
            "decode_per_seq_ms",
            "prefill_ms_per_token",
            "batch_wait_ms",
            "queue_timeout_ms",
            "effective_max_num_seqs",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        if self.slowdown <= 0 or self.log_stats_interval_s <= 0:
            raise ValueError("slowdown and log_stats_interval_s must be positive")
        if self.max_queue < 0:
            raise ValueError(f"max_queue must not be negative, got {self.max_queue}")
        if self.reject_status not in REJECT_STATUSES:
            raise ValueError(f"reject_status must be one of {list(REJECT_STATUSES)}, got {self.reject_status}")
        if self.batching not in BATCHING_MODES:
            raise ValueError(f"batching must be one of {list(BATCHING_MODES)}, got {self.batching!r}")
        if self.queue_timeout_ms > 0 and self.flavor != "generic":
            raise ValueError("queue_timeout_ms needs flavor 'generic' (its POST /generate answers 504)")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        if self.flavor not in FLAVOR_NAMES:
            raise ValueError(f"unknown flavor {self.flavor!r}; known: {list(FLAVOR_NAMES)}")
        if self.kv_capacity_tokens < self.max_model_len:
            raise ValueError(
                f"kv_capacity_tokens={self.kv_capacity_tokens} is smaller than "
                f"max_model_len={self.max_model_len}: one full-length request would not fit"
            )


REJECT_STATUSES: tuple[int, ...] = (429, 503)
"""HTTP statuses a full queue may answer with (vLLM-style 429, TGI-style 503)."""

FLAVOR_NAMES: tuple[str, ...] = ("vllm", "sglang", "tgi", "llamacpp", "generic")
"""Engine flavours (``flavors/``): vLLM V1, SGLang, TGI, llama.cpp, a generic server."""

_DEFAULTS = SimConfig()


def _bool(text: str) -> bool:
    """``true/1/yes/on`` (any case) -> True; ``false/0/no/off`` -> False.

    >>> _bool("On"), _bool("0")
    (True, False)
    """
    value = text.strip().lower()
    if value not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return value in ("1", "true", "yes", "on")


# (flag, type, help) in the order they appear in --help; the field is the flag without "--".
_FLAGS: tuple[tuple[str, Callable[[str], Any], str], ...] = (
    ("--listen", str, "address to listen on"),
    ("--port", int, "TCP port; 0 picks a free one (printed at startup)"),
    ("--model-name", str, "served model name"),
    ("--max-model-len", int, "context window, tokens (prompt + max_tokens must fit)"),
    ("--max-num-seqs", int, "batch ceiling: sequences per engine step"),
    ("--max-num-batched-tokens", int, "token budget per engine step"),
    ("--decode-base-ms", float, "fixed time of one engine step, ms"),
    (
        "--decode-per-seq-ms",
        float,
        "extra step time per running sequence, ms; large against "
        "--decode-base-ms, throughput flattens while the batch "
        "still grows (compute-bound)",
    ),
    (
        "--roofline",
        _bool,
        "decode step time max(--decode-base-ms, --decode-per-seq-ms x B) "
        "instead of the sum: flat (memory-bound) up to base/per-seq "
        "sequences, then compute-bound",
    ),
    ("--prefill-ms-per-token", float, "extra step time per prompt token admitted, ms"),
    (
        "--kv-capacity-tokens",
        int,
        "KV cache capacity, tokens; too small for --max-num-seqs "
        "sequences, running ones are preempted back to waiting "
        "(vLLM V1 recompute, counted in vllm:num_preemptions)",
    ),
    (
        "--max-queue",
        int,
        "waiting requests beyond free batch slots before a rejection (--reject-status); 0 = unlimited",
    ),
    (
        "--reject-status",
        int,
        "HTTP status of a rejection when the queue is full: 429 (as TGI's "
        "'Model is overloaded') or 503 (Ray Serve back pressure, "
        "Ollama's full queue)",
    ),
    ("--slowdown", float, "multiplies all step times (a slower, e.g. quantized, variant)"),
    (
        "--effective-max-num-seqs",
        int,
        "batch ceiling the scheduler really applies while logs "
        "and metrics still announce --max-num-seqs (a setting "
        "that did not take effect; 1 = batching off); 0 = "
        "--max-num-seqs",
    ),
    (
        "--batching",
        str,
        "continuous (vLLM V1) or static (a batch forms only when none runs and "
        "runs to completion, like llama.cpp --no-cont-batching)",
    ),
    (
        "--batch-wait-ms",
        float,
        "static batching: once free, the batcher collects until "
        "--max-num-seqs requests wait or this long has passed, ms (a "
        "batch timeout); the generic flavour logs each batch's size, "
        "wait and queue",
    ),
    (
        "--queue-timeout-ms",
        float,
        "drop a request still queued this long after arriving, ms (generic flavour: "
        "504 'timed out in queue' and a log line); 0 = never",
    ),
    ("--block-size", int, "KV block size, tokens: the prefix cache reuses whole blocks only (vLLM --block-size)"),
    (
        "--tokens-per-chunk",
        int,
        "generated tokens written per SSE chunk (a server batching its flushes, or decoding "
        "several tokens a step: speculative decoding, MTP); engine timing unchanged",
    ),
    ("--seed", int, "seed of generated text and early-stop lengths"),
    ("--log-stats-interval-s", float, "interval of the vLLM V1 stats log line, s"),
    ("--stats-log", str, "write the log to this file (truncated) instead of stdout"),
    ("--flavor", str, "engine whose log lines and metric names are written: " + ", ".join(FLAVOR_NAMES)),
    ("--metrics", _bool, "serve GET /metrics; false answers it 404, as an in-house server without one"),
    (
        "--api-key",
        str,
        "require 'Authorization: Bearer KEY' on /v1/* (as vLLM); default: env VLLM_API_KEY, else none. "
        "Prefer the environment: a command line is visible to every local user",
    ),
)


_FIELD_OF_FLAG = {"--listen": "host"}
"""Flags whose :class:`SimConfig` field has another name (the listen address is ``host``)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the simulated server's options to ``parser``.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        Parser (or sub-parser) of ``llm-locust sim-server``; each flag's ``dest`` is the
        :class:`SimConfig` field of the same name.
    """
    from llm_locust.clihelp import add_deprecated_alias

    for flag, kind, help_text in _FLAGS:
        field = _FIELD_OF_FLAG.get(flag, flag[2:].replace("-", "_"))
        default = getattr(_DEFAULTS, field)
        metavar = "ADDRESS" if flag == "--listen" else None
        parser.add_argument(
            flag, type=kind, default=default, dest=field, metavar=metavar, help=f"{help_text} (default: {default})"
        )
    parser.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=_DEFAULTS.enable_prefix_caching,
        dest="enable_prefix_caching",
        help="vLLM's automatic prefix caching: leading full KV blocks computed for an earlier prompt are not "
        "prefilled again (vllm:prefix_cache_queries/hits, 'Prefix cache hit rate'); --no-enable-prefix-caching "
        f"as vLLM (default: {_DEFAULTS.enable_prefix_caching})",
    )
    add_deprecated_alias(parser, "--host", "--listen", dest="host")  # its name before --listen


def config_from_args(args: argparse.Namespace) -> SimConfig:
    """Build a :class:`SimConfig` from a namespace parsed with :func:`add_arguments`' flags.

    Raises
    ------
    ValueError
        When a setting is out of range (see :meth:`SimConfig.__post_init__`).
    """
    names = [f.name for f in dataclasses.fields(SimConfig)]
    values = {name: getattr(args, name) for name in names if hasattr(args, name)}
    values["api_key"] = values.get("api_key") or os.environ.get(API_KEY_ENV, "")
    return SimConfig(**values)


def non_default_args(config: SimConfig) -> dict[str, Any]:
    """The dict printed in the startup line ``non-default args: {...}``.

    Keys follow vLLM's names (``model_tag``, ``host``, ``port``, ``model``, ``max_model_len``,
    ``served_model_name``, ``max_num_seqs``, ``max_num_batched_tokens``), always present because
    the simulator sets them as a ``vllm serve`` command line would; the simulator-only settings
    (``decode_base_ms``, ``slowdown``, ...) follow when they differ from their defaults, except
    ``effective_max_num_seqs`` (a setting that did not take effect is not announced).

    >>> d = non_default_args(SimConfig(slowdown=2.0))
    >>> d["max_num_seqs"], d["slowdown"], "seed" in d
    (8, 2.0, False)
    """
    result: dict[str, Any] = {
        "model_tag": config.model_name,
        "host": config.host,
        "port": config.port,
        "model": config.model_name,
        "max_model_len": config.max_model_len,
        "served_model_name": [config.model_name],
        "max_num_seqs": config.max_num_seqs,
        "max_num_batched_tokens": config.max_num_batched_tokens,
    }
    for field in dataclasses.fields(SimConfig):
        if field.name in result or field.name in (
            "model_name", "stats_log", "flavor", "effective_max_num_seqs", "api_key"
        ):  # fmt: skip
            continue
        value = getattr(config, field.name)
        if value != getattr(_DEFAULTS, field.name):
            result[field.name] = value
    return result
