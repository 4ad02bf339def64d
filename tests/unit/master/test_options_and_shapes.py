"""Options, load shapes and run.json redaction."""

from __future__ import annotations

import argparse

import pytest
from locust.event import Events

from llm_locust.client.prompts import DEFAULT_PROMPTS, load_prompts, prompt_set_sha256
from llm_locust.master import shapes
from llm_locust.master.config import parse_labels
from llm_locust.master.recorder import redact_argv
from llm_locust.master.shapes import BaselineShape, LadderShape
from llm_locust.options import parse_ladder


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0


def make_shape(shape_class, clock: FakeClock, **options):
    shape = shape_class()
    shape.get_run_time = lambda: clock.t
    total = argparse.Namespace(num_requests=0)
    shape.runner = argparse.Namespace(
        environment=argparse.Namespace(parsed_options=argparse.Namespace(**options), stop_timeout=0.0, events=Events()),
        stats=argparse.Namespace(total=total),
        user_count=0,
    )
    shape.get_current_user_count = lambda: shape.runner.user_count
    shape.waits_s = []

    def wait_s(seconds):
        shape.waits_s.append(seconds)
        clock.t += seconds

    shape._wait_s = wait_s
    return shape, total


def test_ladder_holds_each_step_then_stops():
    clock = FakeClock()
    shape, _ = make_shape(LadderShape, clock, ladder="1,2,4", dwell_s=10.0, warmup_s=2.0, drain_s=15.0)
    seen = {}
    for t in [0, 5, 8.9, 10, 18.9, 20, 28.9]:
        clock.t = t
        seen[t] = shape.tick()[0]
    assert seen == {0: 1, 5: 1, 8.9: 1, 10: 2, 18.9: 2, 20: 4, 28.9: 4}
    assert shape.waits_s == []  # every change was a tick or more away
    # after the last step: zero users with a graceful stop until the users are gone (drain)
    shape.runner.user_count = 4
    clock.t = 30.0
    assert shape.tick() == (0, pytest.approx(1000.0))
    assert shape.runner.environment.stop_timeout == 15.0
    clock.t = 40.0
    assert shape.tick()[0] == 0  # still 4 users after a tick's wait for them
    assert clock.t == pytest.approx(41.0)
    shape.runner.user_count = 0
    assert shape.tick() is None
    described = shape.describe()
    assert [s["users"] for s in described["steps"]] == [1, 2, 4]
    assert all(s["end_s"] is not None for s in described["steps"])
    assert described["steps"][0]["end_s"] == described["steps"][1]["start_s"]
    assert (described["dwell_s"], described["warmup_s"], described["kind"]) == (10.0, 2.0, "ladder")


def test_ladder_steps_begin_on_time_between_locusts_ticks(monkeypatch):
    # Locust ticks once a second from 0.3 s on; steps of 2.5 s: the changes at 2.5, 5.0 and 7.5 s
    # (the drain) fall between ticks and are waited for, not cut on the next tick; step 0 begins
    # at the clock's start, 0.3 s before the first tick
    clock = FakeClock()
    shape, _ = make_shape(LadderShape, clock, ladder="1,3,5", dwell_s=2.5, warmup_s=1.0, drain_s=5.0)
    shape.runner.user_count = 5  # still draining at the last ticks
    origin = 1_000_000.0
    monkeypatch.setattr(shapes, "local_wall_s", lambda: origin + clock.t)
    ticks = []
    for k in range(9):
        clock.t = max(clock.t, 0.3 + k)
        ticks.append(shape.tick())
    users = [tick[0] for tick in ticks]
    assert users == [1, 1, 3, 3, 5, 5, 5, 0, 0]  # the tick at 2.3 returned 3 at 2.5, ...
    # 2.3 -> 2.5, 4.3 -> 5.0, 7.3 -> 7.5, then the drain's tick at 8.3 looks for the last users a
    # tick long (they stay)
    assert shape.waits_s[:3] == pytest.approx([0.2, 0.7, 0.2])
    assert sum(shape.waits_s[3:]) == pytest.approx(1.0) and max(shape.waits_s[3:]) <= 0.05 + 1e-9
    steps = shape.describe()["steps"]
    assert [s["start_s"] - origin for s in steps] == pytest.approx([0.0, 2.5, 5.0])
    assert [s["end_s"] - origin for s in steps] == pytest.approx([2.5, 5.0, 7.5])


