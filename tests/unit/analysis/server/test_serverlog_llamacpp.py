"""llama.cpp log parser (llm_locust/analysis/server/serverlog/llamacpp.py), on the real llama-server log.

Formats: ``tools/server/server-common.h`` ``SLT_INF`` / ``SRV_INF`` prefixes,
``tools/server/server-context.cpp`` (``processing task``, ``stop processing``, ``print_timings``,
``initializing, n_slots = …``) and ``common/log.cpp``'s ``"%d.%02d.%03d.%03d "`` time since start,
as vendored in llama-cpp-python 0.3.36 (build b1-0c1e570), which wrote
``shared/fixtures/llama-cpp-b1-0c1e570/server.log``.
"""

import numpy as np
import pytest

from llm_locust.analysis.server.serverlog import LogClock, LogText, parse_server_log
from llm_locust.analysis.server.serverlog.llamacpp import relative_s
from tests.conftest import fixture_path
from tests.serverlog_helpers import mean, parse, unix, value_at

FIXTURE = ("llama-cpp-b1-0c1e570", "server.log")
T0 = unix(2025, 11, 30, 12, 0, 0)
"""Wall clock of the server's time zero in these tests."""


def captured(delays_s=(0.05, 0.2)):
    """The fixture log as if captured during a run started at T0: each line arrives after its
    relative stamp by a delay cycling through ``delays_s``; lines without a stamp arrive with
    the line before."""
    log = LogText.from_text(fixture_path(*FIXTURE).read_text())
    rel = relative_s(log, np.arange(log.n_lines))
    rel = np.maximum.accumulate(np.where(np.isfinite(rel), rel, 0.0))
    delays = np.resize(np.array(delays_s), log.n_lines)
    return LogText.from_text(fixture_path(*FIXTURE).read_text(), arrival_s=T0 + rel + delays)


def test_startup_config_of_the_real_log():
    result = parse_server_log(LogText.from_text(fixture_path(*FIXTURE).read_text()), clock=LogClock())
    config = result.config
    assert result.family.value == "llamacpp"
    assert (config.batch_ceiling, config.batch_ceiling_name) == (4, "n_slots")
    assert (config.max_model_len, config.kv_capacity_tokens) == (1024, 4096)
    assert config.sources["batch_ceiling"] == "server.log line 6"


def test_without_arrival_stamps_slot_lines_cannot_be_placed():
    result = parse_server_log(LogText.from_text(fixture_path(*FIXTURE).read_text()), clock=LogClock())
    assert result.data_lines == 240  # 120 launches + 120 releases
    assert len(result.unplaced_lines) == 240 and result.series.empty
    assert any("cannot be placed" in note for note in result.notes)


def test_busy_slots_from_launch_and_release_lines():
    result = parse_server_log(captured(), clock=LogClock(reference_s=T0))
    s = result.series
    assert result.time_source.startswith("the lines' relative stamps anchored")
    assert not result.unplaced_lines
    # slot 3 runs task 1 from 0.00.723.278 to 0.02.123.195 (placed at T0 + 0.05 + relative)
    assert value_at(s, "running", T0 + 0.05 + 0.70) == 0.0
    assert value_at(s, "running", T0 + 0.05 + 1.00) == 1.0
    assert value_at(s, "running", T0 + 0.05 + 0.723278) == 1.0
    # tasks 797 and 798 run together from 0.17.042.316 until 0.19.180.5xx
    assert value_at(s, "running", T0 + 0.05 + 18.0) == 2.0
    assert s["running"].max() == 4.0  # never more than n_slots
    assert s["waiting"].isna().all()  # deferred tasks are debug lines: no data, never zero
    # generation rate while task 1 decodes: 64 tokens / 1291.97 ms
    assert value_at(s, "gen_tps", T0 + 0.05 + 1.5) == pytest.approx(64 / 1.29197, rel=1e-6)


def test_cancelled_task_counts_as_a_dropped_request():
    result = parse_server_log(captured(), clock=LogClock(reference_s=T0))
    errors = result.errors
    assert errors["kind"].tolist() == ["dropped"] and errors["line"].tolist() == [137]
    assert errors["t_s"].iloc[0] == pytest.approx(T0 + 0.05 + 19.186682)


def test_relative_stamps_and_a_release_never_launched():
    lines = [
        "0.00.001.000 I srv    load_model: initializing, n_slots = 2, n_ctx_slot = 512, kv_unified = 'false'",
        "0.00.100.000 I slot      release: id  1 | task 9 | stop processing: n_tokens = 5, truncated = 0",
        "0.01.000.000 I slot launch_slot_: id  0 | task 10 | processing task, is_child = 0",
        "1.02.000.000 I slot      release: id  0 | task 10 | stop processing: n_tokens = 9, truncated = 0",
    ]
    arrival = T0 + np.array([0.001, 0.1, 1.0, 62.0]) + 0.01
    s = parse(lines, arrival_s=arrival, reference_s=T0).series
    assert mean(s, "running", T0 + 1.01, T0 + 62.01) == pytest.approx(1.0)
    assert mean(s, "running", T0 + 0.02, T0 + 1.0) == 0.0
