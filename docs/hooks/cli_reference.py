"""mkdocs hook: the CLI reference page (``cli.md``), generated from the argparse parsers at build time.

``llm-locust``'s parsers come from :func:`llm_locust.cli.build_parser`; ``run``'s pass-through flags
(Locust's and llm-locust's own) from Locust's parser with the plugin's options,
:func:`docs.hooks.cli_reference.locust_parser`. Nothing is listed by hand, so the page cannot drift.
"""

from __future__ import annotations

import argparse
import os
from typing import Any


def locust_parser() -> argparse.ArgumentParser:
    """Locust's own argument parser with llm-locust's options added, as ``llm-locust run`` parses them."""
    # no gevent patching in this process, and none left for the processes it starts afterwards:
    # the variable, left set in a test process, reached every Locust worker the later tests
    # started (unpatched, they blocked and lost their heartbeats)
    skip = "LOCUST_SKIP_MONKEY_PATCH"
    previous = os.environ.get(skip)
    os.environ[skip] = "1"
    try:
        from locust.argument_parser import get_parser
    finally:
        if previous is None:
            os.environ.pop(skip, None)
        else:
            os.environ[skip] = previous

    from llm_locust.options import add_options

    parser = get_parser()
    if parser.get_default("ladder") is None:
        add_options(parser)
    parser.prog = "llm-locust run"
    return parser


def _help(parser: argparse.ArgumentParser) -> str:
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # the help's width on the page, for this call only
    try:
        return parser.format_help()
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous


def cli_markdown() -> str:
    """The page's markdown: the top-level help, then each subcommand's ``--help``."""
    from llm_locust.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = [
        "# CLI reference",
        "",
        "Generated from the argparse parsers when the site is built (`docs/hooks/cli_reference.py`).",
        "",
        "## llm-locust",
        "",
        "```text",
        _help(parser).rstrip(),
        "```",
    ]
    for name, command in sub.choices.items():
        out += ["", f"## llm-locust {name}", "", "```text", _help(command).rstrip(), "```"]
        if name == "run":
            out += [
                "",
                "### Flags `run` passes to Locust (Locust's own and llm-locust's options)",
                "",
                "```text",
                _help(locust_parser()).rstrip(),
                "```",
            ]
    return "\n".join(out) + "\n"


def on_page_read_source(page: Any, config: Any) -> str | None:
    """mkdocs event: the source of ``cli.md`` is generated; other pages are read from disk."""
    if page.file.src_uri == "cli.md":
        return cli_markdown()
    return None
