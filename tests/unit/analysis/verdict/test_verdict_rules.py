"""Each verdict rule on step tables built by hand (every expected number worked out here)."""

import dataclasses
import math

import pandas as pd
import pytest

from llm_locust.analysis.server.config import ServerConfig
from llm_locust.analysis.verdict import RULES, BottleneckKind, ClientSide, ServerSide, diagnose
from llm_locust.analysis.verdict.types import SERVER_KINDS

K = BottleneckKind
NAN = math.nan
T0 = 1_700_000_000.0


def table(
    users,
    tput,
    ttft=None,
    running=None,
    waiting=None,
    *,
    inflight=None,
    kv=None,
    preempt=None,
    errors=None,
    error_kinds=None,
    completed=None,
    tpot=None,
    conn_wait=None,
    e2e=None,
):
    """A step table: step k is [T0 + 10 k, T0 + 10 (k + 1)); NaN where not given."""
    n = len(users)
    col = lambda v, d=NAN: [float(x) for x in v] if v is not None else [d] * n  # noqa: E731
    return pd.DataFrame(
        {
            "step": list(range(n)),
            "target_users": col(users),
            "window_start_s": [T0 + 10 * k for k in range(n)],
            "window_end_s": [T0 + 10 * (k + 1) for k in range(n)],
            "client_inflight": col(inflight) if inflight else col(users),
            "server_running": col(running),
            "server_waiting": col(waiting),
            "kv_usage_ratio": col(kv),
            "server_preemptions_per_s": col(preempt),
            "conn_wait_ms_mean": col(conn_wait, 0.0),
            "completed": [int(c) for c in completed] if completed else [100] * n,
            "output_tps": col(tput),
            "ttft_p50_ms": col(ttft) if ttft else [50.0] * n,
            "tpot_p50_ms": col(tpot, 20.0),
            "e2e_p50_ms": col(e2e, 1000.0),
            "errors": [int(e) for e in errors] if errors else [0] * n,
            "error_kinds": list(error_kinds) if error_kinds else [""] * n,
        }
    )


def vllm(ceiling=None):
    return ServerConfig(engine="vllm", batch_ceiling=ceiling, batch_ceiling_name="max_num_seqs" if ceiling else None)


def judge(tab, config=None, client=None, server=None, rules=RULES, request_tokens=None):
    return diagnose(
        tab,
        server or ServerSide(family="vllm"),
        config or vllm(),
        client or ClientSide(),
        rules=rules,
        request_tokens=request_tokens,
    )


def ev(verdict, rule):
    return next(e for e in verdict.evidence if e.rule == rule)


QUEUE_AT_4 = dict(
    users=[1, 2, 4, 8], tput=[50, 95, 180, 182], ttft=[50, 52, 55, 900], running=[1, 2, 4, 4], waiting=[0, 0, 0, 4]
)


def test_scheduler_ceiling_at_the_configured_max_num_seqs():
    verdict = judge(table(**QUEUE_AT_4), vllm(4))
    assert verdict.bottleneck is K.SCHEDULER_CEILING
    assert verdict.critical_concurrency == 4
    e = ev(verdict, "scheduler_ceiling")
    assert e.holds and e is verdict.evidence[0]
    # 8 users vs 4: 182 / 180 per doubling = 1.0111; waiting 4 > 0.5; running 4 >= 0.9 x 4
    assert e.values["gain_per_doubling"] == pytest.approx(182 / 180)
    assert e.values["server_waiting"] == 4 and e.values["ceiling"] == 4
    assert e.units["server_waiting"] == "requests"
    assert "max_num_seqs = 4" in e.text
    flags = {r.flag for r in verdict.recommendations}
    assert "--max-num-seqs and --max-num-batched-tokens" in flags
    assert all(r.because == "scheduler_ceiling" for r in verdict.recommendations)
    assert verdict.line.startswith("Bottleneck: scheduler_ceiling — ")


def test_queue_must_persist_at_every_later_step():
    tab = table(
        users=[1, 2, 4, 8, 16],
        tput=[50, 95, 180, 182, 183],
        ttft=[50, 52, 55, 900, 2000],
        running=[1, 2, 4, 4, 4],
        waiting=[0, 0, 0, 4, 0.2],
    )
    # (the server not following the client would mark 16 invalid: that check is turned off here)
    rules = dataclasses.replace(RULES, min_server_follow_ratio=0.0)
    e = ev(judge(tab, vllm(4), rules=rules), "scheduler_ceiling")
    assert not e.holds and "do not wait at every step" in e.text


