"""Notes on the load machines' clock offsets (llm_locust/analysis/rundir/clocks.py): at most one line per kind of
problem, whatever the number of workers, and none where no step window exists."""

from llm_locust.analysis.rundir.clocks import clock_notes


def meta(*entries, warmup_s=5.0, kind="ladder"):
    return {"shape": {"kind": kind, "warmup_s": warmup_s}, "clock_offsets": list(entries)}


def test_small_uncertainties_say_nothing():
    assert clock_notes(meta({"worker": "a", "offset_s": -2.0, "uncertainty_s": 0.0004})) == []
    assert clock_notes({"shape": {"warmup_s": 5}}) == []  # a run before clock offsets existed


def test_an_uncertainty_above_a_tenth_of_the_warmup_is_noted():
    notes = clock_notes(
        meta(
            {"worker": "a", "offset_s": 0.1, "uncertainty_s": 0.49},  # 0.49 s <= 0.5 s: fine
            {"worker": "b", "offset_s": 0.3, "uncertainty_s": 0.51},
        )
    )
    assert notes == [
        "clock offset known only within more than 10% of the 5 s warm-up (worker b +0.300 s ±510 ms): "
        "requests near a step's edges may be placed in the wrong window"
    ]


def test_many_workers_make_one_note_not_one_each():
    entries = [{"worker": f"w{i}", "offset_s": 0.0, "uncertainty_s": 0.001} for i in range(4)]
    notes = clock_notes(meta(*entries, warmup_s=0.0))  # no warm-up: any uncertainty matters
    assert len(notes) == 1 and notes[0].startswith("clock offsets known only within")
    assert all(f"w{i} +0.000 s ±1 ms" in notes[0] for i in range(4))


def test_a_baseline_or_a_run_without_steps_has_no_window_edge_to_cross():
    entries = [{"worker": f"w{i}", "offset_s": 0.0, "uncertainty_s": 0.001} for i in range(3)]
    for kind in ("baseline", "none"):
        assert clock_notes(meta(*entries, {"worker": "x", "uncertainty_s": None}, warmup_s=0.0, kind=kind)) == []


def test_a_worker_without_an_exchange_is_noted():
    notes = clock_notes(meta({"worker": "c", "offset_s": None, "uncertainty_s": None, "samples": 0}, "junk"))
    assert notes == ["no clock offset measured for workers c, ?: their records are on their own clock"]
