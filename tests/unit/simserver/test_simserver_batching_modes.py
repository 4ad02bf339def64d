"""The engine's batching variants: a ceiling that did not take effect, static batches with a batch
wait, the rejection status; and their settings."""

from __future__ import annotations

import pytest

from llm_locust.simserver.config import SimConfig, non_default_args
from llm_locust.simserver.engine import BatchEngine, QueueFullError, SimRequest


def req(name: str, *, arrival_s: float = 0.0, tokens: int = 3, prompt: int = 10) -> SimRequest:
    return SimRequest(
        request_id=name, prompt_tokens=prompt, max_tokens=tokens, stop_after_tokens=tokens, arrival_s=arrival_s
    )


def test_effective_ceiling_runs_one_at_a_time_while_max_num_seqs_says_eight():
    engine = BatchEngine(max_num_seqs=8, effective_max_num_seqs=1)
    for k in range(3):
        engine.add_request(req(f"r{k}", tokens=2))
    sizes = []
    while (result := engine.step()) is not None:
        sizes.append(len(result.plan.batch))
    assert sizes == [1] * 6  # 3 requests x 2 tokens, never two at once
    assert engine.ceiling == 1 and engine.max_num_seqs == 8


def test_effective_ceiling_bounds_the_queue_limit():
    engine = BatchEngine(max_num_seqs=8, effective_max_num_seqs=1, max_queue=1)
    engine.add_request(req("a"))
    engine.add_request(req("b"))  # 1 free slot + max_queue 1
    with pytest.raises(QueueFullError):
        engine.add_request(req("c"))


def test_static_batch_waits_to_fill_then_starts_at_the_deadline():
    engine = BatchEngine(max_num_seqs=4, batching="static", batch_wait_ms=100)
    engine.add_request(req("a", arrival_s=10.0))
    assert engine.begin_step(10.0) is None
    engine.add_request(req("b", arrival_s=10.03))
    assert engine.begin_step(10.05) is None
    assert engine.fill_deadline_s == pytest.approx(10.1)
    plan = engine.begin_step(10.1)
    assert plan.batch == ("a", "b") and plan.batch_wait_ms == pytest.approx(100.0)
    assert engine.fill_deadline_s is None


def test_static_batch_starts_at_once_when_full():
    engine = BatchEngine(max_num_seqs=2, batching="static", batch_wait_ms=1000)
    engine.add_request(req("a", arrival_s=5.0))
    engine.add_request(req("b", arrival_s=5.01))
    engine.add_request(req("c", arrival_s=5.02))
    plan = engine.begin_step(5.02)
    assert plan.batch == ("a", "b") and plan.batch_wait_ms == 0.0  # full at once: no fill wait


def test_a_batch_that_queued_behind_the_previous_one_reports_only_its_fill_wait():
    engine = BatchEngine(max_num_seqs=2, batching="static", batch_wait_ms=100)
    engine.add_request(req("a", tokens=2, arrival_s=0.0))
    engine.add_request(req("b", tokens=2, arrival_s=0.0))
    engine.end_step(engine.begin_step(0.0))
    engine.add_request(req("c", arrival_s=0.01))  # queues behind the running batch
    engine.end_step(engine.begin_step(0.03))  # a and b finish
    assert engine.begin_step(0.06) is None  # free from 0.06: collects until 0.06 + 0.1
    assert engine.fill_deadline_s == pytest.approx(0.16)
    engine.add_request(req("d", arrival_s=0.08))  # joins the batch being collected
    plan = engine.begin_step(0.16)
    assert plan.batch == ("c", "d") and plan.batch_wait_ms == pytest.approx(100.0)


def test_static_batch_runs_to_completion_before_the_next_forms():
    engine = BatchEngine(max_num_seqs=4, batching="static", batch_wait_ms=0)
    engine.add_request(req("a", tokens=1))
    engine.add_request(req("b", tokens=3))
    first = engine.begin_step(0.0)
    engine.add_request(req("c", arrival_s=0.0))
    engine.end_step(first)  # a finished; b still runs
    batches = []
    while (plan := engine.begin_step(1.0)) is not None:
        batches.append(plan.batch)
        engine.end_step(plan)
    # c joins only after b is done, although a slot was free from the second step on
    assert batches == [("b",), ("b",), ("c",), ("c",), ("c",)]


def test_continuous_batching_admits_into_a_running_batch():
    engine = BatchEngine(max_num_seqs=4)
    engine.add_request(req("a", tokens=3))
    engine.end_step(engine.begin_step())
    engine.add_request(req("b"))
    assert engine.begin_step().batch == ("a", "b")


@pytest.mark.parametrize(
    "field, value",
    [("reject_status", 500), ("batching", "dynamic"), ("batch_wait_ms", -1.0), ("effective_max_num_seqs", -1)],
)
def test_bad_settings_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        SimConfig(**{field: value})


def test_a_setting_that_did_not_take_effect_is_not_announced():
    args = non_default_args(SimConfig(max_num_seqs=8, effective_max_num_seqs=1, batching="static", batch_wait_ms=250.0))
    assert args["max_num_seqs"] == 8 and "effective_max_num_seqs" not in args
    assert (args["batching"], args["batch_wait_ms"]) == ("static", 250.0)


@pytest.mark.parametrize("roofline, expected_ms", [(False, [10, 16, 24]), (True, [8, 8, 16])])
def test_step_time_additive_or_roofline(roofline, expected_ms):
    # decode_base 8 ms, 2 ms a sequence: the roofline is flat up to 4 sequences, then 2 ms each
    times = []
    for batch in (1, 4, 8):
        engine = BatchEngine(
            max_num_seqs=8, decode_base_ms=8.0, decode_per_seq_ms=2.0, prefill_ms_per_token=0.0, roofline=roofline
        )
        for k in range(batch):
            engine.add_request(req(f"r{k}"))
        times.append(engine.begin_step().duration_ms)
    assert times == expected_ms
