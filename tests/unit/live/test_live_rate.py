"""The live tab keys a request-rate run's finished steps by their offered rate."""

import pytest

from llm_locust.client.record import RequestRecord
from llm_locust.live.ladder import RATE_STEP_COLUMNS, finished_steps, step_columns
from tests.unit.live.test_live_view import T0, FakeShape, gauge_rows, make_view


class RateShape(FakeShape):
    def describe(self) -> dict:
        return {"kind": "rate", "rates": [2.0, 4.0, 8.0], "dwell_s": 10.0, "warmup_s": 2.0, "steps": self.steps}


def make_rate_view(steps: list[dict], *, t: float):
    view, clock = make_view(steps=steps, t=t)
    view.environment.shape_class = RateShape(steps)
    return view, clock


def test_rate_steps_carry_their_rate():
    steps = [
        {"index": 0, "users": 64, "start_s": 0.0, "end_s": 10.0, "rate_rps": 2.0},
        {"index": 1, "users": 64, "start_s": 10.0, "end_s": 20.0, "rate_rps": 4.0},
        {"index": 2, "users": 64, "start_s": 20.0, "end_s": None, "rate_rps": 8.0},
    ]
    frame = finished_steps(steps, horizon_s=25.0)
    assert frame["target_rate_rps"].tolist() == [2.0, 4.0] and frame["target_users"].tolist() == [64.0, 64.0]
    ladder = finished_steps([{k: v for k, v in s.items() if k != "rate_rps"} for s in steps], horizon_s=25.0)
    assert "target_rate_rps" not in ladder.columns


def test_rate_run_steps_are_keyed_by_the_offered_rate_with_what_was_sent():
    # rates 2, 4, 8 req/s, 10 s a step, 2 s warm-up; every send leaves 3 ms after its grid time
    # (scheduled_s), 10 tokens each. 2 and 4 req/s: E2E 1 s, TTFT 100 ms. 8 req/s: the server
    # serves 4 req/s, so send j ends at T0 + 21 + j / 4 (E2E 1 + j / 8 s, TTFT E2E - 900 ms).
    # Completed in the steady windows: 2 req/s [T0+2, T0+10): j = 2..17 (16 -> 20 tok/s);
    # 4 req/s [T0+12, T0+20): j = 4..35 (32 -> 40 tok/s); 8 req/s [T0+22, T0+30): j = 4..35
    # (32 -> 40 tok/s: no gain per doubling, 4 waiting, TTFT 100 -> 2537.5 ms): critical 4 req/s.
    rates = (2.0, 4.0, 8.0)
    steps = [{"index": k, "users": 64, "rate_rps": r, "start_s": T0 + 10 * k, "end_s": T0 + 10 * (k + 1)}
             for k, r in enumerate(rates)]  # fmt: skip
    view, clock = make_rate_view(steps, t=T0 + 25)
    rows = []
    for k, rate in enumerate(rates):
        for j in range(int(rate * 10)):
            scheduled = T0 + 10 * k + j / rate
            e2e_s = 1.0 + (j / 8 if rate == 8.0 else 0.0)
            rows.append(RequestRecord(request_id=f"{k}-{j}", worker_id="w", name="chat", t_start_s=scheduled + 0.003,
                                      ttft_ms=e2e_s * 1000 - 900, e2e_ms=e2e_s * 1000, output_tokens=10,
                                      scheduled_s=scheduled).to_row())  # fmt: skip
    view.add_records(rows)
    for second in range(41):  # running = in flight (rate x 1 s) up to 4; then 4 run, the rest wait
        in_flight = 2 if second < 10 else 4 if second < 21 else 4 * second - 76
        view.add_server_rows(gauge_rows(T0 + second, min(in_flight, 4), max(in_flight - 4, 0)))
    steps[2]["end_s"], clock.t = None, T0 + 25
    running = view.snapshot()
    assert running["load_axis"] == {"column": "target_rate_rps", "unit": "req/s", "quantity": "rate"}
    assert running["current_step"]["rate_rps"] == 8.0 and running["current_step"]["of"] == 3
    assert "not reached yet (highest finished step: 4 req/s)" == running["critical"]["text"]

    steps[2]["end_s"], clock.t = T0 + 30, T0 + 45
    table = view.snapshot()["steps_table"]
    assert [s["target_rate_rps"] for s in table] == [2.0, 4.0, 8.0]
    assert [s["output_tps"] for s in table] == pytest.approx([20.0, 40.0, 40.0])
    # sent in each window: 2 req/s j = 4..19 (16), 4 req/s j = 8..39 (32), 8 req/s j = 16..79 (64)
    assert [s["achieved_rate_rps"] for s in table] == pytest.approx([2.0, 4.0, 8.0])
    assert [s["send_lag_p99_ms"] for s in table] == pytest.approx([3.0] * 3, abs=1e-3)
    assert [s["unsent"] for s in table] == [0.0, 0.0, 0.0]
    finished = view.snapshot()
    assert finished["critical"]["users"] == 4.0
    assert finished["critical"]["text"] == "4 (throughput stops rising at 8 req/s)"
    assert step_columns(table)[-len(RATE_STEP_COLUMNS) :] == list(RATE_STEP_COLUMNS)