def test_configured_ceiling_of_one_is_batching_off():
    tab = table(
        users=[1, 2, 4, 8],
        tput=[50, 51, 51, 52],
        ttft=[50, 1000, 3000, 7000],
        running=[1, 1, 1, 1],
        waiting=[0, 1, 3, 7],
    )
    verdict = judge(tab, vllm(1))
    assert verdict.bottleneck is K.BATCHING_OFF
    assert verdict.critical_concurrency == 1  # 51 / 50 = 1.02 < 1.15 at 2 users, waiting 1
    e = ev(verdict, "batching_off")
    assert e.values == {"configured_ceiling": 1}
    assert verdict.recommendations[0].flag == "--max-num-seqs"


def test_batching_off_is_critical_where_requests_start_to_queue_whatever_the_throughput_gain():
    # measured on a real vLLM --max-num-seqs 1 while the machine was busy: the 1-user step read
    # slower than the 2-user one (the server idled between one user's requests): the gain at 2
    # users (26.6 / 17.5 = 1.52 >= 1.15) comes with a queue at a full batch of 1, so it is
    # per-sequence speed, not concurrency
    tab = table(
        users=[1, 2, 4],
        tput=[17.5, 26.6, 18.2],
        ttft=[76, 2641, 5817],
        running=[1.0, 1.0, 1.0],
        waiting=[0.0, 1.0, 3.0],
    )
    verdict = judge(tab, vllm(1))
    assert verdict.bottleneck is K.BATCHING_OFF
    # requests first wait at 2 users (waiting 1.0 > 0.5): every request past one only waits
    assert verdict.critical_concurrency == 1
    assert verdict.critical.saturated_users == 2
    assert any(
        line.startswith("c=2 vs 1") and "(but a queue at the highest batch" in line
        for line in verdict.critical.evidence
    ), verdict.critical.evidence


def test_batch_of_one_while_requests_wait_overrides_a_setting():
    tab = table(
        users=[1, 2, 4], tput=[50, 52, 53], ttft=[50, 1000, 3000], running=[1.0, 1.05, 1.0], waiting=[0, 0.95, 3]
    )
    verdict = judge(tab, vllm(8))
    assert verdict.bottleneck is K.BATCHING_OFF
    e = ev(verdict, "batching_off")
    assert e.values == {"users": 2, "server_running": 1.05, "server_waiting": 0.95}
    assert "(although max_num_seqs = 8)" in e.text


def test_kv_cache_running_plateaus_below_the_ceiling():
    tab = table(
        users=[1, 2, 4, 8, 16],
        tput=[50, 95, 180, 260, 262],
        ttft=[50, 52, 55, 60, 2000],
        running=[1, 2, 4, 6, 6],
        waiting=[0, 0, 0, 0, 10],
        kv=[0.1, 0.2, 0.5, 0.95, 0.97],
        preempt=[0, 0, 0, 0.1, 0.6],
    )
    verdict = judge(tab, vllm(16))
    assert verdict.bottleneck is K.KV_CACHE and verdict.critical_concurrency == 8
    e = ev(verdict, "kv_cache")
    assert e.values["kv_usage_ratio"] == 0.97 and e.values["preemptions_per_s"] == 0.6
    assert e.values["configured_ceiling"] == 16
    assert not ev(verdict, "scheduler_ceiling").holds  # 6 < 0.9 x 16
    assert "--gpu-memory-utilization" in {r.flag for r in verdict.recommendations}
    assert "--enable-chunked-prefill" in {r.flag for r in verdict.recommendations}
    chunked = ServerConfig(engine="vllm", batch_ceiling=16, batch_ceiling_name="max_num_seqs", chunked_prefill=True)
    assert "--enable-chunked-prefill" not in {r.flag for r in judge(tab, chunked).recommendations}


def test_compute_running_rises_without_a_queue_and_throughput_stops():
    tab = table(
        users=[1, 2, 4, 8], tput=[50, 95, 180, 185], running=[1, 2, 4, 8], waiting=[0, 0, 0, 0], tpot=[20, 21, 22, 43]
    )
    verdict = judge(tab)
    assert verdict.bottleneck is K.COMPUTE and verdict.critical_concurrency == 4
    e = ev(verdict, "compute")
    assert e.values["gain_per_doubling"] == pytest.approx(185 / 180)  # 1.028 < 1.05
    assert e.values["previous_server_running"] == 4 and e.values["server_running"] == 8
    assert verdict.critical.saturated_users == 8


