"""The booted Locust process's line from the launcher (llm_locust/run/boot.py): format and refusals."""

from __future__ import annotations

import io
import json

import pytest

from llm_locust.run.boot import go_message, read_go


def test_the_line_carries_argv_log_and_key_as_json():
    line = go_message(["-f", "a b.py", "--host", "http://127.0.0.1:1"], "/tmp/x.log", "sk-1")
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {"argv": ["-f", "a b.py", "--host", "http://127.0.0.1:1"], "log": "/tmp/x.log",
                                "api_key": "sk-1"}  # fmt: skip
    assert read_go(io.BytesIO(line)) == json.loads(line)


def test_no_key_no_key_field_and_an_empty_key_is_kept():
    assert "api_key" not in json.loads(go_message([], "l"))
    assert read_go(io.BytesIO(go_message([], "l", "")))["api_key"] == ""


@pytest.mark.parametrize("text", [b"", b"\n", b"   \n"])
def test_no_line_means_no_run(text):
    assert read_go(io.BytesIO(text)) is None


@pytest.mark.parametrize(
    "text",
    [b"[1]\n", b'{"argv": "-f x", "log": "l"}\n', b'{"argv": [1], "log": "l"}\n', b'{"argv": []}\n', b"{\n"],
)
def test_a_malformed_line_is_refused(text):
    with pytest.raises(ValueError):
        read_go(io.BytesIO(text))


def test_entry_points_are_read_once_and_answered_as_before(monkeypatch):
    from importlib import metadata

    from llm_locust.run.boot import entry_points_read_once

    original = metadata.entry_points
    expected = {
        group: sorted(ep.value for ep in original(group=group)) for group in ("console_scripts", "gevent_plugins")
    }
    reads = []

    def counted(**params):
        reads.append(params)
        return original(**params)

    monkeypatch.setattr(metadata, "entry_points", counted)
    with entry_points_read_once():
        for _ in range(3):
            result = {group: sorted(ep.value for ep in metadata.entry_points(group=group)) for group in expected}
            assert result == expected
        assert reads == [{}]
    assert metadata.entry_points is counted


def test_a_masters_line_carries_the_workers_it_forks():
    line = go_message(["--master"], "m.log", None, [(["--worker", "-f", "x.py"], "w0.log"), (["--worker"], "w1.log")])
    assert json.loads(line) == {"argv": ["--master"], "log": "m.log",
                                "workers": [{"argv": ["--worker", "-f", "x.py"], "log": "w0.log"},
                                            {"argv": ["--worker"], "log": "w1.log"}]}  # fmt: skip
    assert read_go(io.BytesIO(line))["workers"][1] == {"argv": ["--worker"], "log": "w1.log"}
    assert "workers" not in json.loads(go_message(["--master"], "m.log", None, []))


@pytest.mark.parametrize(
    "workers",
    [
        {"argv": [], "log": "l"},
        [{"argv": ["x"]}],
        [{"argv": [1], "log": "l"}],
        ["--worker"],
        [{"argv": "x", "log": "l"}],
    ],
)
def test_malformed_workers_are_refused(workers):
    with pytest.raises(ValueError):
        read_go(io.BytesIO(json.dumps({"argv": [], "log": "l", "workers": workers}).encode() + b"\n"))
