"""One CLI vocabulary (issue 26, item 5): one output-folder name, ``--listen`` for the embedded
server, one ``--max-users`` default, ``--version``, a top-level help for users, defaults in every
``--help``; the old spellings still work, each with one warning line."""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from llm_locust.cli import SUBCOMMANDS, build_parser, locust_parser
from llm_locust.clihelp import HelpFormatter

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)


def command_parser(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser(name)._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def flags(name: str) -> set[str]:
    return {o for a in command_parser(name)._actions if a.help != argparse.SUPPRESS for o in a.option_strings}


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llm_locust.cli", *argv], capture_output=True, text=True, timeout=60, check=False
    )


def test_every_command_with_an_output_folder_calls_it_out():
    for name in ("run", "diagnose", "demo", "compare"):
        assert "--out" in flags(name), name
        assert "--run-dir" not in flags(name), name  # hidden where it still works


@pytest.mark.parametrize("name", ["run", "demo"])
def test_run_dir_still_works_with_one_warning(name, capsys):
    args, _ = build_parser(name).parse_known_args([name, "--run-dir", "runs/x"])
    assert args.run_dir == Path("runs/x")
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"llm-locust {name}: warning: --run-dir is deprecated; use --out"]
    args, _ = build_parser(name).parse_known_args([name, "--out", "runs/y"])
    assert args.run_dir == Path("runs/y") and capsys.readouterr().err == ""


def test_sim_server_listens_on_listen_and_still_takes_host(capsys):
    assert "--listen" in flags("sim-server") and "--host" not in flags("sim-server")
    args = build_parser("sim-server").parse_args(["sim-server", "--listen", "127.0.0.2"])
    assert args.host == "127.0.0.2" and capsys.readouterr().err == ""
    args = build_parser("sim-server").parse_args(["sim-server", "--host", "127.0.0.3"])
    assert args.host == "127.0.0.3"
    assert "--host is deprecated; use --listen" in capsys.readouterr().err


def test_one_max_users_default():
    diagnose = command_parser("diagnose").get_default("max_users")
    run = locust_parser().get_default("max_users")
    assert diagnose == run == 64


def test_version_is_the_installed_distributions():
    done = cli("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"llm-locust {version('llm-locust')}"


def test_the_top_level_help_is_for_users():
    text = cli("--help").stdout
    assert "``" not in text and "entry point" not in text  # not the module's developer docstring
    for name in SUBCOMMANDS:
        assert f"\n    {name}" in text
    assert "llm-locust diagnose --host" in text and "llm-locust demo" in text


@pytest.mark.parametrize("name", list(SUBCOMMANDS))
def test_every_default_is_shown(name):
    parser = command_parser(name)
    formatter = HelpFormatter(prog=parser.prog)
    for action in parser._actions:
        default = action.default
        if action.help == argparse.SUPPRESS or default in (None, False, "", [], argparse.SUPPRESS):
            continue
        if not action.option_strings:
            continue
        shown = formatter._expand_help(action)
        assert "default" in shown.lower(), (name, action.option_strings, shown)
        if "%(default)" in formatter._get_help_string(action):
            assert str(default) in shown
    assert parser.formatter_class is HelpFormatter


def llm_locust_option_strings() -> set[str]:
    from llm_locust.clihelp import _HelpOnlyParser
    from llm_locust.options import add_options

    parser = _HelpOnlyParser(add_help=False)
    add_options(parser)
    return {o for a in parser._actions for o in a.option_strings}


@pytest.mark.parametrize("name", ["run", "diagnose"])
def test_help_lists_every_option_the_command_passes_on(name):
    done = cli(name, "--help")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    for flag in ("--protocol", "--protocol-format", "--server-log-format", "--metrics-url", "--server-log"):
        assert f"  {flag} " in text, flag
    missing = {f for f in llm_locust_option_strings() if f"  {f} " not in text and f"  {f}," not in text}
    missing -= {"--run-dir"}  # the folder is the command's own --out
    if name == "diagnose":  # its own shapes: not passed on
        missing -= {"--rate", "--records-window"}
    assert not missing
    assert "locust -f llm_locust/locustfiles/ladder.py --help" not in text
    assert "llm-locust run --help-locust" in text


def test_help_locust_lists_locusts_own_options_and_ours():
    done = cli("run", "--help-locust")
    assert done.returncode == 0
    for flag in ("--users", "--spawn-rate", "--run-time", "--csv", "--protocol", "--ladder"):
        assert flag in done.stdout, flag
