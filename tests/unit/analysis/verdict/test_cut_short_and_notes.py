"""A ladder the stop cut short asks to rerun it, not for steps it had planned; a run without
``client_load.csv`` says the client check could not rule out a saturated load machine."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from llm_locust.analysis.pipeline import analyze_run
from llm_locust.analysis.verdict.recommend import recommend
from llm_locust.analysis.verdict.types import BottleneckKind, Evidence
from tests.analysis_factories import T0, client_load_row, synthetic_ladder, write_client_load

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)

PLANNED = [1, 2, 4, 8, 16, 32]


def plan(run_dir, ladder):
    meta = json.loads((run_dir / "run.json").read_text())
    meta["shape"]["ladder"] = ladder
    (run_dir / "run.json").write_text(json.dumps(meta))


def cut_run(tmp_path, recorded_end_after_s=0.0):
    """1, 2, 4, 8 users of the planned 1...32 (64 slots: throughput still rises), stopped by
    Ctrl-C 15 s into step 3 (of 20): requests in flight then end there as ``interrupted``, none
    starts later, and run.json's step 3 ends ``recorded_end_after_s`` after the stop."""
    run = synthetic_ladder(tmp_path / "run", users=(1, 2, 4, 8), max_num_seqs=64)
    plan(run, PLANNED)
    stop_s = T0 + 3 * 20.0 + 15.0
    requests = pd.read_csv(run / "requests.csv", keep_default_na=False)
    requests = requests[requests["t_start_s"] < stop_s].copy()
    end_s = requests["t_start_s"] + requests["e2e_ms"] / 1000.0
    cut = end_s > stop_s
    requests.loc[cut, "error_kind"] = "interrupted"
    requests.loc[cut, "e2e_ms"] = (stop_s - requests.loc[cut, "t_start_s"]) * 1000.0
    assert cut.sum() == 8  # every user had one in flight
    requests.to_csv(run / "requests.csv", index=False)
    meta = json.loads((run / "run.json").read_text())
    meta["shape"]["steps"][3]["end_s"] = meta["ended_at_s"] = stop_s + recorded_end_after_s
    (run / "run.json").write_text(json.dumps(meta))
    return run


def verdict_of(run):
    analyze_run(run)
    return json.loads((run / "report" / "verdict.json").read_text())


def rule(verdict, name):
    return next(e for e in verdict["evidence"] if e["rule"] == name)


@pytest.mark.parametrize(
    "recorded_end_after_s, highest, unmeasured",
    [
        # the step's recorded end comes after the interrupted requests: step 3 is incomplete
        (0.5, 4, [8, 16, 32]),
        # the step ends at the stop itself: its shortened window (10 s steady) is measured
        (0.0, 8, [16, 32]),
    ],
)
def test_a_ladder_cut_short_asks_to_rerun_it_to_completion(tmp_path, recorded_end_after_s, highest, unmeasured):
    verdict = verdict_of(cut_run(tmp_path, recorded_end_after_s))
    assert verdict["bottleneck"] == "none"
    none = rule(verdict, "none")
    assert none["values"] == {"highest_users": highest, "cut_short": 1, "cut_at_step": 3, "planned_steps": 6,
                              "unmeasured_steps": len(unmeasured)}  # fmt: skip
    assert (
        "cut short at step 3 (8 users) of the planned 1, 2, 4, 8, 16, 32: "
        f"{', '.join(map(str, unmeasured))} not measured - rerun the ladder to completion" in none["text"]
    )
    [rec] = verdict["recommendations"]
    assert rec["change"].startswith("the ladder was cut short at step 3: rerun it to completion")
    assert rec["flag"] == "--ladder 1,2,4,8,16,32"
    assert "add ladder steps" not in json.dumps(verdict)
    summary = (tmp_path / "run" / "report" / "summary.md").read_text()
    assert "rerun it to completion" in summary and "add ladder steps" not in summary


def test_a_ladder_that_ran_every_planned_step_asks_for_more(tmp_path):
    run = synthetic_ladder(tmp_path / "run", users=(1, 2, 4, 8), max_num_seqs=64)
    plan(run, [1, 2, 4, 8])
    verdict = verdict_of(run)
    none = rule(verdict, "none")
    assert "cut_short" not in none["values"]
    # no saturation up to 8 users: the next two doublings
    assert (none["values"]["next_users_1"], none["values"]["next_users_2"]) == (16, 32)
    assert verdict["recommendations"][0]["change"] == "add ladder steps 16, 32"