def test_ladder_step_0_begins_when_the_master_restarts_the_clock(monkeypatch):
    # Locust's master: the first tick (at 2 ms) records step 0, then MasterRunner.start runs the
    # test_start listeners (run.json's started_at_s) and restarts the shape's clock (at 40 ms);
    # step 1 begins 5 s after the restart, so step 0 begins at it and lasts 5 s, not 5.038
    wall = FakeClock()
    restarted_at_s = 0.0
    shape, _ = make_shape(LadderShape, wall, ladder="1,2", dwell_s=5.0, warmup_s=1.0, drain_s=0.0)
    shape.get_run_time = lambda: wall.t - restarted_at_s
    origin = 1_000_000.0
    monkeypatch.setattr(shapes, "local_wall_s", lambda: origin + wall.t)
    wall.t = 0.002
    assert shape.tick()[0] == 1
    wall.t = restarted_at_s = 0.040
    shape.reset_time()
    for t in (1.041, 2.041, 3.041, 4.041):  # the last tick waits for step 1, at 5.040
        wall.t = t
        shape.tick()
    steps = shape.describe()["steps"]
    assert [s["start_s"] - origin for s in steps] == pytest.approx([0.040, 5.040])
    assert steps[0]["end_s"] - steps[0]["start_s"] == pytest.approx(5.0)


def test_a_standalone_ladders_step_0_begins_after_the_test_start_listeners(monkeypatch):
    # Locust's LocalRunner: the clock starts, the first tick (at 2 ms) records step 0, then
    # LocalRunner.start runs the test_start listeners (run.json's started_at_s at 30 ms) and
    # starts the users, without restarting the shape's clock: the shape restarts it after them
    wall = FakeClock()
    restarted_at_s = [0.0]
    shape, _ = make_shape(LadderShape, wall, ladder="1,2", dwell_s=5.0, warmup_s=1.0, drain_s=0.0)
    shape.get_run_time = lambda: wall.t - restarted_at_s[0]
    reset_time = shape.reset_time

    def restart():
        restarted_at_s[0] = wall.t
        reset_time()

    shape.reset_time = restart
    origin = 1_000_000.0
    monkeypatch.setattr(shapes, "local_wall_s", lambda: origin + wall.t)
    events = shape.runner.environment.events
    started_at_s = []
    events.test_start.add_listener(lambda **_kwargs: started_at_s.append(shapes.local_wall_s()))  # the run dir's
    wall.t = 0.002
    assert shape.tick()[0] == 1
    wall.t = 0.030
    events.test_start.fire(environment=shape.runner.environment)
    for t in (1.031, 2.031, 3.031, 4.031):  # the last tick waits for step 1, at 5.030
        wall.t = t
        shape.tick()
    steps = shape.describe()["steps"]
    assert [s["start_s"] - origin for s in steps] == pytest.approx([0.030, 5.030])
    assert steps[0]["start_s"] == started_at_s[0]


def test_ladder_rejects_warmup_not_shorter_than_dwell():
    shape, _ = make_shape(LadderShape, FakeClock(), ladder="1,2", dwell_s=5.0, warmup_s=5.0)
    with pytest.raises(ValueError, match="warmup"):
        shape.tick()


def test_baseline_stops_after_n_requests():
    shape, total = make_shape(BaselineShape, FakeClock(), baseline_requests=3)
    assert shape.tick() == (1, 1.0)
    total.num_requests = 3
    assert shape.tick() is None
    assert shape.describe()["requests"] == 3


def test_the_baseline_ends_as_soon_as_its_last_request_is_reported():
    # the worker reports its 3rd and last request at 2.3 s: the test stops then, not at the
    # tick after (3.0 s); a tick before it waits a tick for it, then lets the user go on
    clock = FakeClock()
    shape, _ = make_shape(BaselineShape, clock, baseline_requests=3)
    assert shape.tick() == (1, 1.0) and clock.t == 0.0  # the first tick starts the user at once
    reported_at_s = 2.3

    class Total:  # the master's count of requests, from the worker's reports
        @property
        def num_requests(self) -> int:
            return 3 if clock.t >= reported_at_s - 1e-9 else 2

    shape.runner.stats.total = Total()
    clock.t = 1.0
    assert shape.tick() == (1, 1.0) and clock.t == pytest.approx(2.0)
    assert shape.tick() is None
    assert clock.t == pytest.approx(reported_at_s)
    assert max(shape.waits_s) <= 0.05 + 1e-9


