"""The pure scheduler model, stepped by hand; every expected number is worked out in comments
from the formulas (step ms = base + per_seq * B + prefill_ms_per_token * prefilled tokens)."""

from __future__ import annotations

import pytest

from llm_locust.simserver.engine import (
    BatchEngine,
    FinishReason,
    QueueFullError,
    SimRequest,
    TokenOutput,
)


def make_engine(**overrides) -> BatchEngine:
    params = dict(
        max_num_seqs=8,
        max_num_batched_tokens=8192,
        decode_base_ms=20.0,
        decode_per_seq_ms=1.0,
        prefill_ms_per_token=0.1,
        kv_capacity_tokens=1000,
    )
    params.update(overrides)
    return BatchEngine(**params)


def req(request_id: str, *, prompt: int = 10, max_tokens: int = 3, stop: int | None = None):
    return SimRequest(
        request_id=request_id,
        prompt_tokens=prompt,
        max_tokens=max_tokens,
        stop_after_tokens=max_tokens if stop is None else stop,
    )


def test_single_request_step_times_tokens_and_kv():
    engine = make_engine()
    engine.add_request(req("a", prompt=10, max_tokens=3))
    assert (engine.num_running, engine.num_waiting) == (0, 1)

    first = engine.step()
    # admission step: 20 + 1*1 + 0.1*10 prompt tokens = 22 ms; first token at its end
    assert first.plan.admitted == ("a",)
    assert first.plan.prefill_tokens == 10
    assert first.plan.duration_ms == pytest.approx(22.0)
    assert first.outputs == (TokenOutput(request_id="a", token_index=0),)
    assert (engine.num_running, engine.num_waiting) == (1, 0)
    assert engine.kv_used_tokens == 11  # 10 prompt + 1 generated
    assert engine.kv_usage_ratio == pytest.approx(11 / 1000)

    second = engine.step()
    assert second.plan.duration_ms == pytest.approx(21.0)  # decode only: 20 + 1*1
    third = engine.step()
    assert third.outputs == (TokenOutput(request_id="a", token_index=2, finish_reason=FinishReason.LENGTH),)
    assert engine.step() is None
    assert (engine.prompt_tokens_total, engine.generation_tokens_total) == (10, 3)
    assert engine.finished_total[FinishReason.LENGTH] == 1
    assert engine.kv_used_tokens == 0


def test_batch_ceiling_is_fcfs():
    engine = make_engine(max_num_seqs=2)
    for name in "abc":
        engine.add_request(req(name, prompt=10, max_tokens=2))

    step1 = engine.step()
    assert step1.plan.admitted == ("a", "b")
    assert step1.plan.duration_ms == pytest.approx(24.0)  # 20 + 2*1 + 0.1*20
    assert (engine.num_running, engine.num_waiting) == (2, 1)

    step2 = engine.step()
    assert step2.plan.duration_ms == pytest.approx(22.0)  # 20 + 2*1
    assert [(o.request_id, o.finish_reason) for o in step2.outputs] == [
        ("a", FinishReason.LENGTH),
        ("b", FinishReason.LENGTH),
    ]

    step3 = engine.step()
    assert step3.plan.admitted == ("c",)
    assert step3.plan.duration_ms == pytest.approx(22.0)  # 20 + 1*1 + 0.1*10


def test_output_rate_saturates_at_max_num_seqs():
    engine = make_engine(max_num_seqs=8)
    for i in range(12):
        engine.add_request(req(f"r{i}", prompt=10, max_tokens=5))
    step1 = engine.step()
    assert len(step1.plan.admitted) == 8
    assert step1.plan.duration_ms == pytest.approx(36.0)  # 20 + 8*1 + 0.1*80
    assert engine.num_waiting == 4
    step2 = engine.step()
    assert step2.plan.duration_ms == pytest.approx(28.0)  # 20 + 8*1, no admission (batch full)
    assert len(step2.outputs) == 8
    # tokens/s of a pure decode step rises with B: 1000/21 < 8000/28
    assert 8 * 1000 / step2.plan.duration_ms > 1000 / 21.0


def test_token_budget_blocks_admission():
    engine = make_engine(max_num_batched_tokens=25)
    for name in "abc":
        engine.add_request(req(name, prompt=10, max_tokens=3))
    step1 = engine.step()
    assert step1.plan.admitted == ("a", "b")  # 10 + 10 fit in 25; c's 10 > the 5 left
    assert (engine.num_running, engine.num_waiting) == (2, 1)
    step2 = engine.step()
    assert step2.plan.admitted == ("c",)  # budget 25 - 2 decode tokens = 23 >= 10
    assert step2.plan.duration_ms == pytest.approx(24.0)  # 20 + 3*1 + 0.1*10


