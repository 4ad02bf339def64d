"""Every ``llm-locust …`` command line shown in README.md and docs/ parses with the real parsers.

The parsers are the CLI's own (:func:`llm_locust.cli.build_parser`); the flags ``run`` and
``diagnose`` pass on go through Locust's parser with llm-locust's options
(:func:`llm_locust.cli.parse_locust_args`), as the master parses them. An unknown flag or a bad
value is a failure naming the file and line. The CLI reference page is generated from the same
parsers (docs/hooks/cli_reference.py).
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

import pytest

from llm_locust.cli import SUBCOMMANDS, build_parser, parse_locust_args

ROOT_DIR = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT_DIR / "docs" / "hooks"))
from cli_reference import cli_markdown, locust_parser  # noqa: E402  (the docs' own hook, not a package)

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND = re.compile(r"(?:^|[\s;&|(`$])(?:\S*/)?llm-locust\s+([a-z-]+)(?=\s|$)(.*)$")


def command_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, command text) of each ``llm-locust <subcommand>`` command line: in a fenced
    shell block (bash/sh/shell/console) or an indented code block, backslash continuations joined;
    output blocks (no language, ``text``) are skipped. Inline code spans are :func:`_mentions`."""
    out: list[tuple[int, str]] = []
    lang: str | None = None
    pending = ""
    start = 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("```"):
            lang = None if lang is not None else (stripped[3:].strip() or "text")
            continue
        if lang is None:
            if line.startswith("    ") and stripped.startswith(("llm-locust ", ".venv/bin/llm-locust ")):
                pending, start = stripped, number  # an indented code block
                if pending.endswith("\\"):
                    pending = pending[:-1].rstrip()
                    lang = "indented"
                    continue
                out.append((start, pending))
                pending = ""
            continue
        if lang == "indented" and not line.startswith("    "):
            out.append((start, pending))
            pending, lang = "", None
            continue
        if lang not in ("bash", "sh", "shell", "console", "indented"):
            continue
        if pending:
            pending += " " + stripped
        elif not stripped.startswith("#") and "llm-locust " in stripped:
            pending, start = stripped, number
        else:
            continue
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        out.append((start, pending))
        pending = ""
        if lang == "indented":
            lang = None
    return out