def test_requests_waiting_for_a_decode_steps_end_are_no_queue_for_compute():
    # the embedded server's compute scenario in one CI run (roofline: 20 ms a step up to 4
    # sequences, 5 ms a sequence beyond): at 8 users 1.14 requests waited on average beside 6.86
    # running (requests arriving mid-step wait for its end; three scrapes a step), 0 at 16
    tab = table(
        users=[1, 2, 4, 8, 16],
        tput=[49.7, 97.4, 194.6, 197.4, 198.0],
        ttft=[23, 41, 42, 70, 107],
        running=[1.0, 1.79, 4.0, 6.86, 16.0],
        waiting=[0.0, 0.21, 0.0, 1.14, 0.0],
        tpot=[20.0, 20.0, 20.1, 39.6, 79.4],
    )
    config = vllm(64)
    verdict = judge(tab, config)
    assert verdict.bottleneck is K.COMPUTE and verdict.critical_concurrency == 4
    e = ev(verdict, "compute")
    assert e.values["users"] == 8 and e.values["server_waiting"] == 1.14
    assert "within the 1.37" in e.text  # 0.2 x 6.86 running
    # a queue of a fifth of running or more is a queue: not compute at 8 (16 breaks no plateau
    # either way, so the rule then names 16, where nothing waits)
    tab.loc[3, "server_waiting"] = 1.4  # > 1.372
    assert ev(judge(tab, config), "compute").values["users"] == 16
    tab.loc[4, "server_waiting"] = 3.3  # > 0.2 x 16
    assert not ev(judge(tab, config), "compute").holds


def test_a_real_cpu_vllm_still_batching_is_not_compute_bound():
    # measured on the real vLLM (max_num_seqs 4, shared 2-core CPU): 2 -> 4 users gained x1.127
    # with no queue while running rose 1.73 -> 3.95; at 8 users requests queued at the ceiling
    tab = table(
        users=[1, 2, 4, 8],
        tput=[44.6, 85.1, 95.9, 106.1],
        ttft=[58, 104, 141, 3762],
        running=[1.0, 1.73, 3.95, 3.90],
        waiting=[0, 0, 0, 3.95],
    )
    verdict = judge(tab, vllm(4))
    assert not ev(verdict, "compute").holds
    assert verdict.bottleneck is K.SCHEDULER_CEILING and verdict.critical_concurrency == 4


def test_a_plateau_that_a_later_step_breaks_is_not_compute():
    # measured on the real vLLM (max_num_seqs 4, CPU shared with other work): 2 -> 4 users gained
    # x1.02 with no queue while running rose 1.97 -> 3.69, then 8 users gained x1.80 over 4
    # (requests finishing in waves). A hardware limit does not lift at the next step.
    tab = table(
        users=[1, 2, 4, 8],
        tput=[45.0, 78.3, 80.0, 144.3],
        ttft=[46, 80, 180, 2347],
        running=[0.99, 1.97, 3.69, 3.90],
        waiting=[0, 0, 0, 4.0],
    )
    verdict = judge(tab, vllm(4))
    assert not ev(verdict, "compute").holds
    assert verdict.bottleneck is not K.COMPUTE


def test_a_plateau_of_whole_waves_that_the_prorated_throughput_does_not_show_is_not_compute():
    tab = table(
        users=[1, 2, 4, 8], tput=[50, 95, 180, 185], running=[1, 2, 4, 8], waiting=[0, 0, 0, 0], tpot=[20, 21, 22, 43]
    )
    tab["output_tps_prorated"] = [50.0, 95.0, 180.0, 300.0]  # x1.67 per doubling: still rising
    assert not ev(judge(tab), "compute").holds
    tab["output_tps_prorated"] = [50.0, 95.0, 180.0, 185.0]  # x1.03 < 1.05: flat by both
    assert judge(tab).bottleneck is K.COMPUTE


def test_ninety_nine_percent_429_is_rejections_never_still_scaling():
    # 8 users: 990 of 1000 finished requests are 429 (share 0.99); its 10 successes are not
    # healthy throughput, so the step is left out of the knee, and it cuts the ladder
    tab = table(
        users=[1, 2, 4, 8],
        tput=[50, 95, 180, 2],
        running=[1, 2, 4, 4],
        waiting=[0, 0, 0, 0],
        completed=[100, 100, 100, 10],
        errors=[0, 0, 0, 990],
        error_kinds=["", "", "", "http_429:990"],
        inflight=[1, 2, 4, 1.2],
    )
    verdict = judge(tab)
    assert verdict.bottleneck is K.REJECTIONS and verdict.critical_concurrency == 4
    e = ev(verdict, "rejections")
    assert e.values["failed_share"] == pytest.approx(0.99)
    assert e.values["client_http_429"] == 990 and e.values["dominates"] == 1
    assert verdict.table["valid"].all()  # low in-flight at 8 is the server's answer
    assert "failures dominate at 8 users" in verdict.critical.text


def test_timeouts_pushed_over_the_line_by_the_server_queue():
    tab = table(
        users=[1, 2, 4, 8],
        tput=[50, 95, 180, 80],
        ttft=[50, 52, 55, 9000],
        running=[1, 2, 4, 4],
        waiting=[0, 0, 0, 4],
        completed=[100, 100, 100, 40],
        errors=[0, 0, 0, 60],
        error_kinds=["", "", "", "ttft_timeout:60"],
    )
    client = ClientSide(timeouts_s={"ttft": 10.0, "total": 0})
    verdict = judge(tab, client=client)
    assert verdict.bottleneck is K.TIMEOUTS and verdict.critical_concurrency == 4
    cause = ev(verdict, "timeout_cause")
    assert cause.values["server_queue"] == 1 and cause.values["ttft_timeout_s"] == 10
    assert "queue (waiting 4.00) pushes latency over the line" in cause.text
    assert verdict.recommendations[0].because == "timeout_cause"