@pytest.mark.parametrize("text", ["", "2,1", "0,1", "1,1", "a,b"])
def test_bad_ladders_are_refused(text):
    with pytest.raises(ValueError):
        parse_ladder(text)


def test_api_key_never_reaches_the_command_line_record():
    argv = ["locust", "--api-key", "sk-secret", "--api-key=sk-other", "--model", "m"]
    assert "sk-secret" not in " ".join(redact_argv(argv)) and "sk-other" not in " ".join(redact_argv(argv))


def test_labels_and_prompts(tmp_path):
    assert parse_labels(["quant=awq", "note=a=b"]) == {"quant": "awq", "note": "a=b"}
    with pytest.raises(ValueError):
        parse_labels(["nokey"])
    path = tmp_path / "p.txt"
    path.write_text("one\n\ntwo\n")
    assert load_prompts(path) == ("one", "two")
    assert load_prompts(None) == DEFAULT_PROMPTS
    assert prompt_set_sha256(("a", "b")) != prompt_set_sha256(("b", "a"))
    empty = tmp_path / "e.txt"
    empty.write_text("\n")
    with pytest.raises(ValueError):
        load_prompts(empty)


@pytest.mark.parametrize(
    ("options", "flag"),
    [
        (dict(ladder="3,1"), "--ladder"),
        (dict(dwell_s=0.0), "--dwell-s"),
        (dict(dwell_s=10.0, warmup_s=10.0), "--warmup-s"),
        (dict(drain_s=-1.0), "--drain-s"),
        (dict(scrape_interval_s=0.0), "--scrape-interval-s"),
        (dict(max_tokens=0), "--max-tokens"),
        (dict(baseline_requests=0), "--baseline-requests"),
    ],
)
def test_validate_options_names_the_bad_flag(options, flag):
    from llm_locust.options import validate_options

    with pytest.raises(ValueError, match=flag):
        validate_options(argparse.Namespace(**options))


def test_option_types_reject_bad_values_in_locusts_parser(capsys):
    from locust.argument_parser import get_parser

    import llm_locust.plugin  # noqa: F401

    parser = get_parser()
    for flags in (["--ladder", "2,1"], ["--dwell-s", "0"], ["--drain-s", "-1"], ["--scrape-interval-s", "0"]):
        with pytest.raises(SystemExit):
            parser.parse_args(flags)
    assert parser.parse_args(["--ladder", "1,2"]).ladder == "1,2"


