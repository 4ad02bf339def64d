"""llm-locust's command-line options, added to Locust's own parser.

Registered through ``events.init_command_line_parser`` (see :mod:`llm_locust.plugin`), so plain
``locust -f locustfiles/…`` and ``llm-locust run`` take the same flags, config files and
``LOCUST_*`` environment variables. Locust forwards these options from the master to its workers.
"""

from __future__ import annotations

import argparse

from llm_locust.protocols import ADAPTERS


def parse_bool(text: str) -> bool:
    """``true/1/yes/on`` (any case) -> True, anything else False.

    >>> parse_bool("On"), parse_bool("false")
    (True, False)
    """
    return text.strip().lower() in ("1", "true", "yes", "on")


def non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _ladder(text: str) -> str:
    """Type of ``--ladder``: checked with :func:`parse_ladder`, kept as the text."""
    try:
        parse_ladder(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


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


def validate_options(options) -> None:
    """Check llm-locust's options together (what one flag's type cannot): the one check shared by
    ``llm-locust run`` (before any process starts), the load shapes and plain ``locust -f``.
    Options missing from ``options`` are skipped.

    Raises
    ------
    ValueError
        The first problem found, as ``--flag: what is wrong`` (one line).
    """

    def get(name):
        return getattr(options, name, None)

    if get("ladder") is not None:
        try:
            parse_ladder(get("ladder"))
        except ValueError as exc:
            raise ValueError(f"--ladder: {exc}") from None
    checks = [
        ("dwell_s", lambda v: v > 0, "must be > 0"),
        ("warmup_s", lambda v: v >= 0, "must be >= 0"),
        ("drain_s", lambda v: v >= 0, "must be >= 0"),
        ("scrape_interval_s", lambda v: v > 0, "must be > 0"),
        ("max_tokens", lambda v: v >= 1, "must be >= 1"),
        ("baseline_requests", lambda v: v >= 1, "must be >= 1"),
    ]
    for name, ok, rule in checks:
        value = get(name)
        if value is not None and not ok(value):
            raise ValueError(f"--{name.replace('_', '-')} {rule}, got {value}")
    warmup_s, dwell_s = get("warmup_s"), get("dwell_s")
    if warmup_s is not None and dwell_s is not None and not warmup_s < dwell_s:
        raise ValueError(f"--warmup-s ({warmup_s}) must be shorter than --dwell-s ({dwell_s})")


def add_options(parser) -> None:
    """Add llm-locust's options to Locust's ``parser`` (a configargparse parser)."""
    # Locust's own add_argument (not an argument group's) so include_in_web_ui is understood.
    group = parser
    group.add_argument("--model", default="", help="Model name to request (default: the first of GET /v1/models)")
    group.add_argument("--protocol", default="openai-chat", choices=sorted(ADAPTERS), help="Wire protocol")
    group.add_argument("--max-tokens", type=positive_int, default=64, help="max_tokens per request")
    group.add_argument(
        "--ignore-eos",
        type=parse_bool,
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
    group.add_argument("--ladder", type=_ladder, default="1,2,4,8", help="Concurrency ladder for LadderShape, e.g. 1,2,4,8")
    group.add_argument("--dwell-s", type=positive_float, default=20.0, help="Seconds each ladder step is held")
    group.add_argument("--warmup-s", type=non_negative_float, default=5.0, help="Seconds at the start of each step left out of analysis")
    group.add_argument(
        "--drain-s", type=non_negative_float, default=60.0,
        help="After the last ladder step, at most this long for in-flight requests to finish and be recorded",
    )  # fmt: skip
    group.add_argument("--baseline-requests", type=positive_int, default=10, help="Requests for BaselineShape")
    group.add_argument(
        "--metrics-url",
        default="",
        help="Prometheus endpoint to scrape during the run (default HOST/metrics; 'none' to disable)",
    )
    group.add_argument("--scrape-interval-s", type=positive_float, default=1.0, help="Seconds between /metrics scrapes")
    group.add_argument(
        "--label", action="append", default=[], metavar="KEY=VALUE", help="Label recorded in run.json (repeatable)"
    )
    add_client_options(group)
    add_server_options(group)


def add_client_options(group) -> None:
    """The client knobs of issue 3: payload, usage, token counting, connections, timeouts."""
    group.add_argument(
        "--payload-file", default="",
        help="A JSON body sent verbatim with every request (or a JSON list of prompts, like --prompts-file)",
    )  # fmt: skip
    group.add_argument(
        "--include-usage", type=parse_bool, default=True, metavar="BOOL",
        help="Ask for a final usage chunk (stream_options.include_usage); false leaves stream_options out",
    )  # fmt: skip
    group.add_argument(
        "--continuous-usage", type=parse_bool, default=False, metavar="BOOL",
        help="Ask for usage on every chunk (vLLM stream_options.continuous_usage_stats): exact tokens per chunk",
    )  # fmt: skip
    group.add_argument(
        "--tokenizer", default="",
        help="Local tokenizer.json (or a folder holding one) to count output tokens when the server sends no usage",
    )  # fmt: skip
    group.add_argument(
        "--keep-alive", type=parse_bool, default=True, metavar="BOOL",
        help="Reuse connections between requests (false: a new connection per request)",
    )  # fmt: skip
    group.add_argument(
        "--connections", type=int, default=0, metavar="N",
        help="Connections shared by all users of a worker (0: one per user); fewer than users queues requests "
             "client-side, recorded as conn_wait_ms",
    )  # fmt: skip
    group.add_argument("--connect-timeout-s", type=non_negative_float, default=60.0,
                       help="Fail a request (connect_timeout) when no connection opens in this time; 0 = off")
    group.add_argument("--ttft-timeout-s", type=non_negative_float, default=900.0,
                       help="Fail a request (ttft_timeout) with no token this long after sending; 0 = off")
    group.add_argument("--stall-timeout-s", type=non_negative_float, default=300.0,
                       help="Fail a request (stall_timeout) when no SSE event comes for this long after the first token; 0 = off")
    group.add_argument("--total-timeout-s", type=non_negative_float, default=0.0,
                       help="Fail a request (total_timeout) that takes longer than this; 0 = off (default)")


def add_server_options(group) -> None:
    """Server-side capture of issue 4: the server's log and extra metrics endpoints."""
    group.add_argument(
        "--server-log", default="", metavar="PATH",
        help="Follow this server log file during the run (on the master); copied into the run "
             "directory as server.log, each line stamped on arrival",
    )  # fmt: skip
    group.add_argument(
        "--server-metrics-url", action="append", default=[], metavar="URL",
        help="Another Prometheus endpoint to scrape with --metrics-url's (repeatable or "
             "comma-separated: a second engine, a GPU exporter); every sample is kept",
    )  # fmt: skip
    group.add_argument(
        "--server-log-format", default="", metavar="FILE",
        help="User format file (TOML: named-group regexes, metric names) for a server without a "
             "built-in parser; copied into the run directory",
    )  # fmt: skip
