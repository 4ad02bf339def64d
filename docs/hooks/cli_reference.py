"""mkdocs hook: the CLI reference page (``cli.md``), generated from the argparse parsers at build time.

``llm-locust``'s parsers come from :func:`llm_locust.cli.build_parser`; ``run``'s pass-through flags
(Locust's and llm-locust's own) from Locust's parser with the plugin's options,
:func:`llm_locust.cli.locust_parser`. Nothing is listed by hand, so the page cannot drift.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from llm_locust.cli import locust_parser  # Locust's parser with llm-locust's options, as run parses

__all__ = ["cli_markdown", "locust_parser", "on_page_read_source"]


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