def _words(text: str) -> list[str]:
    """The command's words, up to a shell operator (pipe, redirect, &&, &, ;) or a comment."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words = []
    for word in lexer:
        if word and set(word) <= set(";&|<>"):
            break
        words.append(word)
    return words


def _cases() -> list[tuple[str, str]]:
    cases = []
    for path in PAGES:
        for number, text in command_lines(path):
            match = COMMAND.search(text)
            if match and match.group(1) in SUBCOMMANDS:
                cases.append((f"{path.relative_to(ROOT)}:{number}", match.group(1) + match.group(2)))
    return cases


def _mentions() -> list[tuple[str, str]]:
    """Inline code spans that name a subcommand with some of its flags (not a whole command line)."""
    cases = []
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"`(?:\S*/)?llm-locust ([a-z-]+)((?: [^`]*)?)`", text):
            if m.group(1) in SUBCOMMANDS:
                number = text[: m.start()].count("\n") + 1
                cases.append((f"{path.relative_to(ROOT)}:{number}", m.group(1) + " ".join(m.group(2).split(" "))))
    return cases


def known_flags(command: str, *, shown_only: bool = False) -> set[str]:
    """Every option string ``llm-locust <command>`` accepts: its own, and for ``run``/``diagnose``
    those of Locust's parser with llm-locust's options (what they pass on). ``shown_only``: those
    its ``--help`` lists (not ``argparse.SUPPRESS``)."""
    parser = build_parser(command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    actions = list(sub.choices[command]._actions)
    if command in ("run", "diagnose"):
        actions += locust_parser()._actions
    return {o for a in actions if not (shown_only and a.help == argparse.SUPPRESS) for o in a.option_strings}


CASES = _cases()
MENTIONS = _mentions()


def test_the_pages_show_commands():
    # the README's three "aim it at your server" commands at least, and every subcommand somewhere
    shown = {text.split()[0] for _, text in CASES}
    assert shown == set(SUBCOMMANDS), shown
    assert sum(where.startswith("README.md") for where, _ in CASES) >= 4


@pytest.mark.parametrize(("where", "text"), CASES, ids=[w for w, _ in CASES])
def test_a_shown_command_parses(where, text):
    argv = [w for w in _words(text) if not re.fullmatch(r"\[.*\]|\.\.\.|…", w)]
    try:
        args, rest = build_parser(argv[0]).parse_known_args(argv)
        if argv[0] in ("run", "diagnose"):
            parse_locust_args(rest)
        elif rest:
            pytest.fail(f"{where}: unrecognized arguments {rest}: {text}")
    except SystemExit as exc:
        pytest.fail(f"{where}: does not parse ({exc.code}): {text}")


@pytest.mark.parametrize(("where", "text"), MENTIONS, ids=[w for w, _ in MENTIONS])
def test_a_mentioned_flag_exists(where, text):
    command, *words = text.split()
    unknown = [w for w in words if w.startswith("-") and w.split("=")[0] not in known_flags(command)]
    assert not unknown, f"{where}: llm-locust {command} has no {unknown}"


def test_the_extractor_joins_continuations_and_skips_output(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\n# llm-locust run --not-this\n.venv/bin/llm-locust run --host h \\\n    --ladder 1,2\n```\n"
        "```\nllm-locust compare: error: output, not a command\n```\n",
        encoding="utf-8",
    )
    assert command_lines(page) == [(3, ".venv/bin/llm-locust run --host h --ladder 1,2")]


def test_an_unknown_flag_fails():
    with pytest.raises(SystemExit):
        parse_locust_args(build_parser("run").parse_known_args(["run", "--host", "http://x", "--no-such"])[1])


def test_the_cli_reference_lists_every_option():
    page = cli_markdown()
    for command in SUBCOMMANDS:
        assert f"## llm-locust {command}" in page
        for flag in known_flags(command, shown_only=True):
            if flag.startswith("--") and command != "diagnose":  # diagnose's pass-on flags: under run
                assert flag in page, (command, flag)


def test_building_the_reference_leaves_the_environment_as_it_was(monkeypatch):
    # LOCUST_SKIP_MONKEY_PATCH left set by this module reached every Locust worker the later
    # end-to-end tests started: unpatched, they blocked and lost their heartbeats (79 failures)
    monkeypatch.delenv("LOCUST_SKIP_MONKEY_PATCH", raising=False)
    monkeypatch.delenv("COLUMNS", raising=False)
    cli_markdown()
    locust_parser()
    assert "LOCUST_SKIP_MONKEY_PATCH" not in __import__("os").environ
    assert "COLUMNS" not in __import__("os").environ


def deprecated_flags(command: str) -> set[str]:
    """The hidden, deprecated spellings ``llm-locust <command>`` still accepts (``--run-dir``)."""
    from llm_locust.clihelp import DeprecatedAlias

    parser = build_parser(command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {o for a in sub.choices[command]._actions if isinstance(a, DeprecatedAlias) for o in a.option_strings}


def test_the_pages_use_no_deprecated_spelling():
    old = [
        (where, flag)
        for where, text in [*CASES, *MENTIONS]
        for flag in deprecated_flags(text.split()[0])
        if flag in _words(text)
    ]
    assert not old, old
    assert deprecated_flags("run") == {"--run-dir"} and deprecated_flags("sim-server") == {"--host"}


def test_the_format_file_page_names_every_group():
    # the group batch_wait_max_ms was documented only in llm_locust/analysis/server/userformat.py
    from llm_locust.analysis.server.userformat import BATCH_GROUPS, CONFIG_GROUPS, METRIC_COLUMNS, SERIES_GROUPS

    page = (ROOT / "docs" / "server-data.md").read_text(encoding="utf-8")
    rows = [line for line in page.splitlines() if line.startswith("| ")]
    for group in (*SERIES_GROUPS, *BATCH_GROUPS, *CONFIG_GROUPS, *METRIC_COLUMNS):
        assert any(f"`{group}`" in row for row in rows), group