def test_timeout_shorter_than_the_servers_latency():
    tab = table(
        users=[1, 2],
        tput=[0, 0],
        running=[1, 2],
        waiting=[0, 0],
        completed=[0, 0],
        errors=[10, 20],
        error_kinds=["total_timeout:10", "total_timeout:20"],
    )
    verdict = judge(tab, client=ClientSide(timeouts_s={"total": 2.0}))
    assert verdict.bottleneck is K.TIMEOUTS and verdict.critical_concurrency is None
    cause = ev(verdict, "timeout_cause")
    assert cause.values["server_queue"] == 0
    assert "client timeout is shorter than the server's real latency" in cause.text
    assert verdict.recommendations[0].flag == "--total-timeout-s"


def test_client_short_of_target_never_blames_the_server():
    # the server queues at 4 and 8, but the client delivered only 3 of 4 and 3 of 8 users
    tab = table(**{**QUEUE_AT_4, "running": [1, 2, 3, 3], "waiting": [0, 0, 0, 0]}, inflight=[1, 2, 3, 3])
    verdict = judge(tab, vllm(4))
    assert verdict.bottleneck is K.CLIENT
    assert verdict.critical_concurrency is None
    assert verdict.critical.text == "not judged: the load client was the limit from 4 users"
    assert not set(verdict.secondary) & SERVER_KINDS
    assert list(verdict.table["valid"]) == [True, True, False, False]
    assert verdict.table.loc[2, "invalid_reason"] == "client in-flight 3.00 of 4 target users (75%)"
    e = ev(verdict, "client")
    assert e.values["inflight_ratio"] == 0.75 and e.values["limited_run"] == 1


def test_requests_the_server_does_not_show_are_a_hidden_queue_never_the_client():
    # issue 25: a static batcher with a long batch wait read "client" while the load client idled
    tab = table(users=[1, 2, 4], tput=[50, 95, 100], ttft=[50, 52, 400], running=[1, 2, 1.5], waiting=[0, 0, 0.5])
    verdict = judge(tab)
    # 4 users in flight at the client, 2.0 at the server: 2 < 0.75 x 4 and 2 >= 1 fewer
    assert verdict.bottleneck is not K.CLIENT and K.CLIENT not in verdict.secondary
    assert bool(verdict.table.loc[2, "valid"])
    hidden = ev(verdict, "hidden_queue")
    assert hidden.holds and hidden.values["hidden_requests"] == 2.0 and hidden.values["users"] == 4.0
    assert "the client had 4.00 requests in flight and the server's counters showed 2.00" in hidden.text
    # counted as waiting (2 hidden + 0.5), the 4-user step saturates: throughput x1.05 per
    # doubling, TTFT x7.7
    assert verdict.critical_concurrency == 2
    # running 1.5, no configured ceiling, requests hidden: which limit is undetermined
    assert verdict.bottleneck is K.UNDETERMINED
    assert verdict.candidates == (K.SCHEDULER_CEILING, K.COMPUTE)
    assert "scrape every replica" in verdict.tells_apart
    assert any(r.because == "hidden_queue" for r in verdict.recommendations)


def test_connection_wait_cpu_loop_lag_and_lost_workers_invalidate_steps():
    tab = table(
        users=[1, 2, 4, 8],
        tput=[50, 95, 180, 340],
        running=[1, 2, 4, 8],
        waiting=[0, 0, 0, 0],
        conn_wait=[0, 0, 0, 500],
        e2e=[1000] * 4,
    )
    load = pd.DataFrame(
        {
            "t_s": [T0 + 5, T0 + 15, T0 + 25, T0 + 26],
            "worker": ["a", "a", "a", "b"],
            "cpu_cores": [0.2, 0.95, 0.3, 0.1],
            "loop_lag_ms_mean": [1, 2, 80, 1],
            "loop_lag_ms_max": [2, 5, 300, 2],
            "open_streams": [1, 2, 4, 4],
        }
    )
    lost = ({"worker": "b", "lost_at_s": T0 + 39.0, "last_record_s": T0 + 38.0},)
    verdict = judge(tab, client=ClientSide(load=load, workers_lost=lost))
    reasons = list(verdict.table["invalid_reason"])
    assert reasons[0] == ""
    assert reasons[1] == "a load worker used 0.95 CPU cores (saturated at 0.9)"
    assert reasons[2] == "a load worker's event loop lagged 80 ms on average"
    # 500 / (500 + 1000) = 33 % of the users' time waiting for a connection; worker b lost 8 s in
    assert reasons[3] == (
        "users waited 500 ms on average for a free connection (33% of their "
        "time); worker b was lost 8.0 s into the window (in-flight 8.00 of 8 target users)"
    )
    assert verdict.bottleneck is K.CLIENT


