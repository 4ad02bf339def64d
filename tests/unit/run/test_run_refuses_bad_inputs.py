"""``llm-locust run`` with a malformed prompts file or server-log format file: one error line naming
the file and where in it, exit 2, and not one byte sent to the server (issue 14)."""

from __future__ import annotations

import pytest

from llm_locust.cli import main
from tests.conftest import server_log, stop
from tests.scripted_server import sse_script

BAD = {
    "--prompts-file": ("prompts.json", '["a",\n "b"\n "c"]', "Expecting ',' delimiter at line 3 column 2"),
    "--server-log-format": ("engine.toml", "name = 'x'\n[log]\nserie = 1\n", "[log]: unknown keys ['serie']"),
}


@pytest.mark.parametrize("flag", sorted(BAD))
def test_refused_before_any_request(scripted_server, tmp_path, capsys, flag):
    name, content, cause = BAD[flag]
    path = tmp_path / name
    path.write_text(content)
    url, process = scripted_server(sse_script([(0.0, "data: [DONE]\n\n")]))

    with pytest.raises(SystemExit) as info:
        main(["run", "--host", url, "--model", "m", flag, str(path), "--out", str(tmp_path / "run")])
    stop(process)

    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"llm-locust run: error: {flag} {path}: ") and cause in err[0], err
    assert server_log(process)["connections"] == 0
    assert not (tmp_path / "run").exists()


HUGE = "99999999999999999999999"


@pytest.mark.parametrize(
    ("args", "file", "cause"),
    [
        # too large for a server's or msgpack's integer: it used to crash the master's spawn message
        (["--max-tokens", HUGE], None, f"--max-tokens: must be <= 2147483647, got {HUGE}"),
        # the same in a dataset item: it used to crash the worker's record shipping
        (["--dataset"], ("items.jsonl", '{"prompt": "a", "max_tokens": ' + HUGE + "}\n"), "'max_tokens' must be"),
        # a rate run without a rate used to fail inside the master after the processes started
        (["--shape", "rate"], None, "--shape rate needs --rate R or --rates"),
        (["--shape", "rate", "--rate", "0"], None, "--shape rate needs --rate R or --rates"),
        # a rate given to a ladder run used to be ignored without a word
        (["--rate", "5"], None, "--rate/--rates take effect with --shape rate only"),
        # a trace's bad line, and a trace under a closed-loop shape
        (
            ["--trace-format", "mooncake", "--trace"],
            (
                "t.jsonl",
                '{"timestamp": 5, "input_length": 9, "output_length": 1}\n{"timestamp": 4, "input_length": 9}\n',
            ),
            "--trace: ",
        ),
        (
            ["--shape", "ladder", "--trace"],
            ("t.jsonl", '{"timestamp_s": 0, "input_tokens": 9, "output_tokens": 1}\n'),
            "--trace is replayed open-loop by --shape rate (this run's shape: ladder)",
        ),
    ],
    ids=[
        "max-tokens",
        "dataset-max-tokens",
        "rate-missing",
        "rate-zero",
        "rate-without-rate-shape",
        "trace-bad-line",
        "trace-closed-loop",
    ],
)
def test_out_of_range_or_missing_values_refused_before_any_request(
    scripted_server, tmp_path, capsys, args, file, cause
):
    if file is not None:
        (tmp_path / file[0]).write_text(file[1])
        args = [*args, str(tmp_path / file[0])]
    url, process = scripted_server(sse_script([(0.0, "data: [DONE]\n\n")]))

    with pytest.raises(SystemExit) as info:
        main(["run", "--host", url, "--model", "m", *args, "--out", str(tmp_path / "run")])
    stop(process)

    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert cause in err, err
    assert server_log(process)["connections"] == 0
    assert not (tmp_path / "run").exists()