def test_without_client_load_the_verdict_says_a_saturated_load_machine_is_not_ruled_out(tmp_path):
    run = synthetic_ladder(tmp_path / "run", users=(1, 2, 4, 8), max_num_seqs=4)
    note = rule(verdict_of(run), "client_load_missing")
    assert note["holds"] and "could not rule out a saturated load machine" in note["text"]
    assert "could not rule out a saturated load machine" in (run / "report" / "summary.md").read_text()


@pytest.mark.parametrize("cpu_cores", [0.2])
def test_with_client_load_there_is_no_such_note(tmp_path, cpu_cores):
    run = synthetic_ladder(tmp_path / "run", users=(1, 2, 4, 8), max_num_seqs=4)
    write_client_load(run, [client_load_row(T0 + s + 1.0, cpu_cores=cpu_cores) for s in range(80)])
    verdict = verdict_of(run)
    assert not rule(verdict, "client_load_missing")["holds"]
    assert verdict["bottleneck"] == "scheduler_ceiling"
    assert "could not rule out" not in (run / "report" / "summary.md").read_text()


def test_a_worker_that_sent_requests_without_client_load_rows_is_named(tmp_path):
    # every request of the factory run comes from worker w0; client_load.csv samples only w1 (a
    # sampler that never started on w0, as a new user saw once: 50 requests, no load row)
    run = synthetic_ladder(tmp_path / "run", users=(1, 2, 4, 8), max_num_seqs=4)
    write_client_load(run, [client_load_row(T0 + s + 1.0, worker="w1") for s in range(80)])
    verdict = verdict_of(run)
    note = rule(verdict, "client_load_missing")
    assert note["holds"] and "no row for 1 worker(s) that sent requests (w0)" in note["text"]
    assert verdict["bottleneck"] == "scheduler_ceiling"  # a note: the verdict does not move


def test_more_steps_asked_for_are_the_ones_the_evidence_names():
    # found on the embedded server (max_num_seqs 64, ladder 1...16): the evidence said "add steps
    # 32, 64, 128" and the recommendation "add ladder steps 32, 128" (its values hold only the
    # first and the last of the doublings)
    none = Evidence(
        rule="none",
        kind=BottleneckKind.NONE,
        holds=True,
        values={"highest_users": 16.0, "next_users_1": 32.0, "next_users_2": 128.0},
        text="no saturation up to 16 users: add steps 32, 64, 128 (the configured max_num_seqs is 64)",
    )
    (rec,) = recommend(BottleneckKind.NONE, (), {"none": none}, family="vllm", critical_users=None, client_flags={})
    assert rec.change == "add ladder steps 32, 64, 128"


def test_a_user_stopped_mid_run_is_not_the_runs_stop(tmp_path):
    """Locust stops a user to dispatch the users again when a worker joins (one started again
    after a network cut, tests/e2e/test_worker_partitioned.py): its request in flight is recorded
    ``interrupted`` 5 s into step 1, and the run goes on to step 3's end. The steps after it are
    judged: the stop is only an interruption no request started after."""
    run = synthetic_ladder(tmp_path / "run", users=(1, 2, 4, 8), max_num_seqs=64)
    plan(run, [1, 2, 4, 8])
    requests = pd.read_csv(run / "requests.csv", keep_default_na=False)
    end_s = requests["t_start_s"] + requests["e2e_ms"] / 1000.0
    stopped_s = T0 + 20.0 + 5.0
    [index] = requests.index[(requests["t_start_s"] < stopped_s) & (end_s > stopped_s)][:1]
    requests.loc[index, "error_kind"] = "interrupted"
    requests.loc[index, "e2e_ms"] = (stopped_s - requests.loc[index, "t_start_s"]) * 1000.0
    requests.to_csv(run / "requests.csv", index=False)
    assert (requests["t_start_s"] > stopped_s + 30.0).sum() > 50  # the run went on

    table = analyze_run(run, write=False).verdict.table
    assert not table["incomplete"].any(), table["invalid_reason"].tolist()
    assert table["valid"].all(), table["invalid_reason"].tolist()
    verdict = verdict_of(run)
    assert rule(verdict, "none")["values"]["highest_users"] == 8 and "cut_short" not in rule(verdict, "none")["values"]