def test_a_worker_missing_and_back_invalidates_the_steps_its_spell_overlaps():
    tab = table(users=[1, 2, 4, 8], tput=[50, 95, 180, 340], inflight=[1, 1.6, 4, 8])
    meta = {"workers_missing": [
        {"worker": "b", "from_s": T0 + 12.0, "noticed_s": T0 + 16.0, "to_s": T0 + 15.0},
        {"worker": "c", "from_s": T0 + 32.0, "noticed_s": T0 + 36.0, "to_s": None},  # never back: workers_lost's
    ]}  # fmt: skip
    client = ClientSide.from_meta(meta)
    assert client.workers_missing == tuple(meta["workers_missing"])
    # margin 2 s: the spell [12, 15 + 2) overlaps step 1 ([10, 20)) only
    verdict = judge(tab, client=client, rules=dataclasses.replace(RULES, worker_loss_margin_s=2.0))
    reasons = list(verdict.table["invalid_reason"])
    assert reasons[0] == reasons[2] == reasons[3] == ""
    # in-flight 1.6 of 2 is also short (80 % < 90 %): both reasons, the spell's with the in-flight
    assert reasons[1] == (
        "client in-flight 1.60 of 2 target users (80%); worker b sent no heartbeat from +2.0 s to +5.0 s "
        "of the window, then came back (in-flight 1.60 of 2 target users)"
    )
    assert verdict.bottleneck is K.CLIENT


def test_a_lost_worker_is_named_as_the_cause_and_more_workers_are_not_recommended():
    """Steps 1-2 ran short because worker b died 2 s into step 1 (its users gone until Locust moved
    them): the client limited the run, but "add load" would not have kept those users."""
    tab = table(users=[1, 2, 4, 8], tput=[50, 60, 70, 340], inflight=[1, 1.2, 2.0, 8])
    lost = ({"worker": "b", "lost_at_s": T0 + 12.0, "last_record_s": T0 + 11.5},)
    verdict = judge(tab, client=ClientSide(workers_lost=lost))
    assert verdict.bottleneck is K.CLIENT
    client = ev(verdict, "client")
    assert client.values["worker_lost"] == 1.0 and client.values["limited_run"] == 1.0
    assert client.text.startswith("a load worker was lost at 2 users (client in-flight 1.20 of 2 target users (60%)")
    assert list(verdict.table["worker_gone"]) == [False, True, True, False]  # the margin (10 s) reaches step 2
    changes = [r.change for r in verdict.recommendations]
    assert changes[0].startswith("find why the load worker was lost") and not any("add load" in c for c in changes)
    assert "run.json lists no workers_lost" in verdict.recommendations[0].verify


def test_a_client_short_of_its_target_with_no_worker_lost_is_told_to_add_load():
    tab = table(users=[1, 2, 4, 8], tput=[50, 60, 70, 80], inflight=[1, 1.2, 2.0, 2.1])
    verdict = judge(tab, client=ClientSide())
    assert verdict.bottleneck is K.CLIENT and ev(verdict, "client").values["worker_lost"] == 0.0
    assert not verdict.table["worker_gone"].any()
    assert any(r.change.startswith("add load: more worker processes") for r in verdict.recommendations)


def test_client_limit_after_the_server_saturated_is_secondary():
    tab = table(
        users=[1, 2, 4, 8, 16],
        tput=[50, 95, 180, 182, 183],
        ttft=[50, 52, 55, 900, 3000],
        running=[1, 2, 4, 4, 4],
        waiting=[0, 0, 0, 4, 6],
        inflight=[1, 2, 4, 8, 10],
    )
    verdict = judge(tab, vllm(4))
    assert verdict.bottleneck is K.SCHEDULER_CEILING and verdict.critical_concurrency == 4
    assert verdict.secondary == (K.CLIENT,)
    assert ev(verdict, "client").values["limited_run"] == 0


def test_none_names_the_steps_to_add():
    tab = table(users=[1, 2, 4, 8], tput=[50, 95, 180, 340], running=[1, 2, 4, 8], waiting=[0, 0, 0, 0])
    verdict = judge(tab)
    assert verdict.bottleneck is K.NONE and verdict.critical_concurrency is None
    assert ev(verdict, "none").text == "no saturation up to 8 users: add steps 16, 32"
    # a configured ceiling of 32: doublings up to 2 x 32 = 64
    assert "add steps 16, 32, 64 (the configured max_num_seqs is 32)" in judge(tab, vllm(32)).headline


