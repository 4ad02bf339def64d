"""llm-locust's command-line options, added to Locust's own parser.

Registered through ``events.init_command_line_parser`` (see :mod:`llm_locust.plugin`), so plain
``locust -f locustfiles/…`` and ``llm-locust run`` take the same flags, config files and
``LOCUST_*`` environment variables. Locust forwards these options from the master to its workers.
"""

from __future__ import annotations

import argparse

from llm_locust.protocols import ADAPTERS


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def parse_ladder(text: str) -> list[int]:
    """Parse a ladder such as ``"1,2,4,8"`` into increasing positive concurrencies.

    Raises
    ------
    ValueError
        Empty, non-integer, below 1, or not strictly increasing.

    >>> parse_ladder("1, 2,4")
    [1, 2, 4]
    """
    try:
        steps = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"ladder must be comma-separated integers, got {text!r}") from None
    if not steps or steps[0] < 1 or any(b <= a for a, b in zip(steps, steps[1:])):
        raise ValueError(f"ladder must be strictly increasing integers >= 1, got {text!r}")
    return steps


def add_options(parser) -> None:
    """Add llm-locust's options to Locust's ``parser`` (a configargparse parser)."""
    # Locust's own add_argument (not an argument group's) so include_in_web_ui is understood.
    group = parser
    group.add_argument("--model", default="", help="Model name to request (default: the first of GET /v1/models)")
    group.add_argument("--protocol", default="openai-chat", choices=sorted(ADAPTERS), help="Wire protocol")
    group.add_argument("--max-tokens", type=_positive_int, default=64, help="max_tokens per request")
    group.add_argument(
        "--ignore-eos",
        type=lambda s: s.lower() in ("1", "true", "yes", "on"),
        default=True,
        metavar="BOOL",
        help="Send ignore_eos so every request generates max_tokens (default true)",
    )
    group.add_argument("--temperature", type=float, default=0.0, help="Sampling temperature")
    group.add_argument("--prompts-file", default="", help="JSON list of prompts, or one prompt per line")
    group.add_argument(
        "--api-key",
        default="",
        env_var="LLM_LOCUST_API_KEY",
        help="Bearer token (or env LLM_LOCUST_API_KEY); never written to the run directory",
        include_in_web_ui=True,
        is_secret=True,
    )
    group.add_argument("--run-dir", default="", help="Write the run directory here (master or standalone only)")
    group.add_argument("--ladder", default="1,2,4,8", help="Concurrency ladder for LadderShape, e.g. 1,2,4,8")
    group.add_argument("--dwell-s", type=float, default=20.0, help="Seconds each ladder step is held")
    group.add_argument("--warmup-s", type=float, default=5.0, help="Seconds at the start of each step left out of analysis")
    group.add_argument(
        "--drain-s", type=float, default=60.0,
        help="After the last ladder step, at most this long for in-flight requests to finish and be recorded",
    )  # fmt: skip
    group.add_argument("--baseline-requests", type=_positive_int, default=10, help="Requests for BaselineShape")
    group.add_argument(
        "--metrics-url",
        default="",
        help="Prometheus endpoint to scrape during the run (default HOST/metrics; 'none' to disable)",
    )
    group.add_argument("--scrape-interval-s", type=float, default=1.0, help="Seconds between /metrics scrapes")
    group.add_argument(
        "--label", action="append", default=[], metavar="KEY=VALUE", help="Label recorded in run.json (repeatable)"
    )
