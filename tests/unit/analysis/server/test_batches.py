"""Batch evidence: batch lines -> the batches frame (serverlog/batchlines.py), and per-step
statistics (batches.py), with figures worked out by hand."""

import numpy as np
import pandas as pd
import pytest

from llm_locust.analysis.server.batches import BATCH_COLUMNS, STAT_COLUMNS, batch_stats, empty_batches
from llm_locust.analysis.server.families import ServerFamily
from llm_locust.analysis.server.serverlog.base import LogClock, LogText
from llm_locust.analysis.server.serverlog.batchlines import batch_events
from llm_locust.analysis.server.userformat import UserFormatError, load_user_format
from llm_locust.simserver.flavors.generic import FORMAT_TOML
from tests.serverlog_helpers import unix

T0 = unix(2025, 11, 30, 12, 0, 0)
CLOCK = LogClock(reference_s=T0, tz="UTC")
WINDOWS = pd.DataFrame(
    {"step": [0, 1], "target_users": [1.0, 8.0], "window_start_s": [0.0, 10.0], "window_end_s": [10.0, 20.0]}
)


def frame(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(BATCH_COLUMNS)).astype(
        {"t_s": float, "batch_size": float, "batch_wait_ms": float, "queue": float}
    )


def test_stats_per_step_by_hand():
    batches = frame(
        [
            (1.0, "batch", 1, 300.0, 0),
            (4.0, "batch", 1, 300.0, 0),
            (7.0, "batch", 2, 290.0, 0),
            (11.0, "batch", 4, 20.0, 2),
            (12.0, "batch", 4, 5.0, 4),
            (13.0, "batch", 3, 0.0, 6),
            (20.0, "batch", 9, 0.0, 9),  # at the end of the last window: left out
        ]
    )
    result = batch_stats(batches, WINDOWS, batch_wait_max_ms=300.0)
    assert list(result.columns) == list(STAT_COLUMNS)
    first, second = result.iloc[0], result.iloc[1]
    assert first["n_batches"] == 3 and second["n_batches"] == 3
    assert (first["batch_size_p50"], first["batch_size_max"]) == (1.0, 2.0)
    assert first["batch_size_mean"] == pytest.approx(4 / 3)
    # 290 >= 0.95 * 300 = 285: all three waited the whole timer
    assert first["batch_wait_at_max_ratio"] == 1.0 and second["batch_wait_at_max_ratio"] == 0.0
    assert (second["batch_wait_ms_p50"], second["batch_wait_ms_max"]) == (5.0, 20.0)
    # queue 2, 4, 6 at t 11, 12, 13: mean 4, slope 2 requests/s
    assert second["queue_mean"] == 4.0 and second["queue_slope_per_s"] == pytest.approx(2.0)
    assert first["queue_slope_per_s"] == 0.0


def test_without_a_configured_wait_or_rows_the_statistics_are_nan():
    result = batch_stats(frame([(1.0, "batch", 2, 10.0, np.nan)]), WINDOWS)
    assert np.isnan(result.loc[0, "batch_wait_at_max_ratio"])
    assert np.isnan(result.loc[0, "queue_mean"]) and np.isnan(result.loc[0, "queue_slope_per_s"])
    assert result.loc[1, "n_batches"] == 0 and np.isnan(result.loc[1, "batch_size_p50"])
    assert batch_stats(empty_batches(), WINDOWS)["n_batches"].tolist() == [0, 0]


def test_decode_batches_give_the_size_when_a_window_has_them():
    batches = frame([(1.0, "prefill", 1, np.nan, 3), (2.0, "decode", 6, np.nan, 2), (11.0, "prefill", 2, np.nan, 0)])
    result = batch_stats(batches, WINDOWS)
    assert result["batch_size_p50"].tolist() == [6.0, 2.0]
    assert result.loc[0, "queue_mean"] == 2.5


def test_missing_columns_raise():
    with pytest.raises(ValueError, match="batch_wait_ms"):
        batch_stats(pd.DataFrame({"t_s": [1.0], "phase": ["batch"], "batch_size": [1.0], "queue": [0.0]}), WINDOWS)