def test_prompt_larger_than_budget_runs_alone():
    engine = make_engine(max_num_batched_tokens=5)
    engine.add_request(req("a", prompt=10, max_tokens=2))
    engine.add_request(req("b", prompt=10, max_tokens=2))
    assert engine.step().plan.admitted == ("a",)
    assert engine.step().plan.admitted == ()  # b waits: 10 > 5 - 1
    assert engine.step().plan.admitted == ("b",)


def test_kv_capacity_blocks_admission():
    engine = make_engine(kv_capacity_tokens=100)
    engine.add_request(req("a", prompt=60, max_tokens=10))
    engine.add_request(req("b", prompt=60, max_tokens=10))
    engine.step()
    # a holds 61 of 100; b needs 61 > 100 - 61 - 1 free
    assert (engine.num_running, engine.num_waiting) == (1, 1)
    assert engine.kv_usage_ratio == pytest.approx(0.61)


def test_preemption_recomputes_and_keeps_output():
    engine = make_engine(kv_capacity_tokens=100)
    engine.add_request(req("a", prompt=45, max_tokens=10))
    engine.add_request(req("b", prompt=45, max_tokens=10))
    step1 = engine.step()
    assert step1.plan.admitted == ("a", "b")  # 46 + 46 <= 100
    assert step1.plan.duration_ms == pytest.approx(31.0)  # 20 + 2 + 0.1*90
    for _ in range(4):  # steps 2-5: KV 94, 96, 98, 100
        engine.step()
    assert engine.kv_used_tokens == 100

    step6 = engine.step()  # 100 + 2 > 100: b (admitted last) is preempted, nothing admitted
    assert step6.plan.preempted == ("b",)
    assert step6.plan.batch == ("a",)
    assert step6.plan.duration_ms == pytest.approx(21.0)
    assert engine.num_preemptions_total == 1
    assert engine.kv_used_tokens == 51  # a: 45 + 6
    assert engine.num_waiting == 1

    for _ in range(4):  # steps 7-10: b needs 45+5+1 = 51 > free KV; a finishes at step 10
        assert engine.step().plan.admitted == ()
    assert engine.finished_total[FinishReason.LENGTH] == 1

    step11 = engine.step()
    assert step11.plan.admitted == ("b",)
    assert step11.plan.prefill_tokens == 50  # recompute of prompt 45 + 5 tokens already sent
    assert step11.plan.duration_ms == pytest.approx(26.0)  # 20 + 1 + 0.1*50
    assert step11.outputs == (TokenOutput(request_id="b", token_index=5),)
    results = [engine.step() for _ in range(4)]
    assert results[-1].outputs == (TokenOutput(request_id="b", token_index=9, finish_reason=FinishReason.LENGTH),)
    assert engine.step() is None
    assert engine.prompt_tokens_total == 90  # a recompute is not counted again
    assert engine.generation_tokens_total == 20


def test_early_stop_finishes_with_stop():
    engine = make_engine()
    engine.add_request(req("a", max_tokens=5, stop=2))
    engine.step()
    assert engine.step().outputs[0].finish_reason is FinishReason.STOP
    assert engine.finished_total[FinishReason.STOP] == 1
    assert not engine.has_work


def test_abort_waiting_running_and_mid_step():
    engine = make_engine(max_num_seqs=1)
    engine.add_request(req("a", max_tokens=5))
    engine.add_request(req("b", max_tokens=5))
    engine.step()
    assert engine.abort_request("b") is True  # waiting
    assert engine.num_waiting == 0
    plan = engine.begin_step()
    assert engine.abort_request("a") is True  # running, mid-step
    assert engine.end_step(plan).outputs == ()
    assert engine.kv_used_tokens == 0
    assert engine.abort_request("a") is False
    assert engine.finished_total[FinishReason.ABORT] == 2


def test_max_queue_counts_beyond_free_slots():
    engine = make_engine(max_num_seqs=1, max_queue=1)
    engine.add_request(req("a"))
    engine.add_request(req("b"))  # 1 waiting < 1 + 1 free slot
    with pytest.raises(QueueFullError):
        engine.add_request(req("c"))  # 2 waiting >= 1 + 1
    engine.step()  # a runs, b waits, no free slot
    with pytest.raises(QueueFullError):
        engine.add_request(req("d"))  # 1 waiting >= 1 + 0


def test_invalid_use_raises():
    engine = make_engine(kv_capacity_tokens=100)
    with pytest.raises(ValueError):
        engine.add_request(req("a", prompt=95, max_tokens=10))  # 105 > 100 could never finish
    with pytest.raises(ValueError):
        engine.add_request(req("a", max_tokens=3, stop=4))
    engine.add_request(req("a"))
    engine.begin_step()
    with pytest.raises(RuntimeError):
        engine.begin_step()


def test_slowdown_multiplies_step_time():
    engine = make_engine(slowdown=2.0)
    engine.add_request(req("a", prompt=10))
    assert engine.step().plan.duration_ms == pytest.approx(44.0)  # 2 * (20 + 1 + 1)
