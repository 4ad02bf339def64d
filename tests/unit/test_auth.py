"""``llm_locust/auth.py``: the key taken off a command line, every spelling argparse accepts, and
the re-executed command (checked in a real child process: its ``/proc/<pid>/cmdline``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from llm_locust.auth import API_KEY_ENV, api_key_out_of_argv

KEY = "sk-auth-unit-5f1c"


@pytest.mark.parametrize(
    ("argv", "rest", "key"),
    [
        (["run", "--api-key", KEY, "-u", "1"], ["run", "-u", "1"], KEY),
        (["run", f"--api-key={KEY}"], ["run"], KEY),
        (["run", "--api-k", KEY, "--api=sk-2"], ["run"], "sk-2"),  # abbreviations; the last one wins
        (["run", "--api-key", ""], ["run"], ""),
        (["run", "--label", f"note={KEY}", "--apikey", "x"], ["run", "--label", f"note={KEY}", "--apikey", "x"], None),
        (["run", "--api-key"], ["run"], ""),  # no value: an empty key, nothing left behind
    ],
)
def test_api_key_out_of_argv(argv, rest, key):
    assert api_key_out_of_argv(argv) == (rest, key)


def test_reexec_moves_the_key_to_the_environment_same_pid():
    code = (
        "import os, sys\n"
        "from llm_locust.auth import reexec_without_api_key\n"
        "pid = os.environ.get('FIRST_PID') or str(os.getpid())\n"
        "os.environ['FIRST_PID'] = pid\n"
        "reexec_without_api_key()\n"
        "cmdline = open(f'/proc/{os.getpid()}/cmdline', 'rb').read()\n"
        "key = os.environ.get('" + API_KEY_ENV + "')\n"
        "print(pid == str(os.getpid()), sys.argv[1:], key, key.encode() in cmdline)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, "--model", "m", "--api-key", KEY, "-u", "2"],
        capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert result.stdout.strip() == f"True ['--model', 'm', '-u', '2'] {KEY} False", result.stderr
