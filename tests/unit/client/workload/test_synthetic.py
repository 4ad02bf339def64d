"""Exact prompt lengths: calibration against counters whose counts are known by hand."""

from __future__ import annotations

import random
import statistics

import pytest

from llm_locust.client.workload.synthetic import (
    CANDIDATE_WORDS,
    LEAD,
    CalibrationError,
    SyntheticPrompts,
    calibrate,
    sample_lengths,
)

TEMPLATE_TOKENS = 7


def picky_count(content: str) -> int:
    """A made-up tokenizer: words split at spaces; a word with an 'e' in it is two tokens, any
    other one token; plus 7 template tokens."""
    return TEMPLATE_TOKENS + sum(2 if "e" in word else 1 for word in content.split())


def test_calibration_keeps_only_one_token_words_and_the_base_is_the_lead_plus_template():
    calibration = calibrate(picky_count, method="test")

    assert calibration.base_tokens == TEMPLATE_TOKENS + 1  # "Words:" has no 'e'
    assert len(calibration.words) == 16
    assert all("e" not in word for word in calibration.words)
    expected = [w for w in CANDIDATE_WORDS if "e" not in w][:16]
    assert list(calibration.words) == expected


def test_every_built_prompt_counts_its_target_with_the_counter():
    calibration = calibrate(picky_count, method="test")
    source = SyntheticPrompts(calibration, input_tokens=300, stddev_tokens=40, seed=3, stream="1", max_tokens=9)

    items = [source.next_request() for _ in range(200)]

    assert all(picky_count(item.prompt) == item.prompt_tokens_target for item in items)
    assert all(item.max_tokens == 9 for item in items)
    assert len({item.prompt for item in items}) == 200
    targets = [item.prompt_tokens_target for item in items]
    assert 290 < statistics.mean(targets) < 310 and 30 < statistics.stdev(targets) < 50


def test_a_shared_prefix_is_common_to_every_process_and_the_rest_differs():
    calibration = calibrate(picky_count, method="test")
    a = SyntheticPrompts(calibration, input_tokens=100, shared_prefix_tokens=40, seed=5, stream="0")
    b = SyntheticPrompts(calibration, input_tokens=100, shared_prefix_tokens=40, seed=5, stream="1")
    prompts = [source.next_request().prompt.split() for source in (a, b, a)]

    assert prompts[0][0] == LEAD
    assert prompts[0][: 1 + 40] == prompts[1][: 1 + 40] == prompts[2][: 1 + 40]
    assert prompts[0][41:] != prompts[1][41:] and prompts[0][41:] != prompts[2][41:]
    assert all(picky_count(" ".join(p)) == 100 for p in prompts)


def test_the_same_seed_and_stream_build_the_same_prompts():
    calibration = calibrate(picky_count, method="test")
    first, second = (SyntheticPrompts(calibration, input_tokens=50, seed=1, stream="2") for _ in range(2))
    assert [first.next_request() for _ in range(5)] == [second.next_request() for _ in range(5)]


def test_a_counter_that_merges_across_spaces_is_refused():
    def merging(content: str) -> int:  # one token per 10 characters, spaces included
        return 3 + len(content) // 10

    with pytest.raises(CalibrationError):
        calibrate(merging, method="test")


def test_a_length_below_the_template_is_refused():
    calibration = calibrate(picky_count, method="test")
    with pytest.raises(ValueError, match="--input-tokens 5 is shorter than .* 8 tokens"):
        SyntheticPrompts(calibration, input_tokens=5)
    with pytest.raises(ValueError, match="shared prefix"):
        SyntheticPrompts(calibration, input_tokens=20, shared_prefix_tokens=15)


def test_lengths_are_clipped_at_the_shortest_buildable_prompt():
    rng = random.Random(0)
    lengths = [sample_lengths(rng, 10, 50.0, 8) for _ in range(500)]
    assert min(lengths) == 8
    assert sum(1 for n in lengths if n == 8) > 100  # about half of N(10, 50) lies below 8