def test_plain_locust_with_bad_options_exits_2_without_a_traceback(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    ladder = Path(__file__).resolve().parents[3] / "llm_locust" / "locustfiles" / "ladder.py"
    out = subprocess.run([sys.executable, "-m", "locust", "-f", str(ladder), "--headless", "--host", "http://127.0.0.1:1",
                          "--warmup-s", "30", "--dwell-s", "20", "--run-dir", str(tmp_path / "r")],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 2
    assert "--warmup-s" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "r").exists()


def test_api_key_abbreviated_or_anywhere_is_redacted():
    argv = ["locust", "--api-k", "sk-a", "--api=sk-b", "--label", "note=sk-c"]
    out = redact_argv(argv, secret="sk-c")
    assert not any(s in " ".join(out) for s in ("sk-a", "sk-b", "sk-c"))


@pytest.mark.parametrize("name", ["prompts_file", "payload_file"])
def test_a_missing_empty_or_malformed_input_file_is_refused_before_any_load(tmp_path, name):
    import argparse

    from llm_locust.options import validate_options

    flag = "--" + name.replace("_", "-")
    empty, bad, good = tmp_path / "empty.txt", tmp_path / "bad.json", tmp_path / "good.json"
    empty.write_text("")
    bad.write_text("{not json")
    good.write_text('["one prompt"]')
    for path, cause in ((tmp_path / "nope.txt", "No such file"), (empty, "")):
        with pytest.raises(ValueError, match=f"^{flag} {path}: .*{cause}"):
            validate_options(argparse.Namespace(**{name: str(path)}))
    if name == "payload_file":
        with pytest.raises(ValueError, match=f"^{flag} {bad}: "):
            validate_options(argparse.Namespace(**{name: str(bad)}))
    validate_options(argparse.Namespace(**{name: str(good)}))


def _refused(name: str, path) -> str:
    import argparse

    from llm_locust.options import validate_options

    with pytest.raises(ValueError) as info:
        validate_options(argparse.Namespace(**{name: str(path)}))
    return str(info.value)


@pytest.mark.parametrize(
    ("content", "cause"),
    [
        ('[\n  "one",\n  "two"\n  "three"\n]\n', "not a JSON list: Expecting ',' delimiter at line 4 column 3"),
        ('["one", 2, "three"]', "a JSON prompt file must be a list of strings; item 1 is 2"),
        ("[INST] hello [/INST]\nsecond prompt\n", "starts with '[' but is not a JSON list"),
        (b"first prompt\nsecond \xff prompt\n", "not UTF-8 text: byte offset 20 (line 2)"),
    ],
    ids=["json syntax", "json non-string item", "text starting with [", "not utf-8"],
)
def test_a_malformed_prompts_file_is_named_with_its_line_before_any_load(tmp_path, content, cause):
    path = tmp_path / "prompts.txt"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    message = _refused("prompts_file", path)
    assert message.startswith(f"--prompts-file {path}: ") and cause in message, message


@pytest.mark.parametrize(
    ("content", "cause"),
    [
        (
            "name = 'x'\n[log]\ntimestamp = ts\nmax_hold_s = 5\n",
            "not valid TOML (Invalid value (at line 3, column 13))",
        ),
        ("name = 'x'\n[log]\npattern = '(?P<running>\\d+)'\n", "[log]: unknown keys ['pattern']"),
        ("name = 'x'\n[[log.series]]\npattern = '(?P<running>\\d+'\n", "bad regular expression"),
        ("name = 'x'\n[[log.series]]\npattern = 'Running: (?P<runing>\\d+)'\n", "no named group among"),
        ("nme = 'x'\n", "top level: unknown keys ['nme']"),
    ],
    ids=["toml syntax", "unknown key", "bad regex", "misspelt group", "unknown top-level key"],
)
def test_a_malformed_server_log_format_is_refused_before_any_load(tmp_path, content, cause):
    path = tmp_path / "engine.toml"
    path.write_text(content)
    message = _refused("server_log_format", path)
    assert message.startswith(f"--server-log-format {path}: ") and cause in message, message
    assert message.count(str(path)) == 1  # named once, not repeated by the parser's own prefix


def test_a_well_formed_server_log_format_and_a_missing_one(tmp_path):
    import argparse

    from llm_locust.options import validate_options
    from llm_locust.simserver.flavors.generic import FORMAT_TOML

    good = tmp_path / "good.toml"
    good.write_text(FORMAT_TOML)
    validate_options(argparse.Namespace(server_log_format=str(good)))
    refused = _refused("server_log_format", tmp_path / "nope.toml")
    assert "no such file, and not a shipped format (shipped: nginx-error" in refused, refused
    # a shipped format is named, not pointed at (checked like a file)
    validate_options(argparse.Namespace(server_log_format="nginx-error", server_log="nginx-error.log"))


def test_the_drain_ends_as_soon_as_the_last_user_is_gone():
    # the last user stops 0.3 s after a drain tick: the test stops then, not at Locust's next tick
    clock = FakeClock()
    shape, _ = make_shape(LadderShape, clock, ladder="1,2", dwell_s=5.0, warmup_s=1.0, drain_s=15.0)
    shape.runner.user_count = 2
    for t in (0.0, 5.0):
        clock.t = t
        shape.tick()
    clock.t = 10.02  # the drain's first tick, a little after the last step: it tells the users to stop
    assert shape.tick()[0] == 0 and clock.t == 10.02  # at once, without waiting for them
    gone_at_s = 11.3
    shape.get_current_user_count = lambda: 0 if clock.t >= gone_at_s - 1e-9 else 2
    clock.t = 11.0
    assert shape.tick() is None
    assert clock.t == pytest.approx(gone_at_s)


@pytest.mark.parametrize("text", ["nan", "inf", "-1", "-0.5", "Infinity"])
def test_a_temperature_json_cannot_carry_is_refused(text):
    from llm_locust.argtypes import finite_non_negative_float

    with pytest.raises(argparse.ArgumentTypeError):
        finite_non_negative_float(text)
    assert finite_non_negative_float("0") == 0.0 and finite_non_negative_float("1.25") == 1.25