def test_user_format_batch_lines_and_the_configured_wait():
    fmt = load_user_format(FORMAT_TOML, source="deepinfer.toml")
    text = "\n".join(
        [
            "2025-11-30 12:00:00.000 INFO config: max_batch_size=4, kv_tokens=65536, "
            "batching=static, max_batch_wait_ms=300",
            "2025-11-30 12:00:01.250 INFO batcher: batch started size=1 wait=300.0ms queue=0",
            "2025-11-30 12:00:02.000 INFO scheduler: batch size=1, wait=300.0ms, queue=0",
            "2025-11-30 12:00:03.500 INFO batcher: batch started size=4 wait=12.5ms queue=7",
        ]
    )
    batches = batch_events(LogText.from_text(text), clock=CLOCK, family=ServerFamily.GENERIC, user_format=fmt)
    assert batches["t_s"].tolist() == [T0 + 1.25, T0 + 3.5]
    assert batches["batch_size"].tolist() == [1.0, 4.0]
    assert batches["batch_wait_ms"].tolist() == [300.0, 12.5]
    assert batches["queue"].tolist() == [0.0, 7.0] and set(batches["phase"]) == {"batch"}
    from llm_locust.analysis.server.serverlog import parse_server_log

    config = parse_server_log(LogText.from_text(text), clock=CLOCK, user_format=fmt).config
    assert (config.batch_ceiling, config.batch_wait_max_ms) == (4, 300.0)


def test_sglang_prefill_and_decode_lines():
    text = "\n".join(
        [
            "[11-30 12:00:00 TP0] Prefill batch, #new-seq: 2, #new-token: 64, #cached-token: 0, "
            "token usage: 0.01, #running-req: 1, #queue-req: 5, ",
            "[11-30 12:00:01 TP0] Decode batch, #running-req: 3, #token: 400, token usage: 0.05, "
            "cuda graph: True, gen throughput (token/s): 120.50, #queue-req: 4, ",
        ]
    )
    batches = batch_events(LogText.from_text(text), clock=CLOCK, family=ServerFamily.SGLANG)
    assert batches[["phase", "batch_size", "queue"]].values.tolist() == [["prefill", 2.0, 5.0], ["decode", 3.0, 4.0]]
    assert batches["t_s"].tolist() == [T0, T0 + 1.0]
    assert batches["batch_wait_ms"].isna().all()


def test_vllm_logs_no_batches():
    text = (
        "INFO 11-30 12:00:00 [loggers.py:335] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
        "Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, "
        "GPU KV cache usage: 0.1%, Prefix cache hit rate: 0.0%"
    )
    assert batch_events(LogText.from_text(text), clock=CLOCK, family=ServerFamily.VLLM).empty


def test_a_batch_pattern_needs_batch_size():
    with pytest.raises(UserFormatError, match="batch_size"):
        load_user_format("[[log.batches]]\npattern = 'wait=(?P<batch_wait_ms>\\d+)'\n")


def test_a_format_that_maps_the_batch_line_as_the_batch_table_only_is_read():
    # the documented mapping for a static batcher whose log has only its batch line: no
    # [[log.series]]; the startup line and the batches are still read with the format (it was
    # left to family detection, which knows no such log: no batch ceiling, no batches)
    series = "[[log.series]]\npattern = 'batch size=(?P<running>\\d+), wait=[\\d.]+ms, queue=(?P<waiting>\\d+)'\n"
    assert series in FORMAT_TOML
    fmt = load_user_format(FORMAT_TOML.replace(series, ""), source="batches-only.toml")
    lines = [
        "2025-11-30 12:00:00.000 INFO config: max_batch_size=4, kv_tokens=65536, batching=static, max_batch_wait_ms=300"
    ]
    lines += ["2025-11-30 12:00:03.500 INFO batcher: batch started size=4 wait=12.5ms queue=7"]
    log = LogText.from_text("\n".join(lines))
    from llm_locust.analysis.server.serverlog import keep_rule, parse_server_log

    # a long log keeps, past its head, the lines a pattern of the format matches: batch lines too
    assert set(fmt.batch_patterns) <= set(keep_rule(fmt).patterns)
    result = parse_server_log(log, clock=CLOCK, user_format=fmt)
    assert result.family is ServerFamily.GENERIC
    assert (result.config.batch_ceiling, result.config.batch_wait_max_ms) == (4, 300.0)
    batches = batch_events(log, clock=CLOCK, family=result.family, user_format=fmt)
    assert batches["batch_size"].tolist() == [4.0] and batches["queue"].tolist() == [7.0]
