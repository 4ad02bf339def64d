"""The batching-config check (llm_locust/analysis/verdict/configcheck.py): configured vs observed vs theoretical."""

import numpy as np
import pandas as pd
import pytest

from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.server.series import series_from_breakpoints
from llm_locust.analysis.verdict.configcheck import check_config

T0 = 1_700_000_000.0


def running(*values, step_s=10.0):
    t = T0 + step_s * np.arange(len(values))
    return series_from_breakpoints({"running": (t, np.array(values, float))}, source="metrics")


def table(users, waiting):
    return pd.DataFrame({"target_users": [float(u) for u in users], "server_waiting": [float(w) for w in waiting]})


def config(ceiling=4, **kw):
    return ServerConfig(
        engine="vllm",
        batch_ceiling=ceiling,
        batch_ceiling_name="max_num_seqs",
        sources={"batch_ceiling": "server.log line 8"},
        **kw,
    )


def check(cfg, series, tab, **kw):
    return check_config(cfg, series, tab, window_start_s=T0, window_end_s=T0 + 100, **kw)


def test_yes_when_running_reaches_the_ceiling():
    result = check(
        config(kv_capacity_tokens=32768), running(1, 2, 4, 4), table([1, 2, 4, 8], [0, 0, 0, 4]), request_tokens=96
    )
    assert result.took_effect is True
    assert result.line == (
        "Batching settings took effect: yes, because running reached the "
        "configured max_num_seqs = 4 (highest running 4)"
    )
    assert result.theoretical_kv_requests == pytest.approx(32768 / 96)
    assert "configured: max_num_seqs = 4 [server.log line 8]" in result.details


def test_no_when_requests_wait_below_the_ceiling_and_the_kv_cache_is_the_limit():
    result = check(
        config(ceiling=8, kv_capacity_tokens=300),
        running(1, 2, 3, 3),
        table([1, 2, 4, 8], [0, 0, 1, 5]),
        request_tokens=96,
    )
    assert result.took_effect is False
    assert "requests waited (up to 5.00) while running stayed at or below 3" in result.because
    assert "the KV cache holds only 3.1 requests" in result.because


def test_no_when_running_exceeds_the_configured_ceiling():
    result = check(config(ceiling=4), running(1, 2, 4, 8), table([1, 2, 4, 8], [0, 0, 0, 0]))
    assert result.took_effect is False and "above the configured max_num_seqs = 4" in result.because


def test_cannot_tell_when_the_load_never_filled_the_batch():
    result = check(config(ceiling=256), running(1, 2, 4), table([1, 2, 4], [0, 0, 0]))
    assert result.took_effect is None and result.answer == "cannot tell"
    assert "the load never filled the batch (highest load tested 4 users)" in result.because


def test_batching_off_without_a_configured_ceiling():
    result = check(ServerConfig(), running(1, 1, 1), table([1, 2, 4], [0, 1, 3]))
    assert result.took_effect is False and "batching is not in effect" in result.because


def test_no_server_data_cannot_tell():
    result = check(config(), running(), table([1, 2], [float("nan")] * 2))
    assert result.took_effect is None and "not available" in result.because


def test_a_microsecond_blip_is_not_a_new_highest():
    t = T0 + np.array([0.0, 5.0, 5.000001, 20.0])
    series = series_from_breakpoints({"running": (t, np.array([2.0, 3.0, 2.0, 2.0]))}, source="log")
    result = check(config(ceiling=2), series, table([1, 2, 4], [0, 0, 2]))
    assert result.took_effect is True and result.observed_max_running == 2.0


def test_a_configured_ceiling_of_one_is_batching_off():
    # running reached the configured 1, which used to read "took effect: yes"
    result = check(config(ceiling=1), running(1, 1, 1, 1), table([1, 2, 4, 8], [0, 1, 3, 7]))
    assert result.took_effect is False
    assert result.because == "the configured max_num_seqs = 1 runs one request at a time: batching is off"


def test_the_engines_own_concurrency_figure_never_prints_an_unknown_length():
    # /metrics vllm:cache_config_info alone (no server log): the figure, but no max_model_len
    alone = check(config(reported_max_concurrency=3.2), running(1, 2, 4, 4), table([1, 2, 4, 8], [0, 0, 0, 4]))
    [line] = [d for d in alone.details if d.startswith("the engine's own figure")]
    assert line == (
        "the engine's own figure: 3.20x requests at its full context length (max_model_len, not reported "
        "without the startup log)"
    )
    assert all("?" not in d for d in alone.details)
    # with the startup log's max_model_len: the length itself
    logged = check(
        config(reported_max_concurrency=3.2, max_model_len=4096), running(1, 2, 4, 4), table([1, 2, 4, 8], [0, 0, 0, 4])
    )
    assert "the engine's own figure: 3.20x requests of 4096 tokens" in logged.details


def test_cannot_tell_below_the_ceiling_with_a_queue_does_not_say_nothing_waited():
    # found on the embedded server (max_num_seqs 32, a KV cache of 500 tokens, 16 users): it said
    # "running peaked at 14 ... without requests waiting" while 6.26 requests waited
    result = check(config(ceiling=32), running(1, 4, 8, 14), table([2, 4, 8, 16], [0, 0, 0, 6.26]))
    assert result.took_effect is None
    assert "without requests waiting" not in result.because
    assert "while requests waited (up to 6.26)" in result.because
    assert "the load never reached the ceiling (highest load tested 16 users)" in result.because


def test_a_static_batchers_batch_lines_give_the_highest_running_when_the_log_has_no_series():
    """The in-house example of docs/own-server.md: a format file with [[log.batches]] only (no
    running series); it read 'cannot tell, because the server's running count is not available'
    beside a step table whose running came from those batch lines."""
    no_series = running()[:0]
    batches = pd.DataFrame({"t_s": T0 + np.array([-5.0, 10, 20, 30, 150]), "batch_size": [9.0, 1, 8, 8, 12]})
    result = check(config(ceiling=8), no_series, table([1, 8, 16], [0, 0, 0]), batches=batches)
    # 9 before the run and 12 after it are not the run's; within it the largest batch is 8
    assert result.took_effect is True and result.observed_max_running == 8
    assert "observed: highest running 8 (the largest batch of the log's batch lines); " in " ".join(result.details)
    assert check(config(ceiling=8), no_series, table([1, 8, 16], [0, 0, 0])).took_effect is None  # without them