def test_missing_server_fields_are_named_with_the_flag_that_prints_them():
    tab = table(users=[1, 2, 4, 8], tput=[55, 92, 216, 227], ttft=[50, 83, 150, 1227])
    verdict = judge(tab)
    e = ev(verdict, "server_fields_missing")
    assert e.holds and "--disable-log-stats" in e.text
    assert "running, waiting, KV cache usage and preemptions are missing" in e.text
    llama = judge(tab, server=ServerSide(family="llamacpp"))
    assert "--metrics" in ev(llama, "server_fields_missing").text
    sglang = judge(tab, server=ServerSide(family="sglang"))
    assert "--enable-metrics" in ev(sglang, "server_fields_missing").text


def test_server_error_lines_are_counted_per_step():
    errors = pd.DataFrame(
        {"t_s": [T0 + 35, T0 + 36, T0 + 37, T0 + 5], "kind": ["queue_full", "queue_full", "out_of_memory", "rejected"]}
    )
    tab = table(
        users=[1, 2, 4, 8],
        tput=[50, 95, 180, 20],
        running=[1, 2, 4, 4],
        waiting=[0, 0, 0, 0],
        completed=[100, 100, 100, 10],
        errors=[0, 0, 0, 90],
        error_kinds=["", "", "", "http_5xx:90"],
    )
    verdict = judge(tab, server=ServerSide(family="tgi", errors=errors))
    assert list(verdict.table["server_error_kinds"]) == ["rejected:1", "", "", "queue_full:2"]
    e = ev(verdict, "rejections")
    assert e.values["server_queue_full"] == 2 and e.values["client_http_5xx"] == 90
    assert "--max-concurrent-requests" in {r.flag for r in verdict.recommendations}


def test_rules_object_is_frozen_and_drives_the_thresholds():
    with pytest.raises(dataclasses.FrozenInstanceError):
        RULES.waiting_threshold = 2.0
    tab = table(**QUEUE_AT_4)
    strict = dataclasses.replace(RULES, waiting_threshold=5.0, min_gain_per_doubling=1.0)
    assert judge(tab, vllm(4), rules=strict).bottleneck is K.NONE


def test_interrupted_requests_are_not_failures():
    # 40 of 100 finished requests at 8 users were cut by the test's stop: no server failure
    tab = table(
        users=[1, 2, 4, 8],
        tput=[50, 95, 180, 340],
        running=[1, 2, 4, 8],
        waiting=[0, 0, 0, 0],
        completed=[100, 100, 100, 60],
        errors=[0, 0, 0, 40],
        error_kinds=["", "", "", "interrupted:40"],
    )
    verdict = judge(tab)
    assert verdict.bottleneck is K.NONE
    assert list(verdict.table["failed_share"]) == [0, 0, 0, 0]


def test_inputs_are_not_mutated():
    tab = table(**QUEUE_AT_4)
    before = tab.copy()
    judge(tab, vllm(4))
    pd.testing.assert_frame_equal(tab, before)


def batches(**columns):
    """Per-step statistics of logged batches, as llm_locust.analysis.server.batches.batch_stats gives them."""
    n = len(next(iter(columns.values())))
    frame = pd.DataFrame({"step": list(range(n)), "target_users": [1.0, 2.0, 4.0, 8.0][:n]})
    for name in (
        "n_batches",
        "batch_size_p50",
        "batch_size_max",
        "batch_size_mean",
        "batch_wait_ms_p50",
        "batch_wait_ms_max",
        "batch_wait_at_max_ratio",
        "queue_mean",
        "queue_slope_per_s",
    ):
        frame[name] = [float(v) for v in columns.get(name, [NAN] * n)]
    return frame


def test_batching_off_from_the_logged_batch_sizes_while_the_queue_grows():
    # the metrics say nothing about running; the log: 40 batches a step, each of 1 sequence,
    # queue 0, 1, 3, 7
    tab = table(users=[1, 2, 4, 8], tput=[50, 52, 51, 52], running=[NAN] * 4, waiting=[NAN] * 4)
    logged = batches(
        n_batches=[40, 40, 40, 40], batch_size_p50=[1] * 4, batch_size_max=[1] * 4, queue_mean=[0, 1, 3, 7]
    )
    verdict = judge(tab, server=ServerSide(family="generic", batches=logged))
    e = ev(verdict, "batching_off")
    assert verdict.bottleneck is K.BATCHING_OFF and e.holds
    assert e.values["users"] == 2 and e.values["waiting"] == 1.0 and e.values["n_batches"] == 160
    assert verdict.table["batch_size_max"].tolist() == [1.0] * 4


