"""SGLang log parser (llm_locust/analysis/server/serverlog/sglang.py).

Lines are built from SGLang's own format strings:

- new punctuation: ``python/sglang/srt/managers/scheduler_metrics_mixin.py`` (sglang main, 2025),
  ``log_prefill_stats`` / ``log_decode_stats``;
- old punctuation: ``python/sglang/srt/managers/scheduler.py`` (sglang 0.3.x-0.4.x),
  ``log_prefill_stats`` / ``log_decode_stats``, and the earlier ``Prefill batch(mixed
  #running-req: …)`` form (``tp_worker.py``, 0.2.x);
- prefix ``[%(asctime)s{prefix}] `` with datefmt ``%m-%d %H:%M:%S`` (2025) or ``%Y-%m-%d
  %H:%M:%S`` (2024), ``python/sglang/srt/utils.py`` ``configure_logger``;
- startup: the scheduler's ``max_total_num_tokens=…`` line (``scheduler.py``).
"""

import pytest

from tests.serverlog_helpers import parse, unix, value_at

REF = unix(2025, 11, 30, 12, 0, 0)


def new_prefill(new_seq, new_token, usage, running, queue) -> str:
    return (
        f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_token}, #cached-token: 0, "
        f"token usage: {usage:.2f}, #running-req: {running}, #queue-req: {queue}, "
    )


def new_decode(running, tokens, usage, gen, queue) -> str:
    return (
        f"Decode batch, #running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, "
        f"cuda graph: True, gen throughput (token/s): {gen:.2f}, #queue-req: {queue}, "
    )


def old_decode(running, tokens, usage, gen, queue) -> str:
    return (
        f"Decode batch. #running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, "
        f"gen throughput (token/s): {gen:.2f}, #queue-req: {queue}"
    )


def old_prefill(new_seq, new_token, usage, running, queue) -> str:
    return (
        f"Prefill batch. #new-seq: {new_seq}, #new-token: {new_token}, #cached-token: 0, "
        f"token usage: {usage:.2f}, #running-req: {running}, #queue-req: {queue}"
    )


def test_new_punctuation_prefill_and_decode():
    lines = [
        f"[11-30 12:00:00 TP0] {new_prefill(2, 64, 0.01, 1, 5)}",
        f"[11-30 12:00:01 TP0] {new_decode(3, 400, 0.05, 120.5, 5)}",
    ]
    result = parse(lines, reference_s=REF)
    s = result.series
    assert result.family.value == "sglang" and result.data_lines == 2
    assert (s["running"].iloc[0], s["waiting"].iloc[0]) == (3.0, 5.0)  # 1 decoding + 2 admitted
    assert (s["running"].iloc[1], s["kv_usage_ratio"].iloc[1], s["gen_tps"].iloc[1]) == (3.0, 0.05, 120.5)
    assert s["t_s"].tolist()[:2] == [REF, REF + 1.0]


def test_old_punctuation_and_dated_prefix():
    lines = [
        f"[2024-10-12 10:40:23 TP0] {old_prefill(1, 6, 0.0, 0, 0)}",
        f"[2024-10-12 10:40:25 TP0] {old_decode(1, 40, 0.0, 5.43, 0)}",
        "[2024-10-12 10:40:26 TP0] Prefill batch(mixed #running-req: 2). #new-seq: 1, "
        "#new-token: 9, #cached-token: 0, cache hit rate: 0.00%, #queue-req: 4",
    ]
    s = parse(lines, reference_s=unix(2024, 10, 12)).series
    assert s["t_s"].iloc[0] == unix(2024, 10, 12, 10, 40, 23)
    assert s["running"].tolist()[:3] == [1.0, 1.0, 3.0]
    assert s["waiting"].tolist()[:3] == [0.0, 0.0, 4.0]
    assert s["gen_tps"].iloc[1] == 5.43


def test_data_parallel_ranks_are_summed():
    lines = [
        f"[11-30 12:00:00 DP0 TP0] {new_decode(2, 10, 0.1, 50, 1)}",
        f"[11-30 12:00:00 DP1 TP0] {new_decode(3, 10, 0.3, 50, 0)}",
        f"[11-30 12:00:02 DP0 TP0] {new_decode(2, 10, 0.1, 50, 1)}",
        f"[11-30 12:00:02 DP1 TP0] {new_decode(3, 10, 0.3, 50, 0)}",
    ]
    result = parse(lines, reference_s=REF)
    assert value_at(result.series, "running", REF + 1) == 5.0
    assert value_at(result.series, "waiting", REF + 1) == 1.0
    assert value_at(result.series, "kv_usage_ratio", REF + 1) == pytest.approx(0.2)


def test_startup_config():
    lines = [
        "[11-30 11:59:00 TP0] max_total_num_tokens=178128, chunked_prefill_size=8192, "
        "max_prefill_tokens=16384, max_running_requests=48, context_len=32768, "
        "available_gpu_mem=9.57 GB",
        f"[11-30 12:00:00 TP0] {new_decode(1, 10, 0.0, 5, 0)}",
    ]
    config = parse(lines, reference_s=REF).config
    assert (config.batch_ceiling, config.batch_ceiling_name) == (48, "max_running_requests")
    assert (config.kv_capacity_tokens, config.token_budget, config.max_model_len) == (178128, 16384, 32768)
    assert config.chunked_prefill is True
