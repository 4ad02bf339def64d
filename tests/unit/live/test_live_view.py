"""The live view's horizon, finished steps and critical concurrency so far (fake clock, no network)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from locust.event import Events
from locust.runners import STATE_RUNNING, STATE_STOPPED, MasterRunner

from llm_locust.client.record import RequestRecord
from llm_locust.live.view import LiveView

T0 = 1000.0
SOURCE = "http://127.0.0.1:8000/metrics"
LABELS = json.dumps({"engine": "0", "model_name": "m"})


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class FakeShape:
    def __init__(self, steps: list[dict]) -> None:
        self.steps = steps

    def describe(self) -> dict:
        return {"kind": "ladder", "ladder": [1, 2, 4], "dwell_s": 10.0, "warmup_s": 2.0, "steps": self.steps}


def make_view(*, runner=None, steps=(), t: float = T0) -> tuple[LiveView, Clock]:
    runner = runner or SimpleNamespace(state=STATE_RUNNING, user_count=0)
    environment = SimpleNamespace(events=Events(), runner=runner, shape_class=FakeShape(list(steps)), reset_stats=False)
    clock = Clock(t)
    view = LiveView(environment, clock=clock)
    view.records.start(T0)
    return view, clock


def test_horizon_is_the_oldest_recent_worker_report_on_a_master():
    runner = MasterRunner.__new__(MasterRunner)  # a master's type, without binding its ZeroMQ port
    runner.state, runner.greenlet = STATE_RUNNING, None
    view, clock = make_view(runner=runner)
    for client, t in (("a", T0 + 100.0), ("b", T0 + 103.0)):
        clock.t = t
        view._on_worker_report(client_id=client, data={})

    assert view.horizon_s(T0 + 104.0) == T0 + 100.0  # worker a's records are known up to its report
    assert view.horizon_s(T0 + 111.0) == T0 + 103.0  # a has gone quiet for > 10 s: no longer waited for
    runner.state = STATE_STOPPED
    assert view.horizon_s(T0 + 111.0) == T0 + 111.0  # every worker has sent its last report


def test_standalone_horizon_is_now():
    view, _ = make_view()
    assert view.horizon_s(T0 + 5.0) == T0 + 5.0


def gauge_rows(t_s: float, running: float, waiting: float) -> list[tuple]:
    return [
        (t_s, SOURCE, "vllm:num_requests_running", LABELS, running),
        (t_s, SOURCE, "vllm:num_requests_waiting", LABELS, waiting),
    ]


def request(t_start_s: float, *, ttft_ms: float, e2e_ms: float = 1000.0, tokens: int = 10) -> tuple:
    return RequestRecord(request_id=str(t_start_s), worker_id="w", name="chat", t_start_s=t_start_s, ttft_ms=ttft_ms,
                         e2e_ms=e2e_ms, output_tokens=tokens).to_row()  # fmt: skip


def test_critical_concurrency_so_far_uses_only_finished_steps():
    # ladder 1, 2, 4 users, 10 s a step, 2 s warm-up. Completions per steady window (8 s):
    # 1 user: 8 x 10 tokens (10 tok/s, TTFT 100); 2 users: 16 (20 tok/s, TTFT 100);
    # 4 users: 17 (21.25 tok/s, TTFT 1000, 2 s each: 3.72 in flight on average, 93 % of the
    # target, so the client delivered the step) while the server queues 2.
    steps = [{"index": 0, "users": 1, "start_s": T0, "end_s": T0 + 10},
             {"index": 1, "users": 2, "start_s": T0 + 10, "end_s": T0 + 20},
             {"index": 2, "users": 4, "start_s": T0 + 20, "end_s": None}]  # fmt: skip
    view, clock = make_view(steps=steps, t=T0 + 25)
    rows = []
    for window_start, n, ttft_ms, e2e_s in (
        (T0 + 2, 8, 100.0, 1.0),
        (T0 + 12, 16, 100.0, 1.0),
        (T0 + 22, 17, 1000.0, 2.0),
    ):
        # the i-th request completes (e2e_s after it starts) at window_start + (i + 0.5) * 8 / n
        rows += [
            request(window_start + (i + 0.5) * 8 / n - e2e_s, ttft_ms=ttft_ms, e2e_ms=e2e_s * 1000) for i in range(n)
        ]
    view.add_records(rows)
    for second in range(31):
        running, waiting = (1, 0) if second < 10 else (2, 0) if second < 20 else (2, 2)
        view.add_server_rows(gauge_rows(T0 + second, running, waiting))

    running = view.snapshot()
    assert [s["target_users"] for s in running["steps_table"]] == [1.0, 2.0]
    assert running["critical"]["users"] is None and "not reached yet" in running["critical"]["text"]
    assert running["current_step"]["users"] == 4 and running["current_step"]["of"] == 3

    steps[2]["end_s"] = T0 + 30
    clock.t = T0 + 31
    finished = view.snapshot()

    table = finished["steps_table"]
    assert [s["output_tps"] for s in table] == pytest.approx([10.0, 20.0, 21.25])
    assert [s["server_waiting"] for s in table] == pytest.approx([0.0, 0.0, 2.0])
    assert finished["critical"]["users"] == 2.0
    assert finished["critical"]["text"] == "2 (throughput stops rising at 4 users)"
    assert running["bottleneck"]["kind"] == "none"  # two finished steps, still scaling
    assert finished["bottleneck"]["kind"] == "scheduler_ceiling"
    assert "2.00 requests wait while running sits at 2.00" in finished["bottleneck"]["text"]
    assert finished["current_step"] is None