def test_a_static_batcher_that_batches_under_load_is_not_batching_off():
    # 2 users: the batcher runs 1 at a time while the other waits for the batch to end; at 8
    # users it runs 4 at once (the log and the metrics agree)
    tab = table(
        users=[1, 2, 4, 8],
        tput=[50, 60, 110, 112],
        ttft=[50, 80, 90, 600],
        running=[1, 1.0, 3.2, 4],
        waiting=[0, 0.8, 0.8, 4],
    )
    logged = batches(
        n_batches=[30, 30, 20, 10],
        batch_size_p50=[1, 1, 3, 4],
        batch_size_max=[1, 2, 4, 4],
        queue_mean=[0, 0.8, 0.8, 4],
    )
    verdict = judge(tab, vllm(4), server=ServerSide(family="generic", batches=logged))
    assert not ev(verdict, "batching_off").holds
    assert verdict.bottleneck is not K.BATCHING_OFF


def test_batches_that_wait_their_configured_maximum_ask_for_a_shorter_wait():
    tab = table(**QUEUE_AT_4)
    logged = batches(
        n_batches=[20, 20, 20, 20],
        batch_size_p50=[1, 2, 4, 4],
        batch_size_max=[1, 2, 4, 4],
        batch_wait_ms_p50=[50, 50, 10, 0],
        batch_wait_at_max_ratio=[0.9, 0.6, 0.1, 0.0],
    )
    verdict = judge(tab, vllm(4), server=ServerSide(family="generic", batches=logged, batch_wait_max_ms=50.0))
    e = ev(verdict, "batch_wait")
    assert e.holds and e.values["users"] == 1 and e.values["batch_wait_at_max_ratio"] == 0.9
    assert e.values["batch_wait_max_ms"] == 50.0
    assert any("shorten the batch wait" in r.change for r in verdict.recommendations)
    assert verdict.bottleneck is K.SCHEDULER_CEILING  # evidence and a recommendation, not a kind
    calm = logged.assign(batch_wait_at_max_ratio=[0.2, 0.1, 0.0, 0.0])
    quiet = judge(tab, vllm(4), server=ServerSide(family="generic", batches=calm, batch_wait_max_ms=50.0))
    assert not ev(quiet, "batch_wait").holds
    assert not any("shorten the batch wait" in r.change for r in quiet.recommendations)


def test_a_step_the_stop_cut_is_incomplete_never_the_client():
    # Ctrl-C during the 8-user step: 6 requests interrupted, in-flight over the window 0.36
    tab = table(
        users=[1, 2, 4, 8],
        tput=[46, 86, 160, 43],
        running=[1, 1.86, 3.88, 8],
        waiting=[0, 0.14, 0.12, 0],
        inflight=[1, 2, 4, 0.36],
        errors=[0, 0, 0, 6],
        error_kinds=["", "", "", "interrupted:6"],
    )
    verdict = judge(tab)
    assert verdict.bottleneck is not K.CLIENT
    row = verdict.table.set_index("target_users").loc[8.0]
    assert not row["valid"] and row["invalid_reason"].startswith("incomplete: the run was stopped")
    assert not ev(verdict, "client").holds


def test_steps_after_the_last_record_of_a_cut_requests_csv_are_incomplete():
    tab = table(
        users=[1, 2, 4, 8], tput=[50, 95, 180, 60], running=[1, 2, 4, 8], waiting=[0, 0, 0, 0], inflight=[1, 2, 4, 2.5]
    )
    # the file ends 4 s into the 8-user step (T0 + 30 .. T0 + 40): 40 requests missing
    verdict = judge(tab, client=ClientSide(records_end_s=T0 + 34.0, missing_records=40))
    assert verdict.bottleneck is not K.CLIENT
    reasons = verdict.table.set_index("target_users")["invalid_reason"]
    assert reasons[8.0].startswith("incomplete: 40 requests the master counted are missing")
    assert reasons[4.0] == ""


def test_client_side_finds_the_stop_and_missing_records_in_requests():
    requests = pd.DataFrame(
        {
            "t_start_s": [T0, T0 + 1.0, T0 + 2.0, T0 + 3.0],
            "e2e_ms": [500.0, 4000.0, 2500.0, 500.0],
            "error_kind": ["", "interrupted", "interrupted", ""],
        }
    )
    side = ClientSide.from_meta({}, None, requests, reported_requests=10)
    assert side.stopped_at_s == T0 + 4.5  # the earlier interrupted end: 2.0 + 2.5 < 1.0 + 4.0
    assert side.records_end_s == T0 + 5.0 and side.missing_records == 6
    assert ClientSide.from_meta({}, None, requests, reported_requests=4).records_end_s is None


