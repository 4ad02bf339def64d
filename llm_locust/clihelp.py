"""The CLI's shared vocabulary: help that shows every default, and old option names kept as
hidden, deprecated aliases.

Why own code: argparse's ``ArgumentDefaultsHelpFormatter`` appends ``(default: …)`` to every
option, also to those whose help already says its default in words, and argparse (before
Python 3.13) has no deprecated option; both are a few lines over argparse's own classes.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

__all__ = [
    "DeprecatedAlias",
    "HelpFormatter",
    "Parser",
    "add_deprecated_alias",
    "locust_options_help",
    "add_passthrough_help",
]


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's formatter (descriptions and epilogs kept as written) that appends
    ``(default: X)`` to an option's help when the help does not mention its default already
    and the default says something (not None, False, an empty string or list, not suppressed).

    >>> parser = argparse.ArgumentParser(prog="x", formatter_class=HelpFormatter)
    >>> _ = parser.add_argument("--dwell-s", type=float, default=20.0, help="Seconds per step")
    >>> "Seconds per step (default: 20.0)" in parser.format_help()
    True
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "default" in text.lower()
            or default is None
            or default is False
            or default is argparse.SUPPRESS
            or default in ("", [], ())
            or not action.option_strings
        ):
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose help may end with a section computed when it is shown.

    ``extra_help`` (set after construction, a callable returning text) is called only by
    :meth:`format_help`: ``run``'s help lists the options it passes to Locust, whose module
    is imported only when help is asked for.
    """

    extra_help: Callable[[], str] | None = None

    def format_help(self) -> str:
        text = super().format_help()
        if self.extra_help is not None:
            text = text.rstrip("\n") + "\n\n" + self.extra_help().rstrip("\n") + "\n"
        return text


class DeprecatedAlias(argparse.Action):
    """Store the value under the new option's ``dest``, after one warning line on stderr naming
    the new spelling (``llm-locust run: warning: --run-dir is deprecated; use --out``)."""

    def __init__(self, option_strings, dest, *, new: str, store_true: bool = False, **kwargs):
        if store_true:
            kwargs["nargs"] = 0
        self.new = new
        self.store_true = store_true
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: warning: {option_string} is deprecated; use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, True if self.store_true else values)


def add_deprecated_alias(parser, old: str, new: str, *, dest: str, type=None) -> None:
    """Accept ``old`` as a hidden, deprecated spelling of the option ``new`` (same ``dest``).

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The parser holding ``new``.
    old, new : str
        Option strings, e.g. ``"--run-dir"``, ``"--out"``.
    dest : str
        ``new``'s destination; the alias sets no default of its own.
    type : callable, optional
        ``new``'s type.
    """
    parser.add_argument(
        old, dest=dest, type=type, action=DeprecatedAlias, new=new, default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )


class _HelpOnlyParser(argparse.ArgumentParser):
    """A plain parser that takes Locust's ``add_argument`` keywords (``env_var``,
    ``include_in_web_ui``) and drops them: llm-locust's options laid out for help only."""

    def add_argument(self, *args, env_var=None, include_in_web_ui=True, **kwargs):
        return super().add_argument(*args, **kwargs)


def locust_options_help(exclude: set[str], *, intro: str) -> str:
    """Help text of llm-locust's options that a subcommand passes to its Locust processes
    (:func:`llm_locust.options.add_options`), grouped as ``options.py`` adds them, without
    those whose option string is in ``exclude`` (the subcommand's own).

    Parameters
    ----------
    exclude : set of str
        Option strings not to list (``{"--ladder", "--model"}``).
    intro : str
        The section's first paragraph.
    """
    from llm_locust import options as opts
    from llm_locust.client.workload.options import add_workload_options

    def dests(add) -> set[str]:
        probe = _HelpOnlyParser(add_help=False)
        add(probe)
        return {a.dest for a in probe._actions}

    every = _HelpOnlyParser(add_help=False)
    opts.add_options(every)
    sections = [
        ("request rate (--shape rate)", dests(opts.add_rate_options)),
        ("protocol, payload, connections and timeouts", dests(opts.add_client_options)),
        ("prompts (workload)", dests(add_workload_options)),
        ("server data: log, format file, metrics", dests(opts.add_server_options)),
    ]
    shown = _HelpOnlyParser(prog="", add_help=False, formatter_class=HelpFormatter)
    groups = {title: shown.add_argument_group(f"llm-locust options: {title}") for title, _ in sections}
    core = shown.add_argument_group("llm-locust options: model, requests, ladder, metrics")
    for action in every._actions:
        if not action.option_strings or set(action.option_strings) & exclude:
            continue
        title = next((t for t, names in sections if action.dest in names), None)
        (groups[title] if title else core)._add_action(action)
    formatter = shown._get_formatter()
    formatter.add_text(intro)
    for group in [core, *groups.values()]:
        if group._group_actions:
            formatter.start_section(group.title)
            formatter.add_arguments(group._group_actions)
            formatter.end_section()
    return formatter.format_help()


def add_passthrough_help(parser: argparse.ArgumentParser, *, intro: str, footer: str = "", exclude=()) -> None:
    """End ``parser``'s help (``run``, ``diagnose``: a :class:`Parser`) with llm-locust's Locust
    options the command passes on, without those it defines itself (or lists in ``exclude``);
    computed when the help is shown."""

    def text() -> str:
        own = {s for action in parser._actions for s in action.option_strings} | set(exclude)
        return locust_options_help(own, intro=intro) + (f"\n{footer}\n" if footer else "")

    parser.extra_help = text  # type: ignore[attr-defined]  # a Parser; a plain parser ignores it
