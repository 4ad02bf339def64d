"""Each server family's own names for the settings the verdict recommends, and for the switches
that make it print the fields the verdict needs.

Sources: vLLM ``vllm/engine/arg_utils.py`` (``--max-num-seqs``, ``--max-num-batched-tokens``,
``--enable-chunked-prefill``, ``--gpu-memory-utilization``, ``--disable-log-stats``: stats
logging is on by default); llama.cpp ``tools/server/README.md`` (``-np, --parallel``,
``-c, --ctx-size``, ``--metrics``); TGI ``launcher/src/main.rs`` (``--max-batch-size``,
``--max-batch-total-tokens``, ``--max-concurrent-requests``, ``--max-waiting-tokens``,
``--cuda-memory-fraction``); SGLang ``server_args.py`` (``--max-running-requests``,
``--chunked-prefill-size``, ``--mem-fraction-static``, ``--enable-metrics``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class FamilyFlags:
    """Flag names of one server family ("" where the family has none)."""

    batch_ceiling: str
    token_budget: str
    chunked_prefill: str
    memory: str
    queue_limit: str
    batch_wait: str
    fields_hint: str
    """How to make the server report running/waiting/KV usage."""
    kv_hint: str = ""
    """When only the KV cache fields are missing: how to get them, or that the family has none
    ("" = :attr:`fields_hint`)."""


GENERIC = FamilyFlags(
    batch_ceiling="the server's max batch size setting",
    token_budget="the server's max tokens per batch setting",
    chunked_prefill="",
    memory="the server's KV cache memory setting",
    queue_limit="the server's queue limit",
    batch_wait="the server's batch wait (batch timeout / max wait) setting",
    fields_hint=(
        "where the server logs or serves them, a format file names them (--server-log-format: "
        "[[log.series]] groups running, waiting, kv_usage_ratio, with --server-log; or its [metrics] "
        "table, with --server-metrics-url)"
    ),
)

FLAGS: dict[str, FamilyFlags] = {
    "vllm": FamilyFlags(
        batch_ceiling="--max-num-seqs",
        token_budget="--max-num-batched-tokens",
        chunked_prefill="--enable-chunked-prefill",
        memory="--gpu-memory-utilization",
        queue_limit="",
        batch_wait="",
        fields_hint=(
            "vLLM prints Running/Waiting/KV cache usage in its stats log lines (on by "
            "default; --disable-log-stats turns them off) and serves them on /metrics"
        ),
    ),
    "llamacpp": FamilyFlags(
        batch_ceiling="--parallel (-np)",
        token_budget="--ctx-size (-c, shared by the slots)",
        chunked_prefill="",
        memory="--ctx-size (-c)",
        queue_limit="",
        batch_wait="",
        fields_hint=(
            "start llama-server with --metrics (llamacpp:requests_processing / "
            "requests_deferred on /metrics) and follow its log (--server-log)"
        ),
        kv_hint=(
            "llama-server b1-0c1e570 reports no KV cache usage (its /metrics has no "
            "llamacpp:kv_cache_usage_ratio, which older builds served, and its log none): rule "
            "kv_tokens does the token arithmetic against the startup line's n_ctx_slot instead"
        ),
    ),
    "tgi": FamilyFlags(
        batch_ceiling="--max-batch-size",
        token_budget="--max-batch-total-tokens",
        chunked_prefill="",
        memory="--cuda-memory-fraction",
        queue_limit="--max-concurrent-requests",
        batch_wait="--max-waiting-tokens",
        fields_hint=(
            "scrape TGI's /metrics (tgi_batch_current_size, tgi_queue_size) or follow "
            "its log at the default info level (--server-log)"
        ),
    ),
    "sglang": FamilyFlags(
        batch_ceiling="--max-running-requests",
        token_budget="--max-prefill-tokens",
        chunked_prefill="--chunked-prefill-size",
        memory="--mem-fraction-static",
        queue_limit="",
        batch_wait="",
        fields_hint=(
            "start SGLang with --enable-metrics (sglang:num_running_reqs, "
            "num_queue_reqs, token_usage) or follow its log (--server-log)"
        ),
    ),
    "triton": FamilyFlags(
        batch_ceiling="max_batch_size (model config / trtllm-build --max_batch_size)",
        token_budget="max_num_tokens (trtllm-build --max_num_tokens)",
        chunked_prefill="enable_chunked_context",
        memory="kv_cache_free_gpu_mem_fraction",
        queue_limit="",
        batch_wait="max_queue_delay_microseconds",
        fields_hint="scrape Triton's /metrics (nv_trt_llm_request_metrics)",
    ),
}
"""Family value (:class:`llm_locust.analysis.server.families.ServerFamily`) -> its flags."""


def flags_for(family: str | None) -> FamilyFlags:
    """The flags of ``family``; :data:`GENERIC` for an unknown or missing family."""
    return FLAGS.get((family or "").lower(), GENERIC)