def test_rejections_critical_concurrency_is_before_the_step_its_evidence_names():
    # issue 25, measured behind a real nginx (limit_conn 4, 503) in front of the embedded server:
    # flat from 4 users, 13 x 503 at 8 users, 36 at 16; the verdict said "rejections at 8 users"
    # beside "critical concurrency 8 (failures dominate at 16)"; the answer is 4
    tab = table(
        users=[1, 2, 4, 8, 16],
        tput=[40, 80, 160, 160, 160],
        running=[NAN] * 5,
        waiting=[NAN] * 5,
        completed=[20] * 5,
        errors=[0, 0, 0, 13, 36],
        error_kinds=["", "", "", "http_503:13", "http_503:36"],
        e2e=[250] * 5,
    )
    verdict = judge(tab)
    assert verdict.bottleneck is K.REJECTIONS
    assert ev(verdict, "rejections").values["users"] == 8.0
    assert verdict.critical_concurrency == 4


def test_kv_cache_full_to_within_one_request_of_a_real_vllm_with_five_blocks():
    # real vLLM (CPU, slow model) --max-num-seqs 8 --num-gpu-blocks-override 5 --max-model-len 256:
    # 4 usable 128-token blocks, one a request of 46 + 64 tokens; the step averages of that run
    # (report/steps.csv): the gauge read 0.89 beside running 3.56 at 8 users, each request 0.25
    tab = table(
        users=[1, 2, 4, 8],
        tput=[40.8, 68.6, 126.0, 128.0],
        ttft=[75, 90, 124, 1606],
        running=[1.0, 1.81, 3.48, 3.56],
        waiting=[0, 0, 0, 4.0],
        kv=[0.25, 0.453, 0.87, 0.89],
        preempt=[0, 0, 0, 0],
        tpot=[22.6, 28.0, 22.7, 22.7],
    )
    verdict = judge(tab, vllm(8))
    assert verdict.bottleneck is K.KV_CACHE, verdict.line
    assert verdict.critical_concurrency == 4
    e = ev(verdict, "kv_cache")
    assert e.values["kv_usage_ratio"] == 0.89 and e.values["server_running"] == 3.56
    # one more request would need 0.89 / 3.56 = 0.25 more: 1.14 > 1
    assert "each request holds about 25%: no room for one more" in e.text
    # the same gauge beside 8 running requests leaves room (0.89 + 0.11 = 1.0, not more)
    roomy = tab.assign(server_running=[1.0, 2.0, 4.0, 8.0], server_waiting=[0, 0, 0, 0.0])
    assert not ev(judge(roomy, vllm(16)), "kv_cache").holds


def test_refusals_where_throughput_stops_rising_are_rejections_without_other_signs_of_a_knee():
    # measured behind a real nginx (limit_conn 4, 503), /metrics scraped through it (refused:
    # no server counters), ladder 2, 4, 8: flat from 4 users, 9 x 503 of 26 at 8, TTFT flat (the
    # refusals come at once); the verdict said "none - no saturation up to 8 users"
    tab = table(
        users=[2, 4, 8],
        tput=[73, 183, 155],
        running=[2.0, NAN, NAN],
        waiting=[0.0, NAN, NAN],
        completed=[8, 20, 17],
        errors=[0, 0, 9],
        error_kinds=["", "", "http_5xx:9"],
        e2e=[727, 794, 794],
    )
    verdict = judge(tab)
    assert verdict.bottleneck is K.REJECTIONS
    assert verdict.critical_concurrency == 4
    assert ev(verdict, "rejections").values["users"] == 8.0
    # still scaling with the same refusals: not the limit
    rising = table(
        users=[2, 4, 8],
        tput=[73, 183, 330],
        running=[2.0, NAN, NAN],
        waiting=[0.0, NAN, NAN],
        completed=[8, 20, 40],
        errors=[0, 0, 9],
        error_kinds=["", "", "http_5xx:9"],
        e2e=[727, 794, 794],
    )
    assert judge(rising).bottleneck is not K.REJECTIONS


def test_users_at_the_ceiling_waiting_for_admission_are_no_queue_at_the_ceiling():
    """The README demo on a fresh clone (max_num_seqs 8, 7 Dec 2026): at 8 users the client held
    7.99 in flight, running 7.48 and 0.52 waiting - each finished request's successor waiting for the
    next scheduler step, not a queue (8 users cannot queue behind 8 slots); the ceiling-queue rule
    read it as saturation at 8 and the critical concurrency as 4 ('Unexpected', exit 3)."""
    tab = table(
        users=[1, 2, 4, 8, 16, 32],
        tput=[46.9, 85.3, 157.9, 273.1, 290.1, 290.1],
        ttft=[24, 44, 48, 56, 1838, 5447],
        running=[1, 2, 4, 7.48, 8, 8],
        waiting=[0, 0, 0, 0.52, 8, 24],
        inflight=[1, 2, 4, 7.99, 16, 31.99],
    )
    verdict = judge(tab, vllm(8))
    assert verdict.bottleneck is K.SCHEDULER_CEILING
    assert verdict.critical_concurrency == 8
