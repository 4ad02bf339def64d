"""TGI log parser (llm_locust/analysis/server/serverlog/tgi.py).

Lines are built from Text Generation Inference's format strings: ``router/src/server.rs``
(TGI 2.x-3.x, ``generate_stream_internal``: the span records ``total_time``,
``validation_time``, ``queue_time``, ``inference_time``, ``time_per_token`` as
``format!("{:?}", Duration)``, then ``tracing::info!(parent: &span, "Success")``), rendered by
tracing-subscriber's text and ``--json-output`` formatters; the launcher's ``Args { … }``
(``launcher/src/main.rs``) and ``"Setting max batch total tokens to {}"`` (``router``).
"""

import json

import pytest

from llm_locust.analysis.server.serverlog.tgi import duration_s
from tests.serverlog_helpers import mean, parse, unix, value_at

T0 = unix(2025, 11, 30, 12, 0, 0)


def iso(t_s: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(t_s, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def text_success(end_s: float, queue: str, inference: str, per_token: str) -> str:
    span = (
        f"generate_stream{{parameters=GenerateParameters {{ best_of: None, max_new_tokens: "
        f'Some(64) }} total_time="2.1s" validation_time="312µs" queue_time="{queue}" '
        f'inference_time="{inference}" time_per_token="{per_token}" seed="None"}}'
    )
    return (
        f"{iso(end_s)}  INFO compat_generate{{default_return_full_text=false}}:{span}: "
        f"text_generation_router::server: router/src/server.rs:497: Success"
    )


def json_success(end_s: float, queue: str, inference: str, per_token: str) -> str:
    span = {
        "inference_time": inference,
        "queue_time": queue,
        "seed": "None",
        "time_per_token": per_token,
        "total_time": "2.1s",
        "validation_time": "312µs",
        "name": "generate_stream",
    }
    return json.dumps(
        {
            "timestamp": iso(end_s),
            "level": "INFO",
            "message": "Success",
            "target": "text_generation_router::server",
            "filename": "router/src/server.rs",
            "line_number": 497,
            "span": span,
            "spans": [{"name": "compat_generate"}, span],
        }
    )


def test_rust_durations():
    assert duration_s("1.500123s") == pytest.approx(1.500123)
    assert duration_s("23.5ms") == pytest.approx(0.0235)
    assert duration_s("41µs") == pytest.approx(41e-6) and duration_s("41us") == pytest.approx(41e-6)
    assert duration_s("800ns") == pytest.approx(8e-7)


@pytest.mark.parametrize("render", [text_success, json_success])
def test_requests_become_running_and_waiting_intervals(render):
    # A: queued 0.5 s, runs [T0+1, T0+3); B: queued [T0+1.5, T0+2.5), runs [T0+2.5, T0+4)
    lines = [
        f"{iso(T0)}  INFO text_generation_router::server: router/src/server.rs:1889: Connected",
        render(T0 + 3.0, "500ms", "2s", "20ms"),
        render(T0 + 4.0, "1s", "1.5s", "25ms"),
    ]
    result = parse(lines, reference_s=T0)
    s = result.series
    assert result.family.value == "tgi" and result.data_lines == 2
    assert value_at(s, "running", T0 + 0.7) == 0.0 and value_at(s, "waiting", T0 + 0.7) == 1.0
    assert value_at(s, "running", T0 + 2.0) == 1.0 and value_at(s, "waiting", T0 + 2.0) == 1.0
    assert value_at(s, "running", T0 + 2.7) == 2.0 and value_at(s, "waiting", T0 + 2.7) == 0.0
    assert value_at(s, "running", T0 + 3.5) == 1.0
    assert value_at(s, "gen_tps", T0 + 2.7) == pytest.approx(1 / 0.020 + 1 / 0.025)
    # [T0+1, T0+4): running 1 for 1.5 s, 2 for 0.5 s, 1 for 1 s -> 3.5 / 3
    assert mean(s, "running", T0 + 1.0, T0 + 4.0) == pytest.approx(3.5 / 3.0)


def test_startup_args_one_line_and_pretty():
    one_line = (
        f'{iso(T0)}  INFO text_generation_launcher: Args {{ model_id: "m", '
        "max_concurrent_requests: 128, max_batch_prefill_tokens: Some(4096), "
        "max_batch_total_tokens: None, max_waiting_tokens: 20, max_batch_size: Some(8), "
        "max_total_tokens: Some(2048) }"
    )
    effective = (
        f"{iso(T0)}  INFO text_generation_router::server: router/src/server.rs:1651: "
        "Setting max batch total tokens to 16000"
    )
    config = parse([one_line, effective], reference_s=T0).config
    assert (config.batch_ceiling, config.batch_ceiling_name) == (8, "max_batch_size")
    assert (config.token_budget, config.token_budget_name) == (16000, "max_batch_total_tokens")
    assert config.max_model_len == 2048
    pretty = [
        f"{iso(T0)}  INFO text_generation_launcher: Args {{",
        '    model_id: "m",',
        "    max_concurrent_requests: 128,",
        "    max_batch_size: Some(",
        "        4,",
        "    ),",
        "    max_batch_total_tokens: Some(",
        "        9000,",
        "    ),",
        "}",
    ]
    config = parse(pretty, reference_s=T0, family="tgi").config
    assert config.token_budget == 9000


@pytest.mark.parametrize("skew_s", [5.0, -10.0])
def test_a_server_clock_off_is_moved_to_the_capture_clock(skew_s):
    # the TGI host's clock is off by skew_s; each line arrives 10-80 ms after it was written
    true_ends = [T0 + 3.0, T0 + 4.0, T0 + 6.0]
    delays = [0.08, 0.01, 0.03]
    lines = [
        text_success(true_ends[0] + skew_s, "500ms", "2s", "20ms"),
        text_success(true_ends[1] + skew_s, "1s", "1.5s", "25ms"),
        text_success(true_ends[2] + skew_s, "0ns", "1s", "20ms"),
    ]
    result = parse(lines, reference_s=T0, arrival_s=[t + d for t, d in zip(true_ends, delays, strict=True)])
    s = result.series
    # moved by the quickest line's lag (10 ms): every interval 10 ms after its true place
    assert value_at(s, "running", T0 + 1.05) == 1.0 and value_at(s, "waiting", T0 + 0.6) == 1.0
    assert value_at(s, "running", T0 + 0.95) == 0.0
    assert value_at(s, "running", T0 + 2.7) == 2.0
    assert value_at(s, "running", T0 + 5.5) == 1.0 and value_at(s, "running", T0 + 6.005) == 1.0
    assert "moved" in result.time_source and f"{-skew_s + 0.01:+.3f}" in result.time_source


def test_a_server_clock_that_agrees_keeps_its_exact_stamps():
    # same clock, lines arriving 1-90 ms late: the own stamps stay as printed (exact), not moved
    ends = [T0 + 3.0, T0 + 4.0]
    lines = [text_success(ends[0], "500ms", "2s", "20ms"), text_success(ends[1], "1s", "1.5s", "25ms")]
    result = parse(lines, reference_s=T0, arrival_s=[ends[0] + 0.09, ends[1] + 0.001])
    assert value_at(result.series, "running", T0 + 1.0) == 1.0  # 1 s = 3.0 - 2 s, to the microsecond
    assert value_at(result.series, "running", T0 + 0.9999) == 0.0
    assert "moved" not in result.time_source
