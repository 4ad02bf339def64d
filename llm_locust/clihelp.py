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
    "add_first_request_flag",
    "locust_parser",
    "parse_locust_args",
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


def add_first_request_flag(parser: argparse.ArgumentParser) -> None:
    """``--no-first-request`` of ``run`` and ``diagnose`` (:mod:`llm_locust.run.firstrequest`)."""
    parser.add_argument(
        "--no-first-request",
        action="store_true",
        help="Start the load without first sending one request of its kind and showing its answer "
        "(a failed one stops the run before any load)",
    )


def locust_parser():
    """Locust's own parser with llm-locust's options added, as the master parses its flags.

    Only Locust's parser module is imported (without gevent's patching, and the variable that
    skips it restored afterwards: left set, it reached every Locust process started later), not
    :mod:`llm_locust.plugin`: the options are added with :func:`llm_locust.options.add_options`
    directly, unless the plugin (imported earlier in this process) already added them through
    ``init_command_line_parser``. The plugin's import pulls in the master's and the workers' code
    (numpy, pandas, requests), which this process never runs.
    """
    import os

    from llm_locust.options import add_options

    skip = "LOCUST_SKIP_MONKEY_PATCH"
    previous = os.environ.get(skip)
    os.environ[skip] = "1"  # the launcher only parses: no gevent patching in this process
    try:
        from locust.argument_parser import get_parser
    finally:
        if previous is None:
            os.environ.pop(skip, None)
        else:
            os.environ[skip] = previous
    parser = get_parser()
    if parser.get_default("ladder") is None:  # not added by an imported llm_locust.plugin
        add_options(parser)
    parser.prog = "llm-locust run"
    return parser


def parse_locust_args(locust_args: list[str], *, strict: bool = True):
    """Parse the pass-through flags with :func:`locust_parser`, as the master will: argparse
    errors (unknown flag, bad value) exit 2 here, before anything starts. ``strict=False`` (a
    user's own locustfile, which may add flags of its own) ignores unknown flags."""
    parser = locust_parser()
    if strict:
        return parser.parse_args(locust_args)
    return parser.parse_known_args(locust_args)[0]
