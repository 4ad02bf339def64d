"""llm-locust's command-line options, added to Locust's own parser.

Registered through ``events.init_command_line_parser`` (see :mod:`llm_locust.plugin`), so plain
``locust -f llm_locust/locustfiles/…`` and ``llm-locust run`` take the same flags, config files and
``LOCUST_*`` environment variables. Locust forwards these options from the master to its workers.
"""

from __future__ import annotations

import argparse
import math
import shlex
import shutil

from llm_locust.argtypes import (
    finite_non_negative_float,
    non_negative_float,
    positive_float,
    positive_int,
)
from llm_locust.client.protocols import ADAPTERS
from llm_locust.client.workload.options import add_workload_options, validate_workload_options
from llm_locust.client.workload.trace import TraceFormat


def parse_bool(text: str) -> bool:
    """``true/1/yes/on`` (any case) -> True, anything else False.

    >>> parse_bool("On"), parse_bool("false")
    (True, False)
    """
    return text.strip().lower() in ("1", "true", "yes", "on")


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


def parse_rates(text: str) -> list[float]:
    """Parse a rate ladder such as ``"1,2,4.5"`` (requests/s) into increasing positive rates.

    Raises
    ------
    ValueError
        Empty, not a number, not finite, not above 0, or not strictly increasing.

    >>> parse_rates("1, 2,4.5")
    [1.0, 2.0, 4.5]
    """
    try:
        rates = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"rates must be comma-separated numbers (requests/s), got {text!r}") from None
    ok = all(math.isfinite(r) and r > 0 for r in rates) and all(b > a for a, b in zip(rates, rates[1:]))
    if not rates or not ok:
        raise ValueError(f"rates must be strictly increasing numbers > 0 (requests/s), got {text!r}")
    return rates


def rate_ladder(options) -> list[float]:
    """The request rates of a rate run: ``[--rate]`` when it is given (> 0), else ``--rates``.

    Raises
    ------
    ValueError
        Both or neither given, or a malformed ``--rates`` (as ``--flag: what is wrong``).
    """
    rate, rates = getattr(options, "rate", 0.0) or 0.0, getattr(options, "rates", "") or ""
    if rate > 0 and rates:
        raise ValueError("--rate and --rates: give one of them (one rate, or a ladder of rates)")
    if rate > 0:
        return [float(rate)]
    if not rates:
        raise ValueError("--shape rate needs --rate R or --rates R1,R2,... (requests/s)")
    try:
        return parse_rates(rates)
    except ValueError as exc:
        raise ValueError(f"--rates: {exc}") from None


def split_named_url(item: str) -> tuple[str, str]:
    """``"a=http://h:1/metrics"`` -> ``("a", "http://h:1/metrics")``; a plain URL -> ``("", url)``.

    A name is what comes before the first ``=`` when the rest starts with ``http://`` or
    ``https://`` (a ``=`` inside a URL's query is no name).

    >>> split_named_url("gpu0=http://h:1/metrics")
    ('gpu0', 'http://h:1/metrics')
    >>> split_named_url("http://h:1/metrics?x=1")
    ('', 'http://h:1/metrics?x=1')
    """
    name, sep, rest = item.partition("=")
    if sep and name and "/" not in name and rest.lower().startswith(("http://", "https://")):
        return name.strip(), rest.strip()
    return "", item.strip()


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
    if get("rates") or (get("rate") or 0) > 0:
        rate_ladder(options)
    checks = [
        ("dwell_s", lambda v: v > 0, "must be > 0"),
        ("warmup_s", lambda v: v >= 0, "must be >= 0"),
        ("drain_s", lambda v: v >= 0, "must be >= 0"),
        ("scrape_interval_s", lambda v: v > 0, "must be > 0"),
        ("max_tokens", lambda v: v >= 1, "must be >= 1"),
        ("baseline_requests", lambda v: v >= 1, "must be >= 1"),
        ("max_users", lambda v: v >= 1, "must be >= 1"),
        ("burstiness", lambda v: v > 0, "must be > 0"),
    ]
    for name, ok, rule in checks:
        value = get(name)
        if value is not None and not ok(value):
            raise ValueError(f"--{name.replace('_', '-')} {rule}, got {value}")
    for name in ("prompts_file", "payload_file", "server_log_format"):
        if get(name):
            _check_input_file(name, get(name))
    if get("server_log_format") and (problem := log_format_problem(get("server_log_format"), followed=bool(
        get("server_log") or get("server_log_cmd")))):  # fmt: skip
        raise ValueError(problem)
    validate_workload_options(options)
    if get("trace"):
        validate_trace_options(options)
    if get("slo"):
        from llm_locust.analysis.perstep.goodput import parse_slo

        parse_slo(get("slo"))  # its messages start with --slo
    if get("protocol") is not None:
        check_protocol(get("protocol"), get("protocol_format") or "", bool(get("no_stream")))
    if get("server_log_cmd"):
        if get("server_log"):
            raise ValueError("--server-log and --server-log-cmd: give one of them (one server log per run)")
        parse_log_command(get("server_log_cmd"))
    if get("server_metrics_url"):
        from llm_locust.analysis.schema import source_names

        pairs = [split_named_url(p) for item in get("server_metrics_url") for p in item.split(",") if p.strip()]
        try:
            source_names([url for _, url in pairs], {url: name for name, url in pairs if name})
        except ValueError as exc:
            raise ValueError(f"--server-metrics-url: {exc}") from None
    warmup_s, dwell_s = get("warmup_s"), get("dwell_s")
    if warmup_s is not None and dwell_s is not None and not warmup_s < dwell_s:
        raise ValueError(f"--warmup-s ({warmup_s}) must be shorter than --dwell-s ({dwell_s})")


TRACE_CONFLICTS = (
    ("rate", "--rate"), ("rates", "--rates"), ("input_tokens", "--input-tokens"), ("dataset", "--dataset"),
    ("prompts_file", "--prompts-file"), ("payload_file", "--payload-file"), ("session_turns", "--session-turns"),
)  # fmt: skip
"""Options a ``--trace`` replaces (it holds the times, the lengths and the sessions)."""


def validate_trace_options(options) -> None:
    """Check ``--trace`` with the options it replaces, and read the whole trace (so a bad line is
    refused before any load).

    Raises
    ------
    ValueError
        ``--trace`` with one of :data:`TRACE_CONFLICTS`, or
        :class:`~llm_locust.client.workload.trace.TraceError` / an unreadable file, as
        ``--trace: FILE line N: what is wrong``.
    """
    from llm_locust.client.workload.trace import read_trace

    for name, flag in TRACE_CONFLICTS:
        if getattr(options, name, None):
            raise ValueError(f"--trace holds each request's time and lengths: leave out {flag}")
    try:
        read_trace(options.trace, getattr(options, "trace_format", "jsonl"))
    except OSError as exc:
        raise ValueError(f"--trace {options.trace}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValueError(f"--trace: {exc}") from None


def check_protocol(protocol: str, format_file: str, no_stream: bool) -> None:
    """Check ``--protocol`` with ``--protocol-format`` and ``--no-stream``: the format file is
    read and checked here, so a malformed one is refused before any load.

    Raises
    ------
    ValueError
        A format file missing for ``generic`` or given to another protocol, a malformed one
        (the message names the file and the key), or ``--no-stream`` where it does not apply.
    """
    from llm_locust.client.protocols import get_adapter
    from llm_locust.client.protocols.genericformat import load_format

    fmt = load_format(format_file) if format_file else None
    get_adapter(protocol, stream=not no_stream, fmt=fmt)


def parse_log_command(command: str) -> list[str]:
    """Split ``--server-log-cmd`` into argv and check that its program exists.

    Raises
    ------
    ValueError
        Empty, unbalanced quotes, or the program is not found on ``PATH``.
    """
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ValueError(f"--server-log-cmd {command!r}: {exc}") from None
    if not argv:
        raise ValueError("--server-log-cmd is empty")
    if shutil.which(argv[0]) is None:
        raise ValueError(f"--server-log-cmd: program {argv[0]!r} not found on PATH")
    return argv


def _load_format_file(path: str) -> None:
    """Parse a ``--server-log-format`` file (or shipped format name, ``nginx-error``) as the
    analysis will (TOML; its errors name the line and column, or the table and key)."""
    from llm_locust.analysis.server.userformat import UserFormatError, format_file_path, load_user_format

    try:
        load_user_format(format_file_path(path).read_text(encoding="utf-8"), source=path)
    except UserFormatError as exc:  # its message starts with the path, which the caller names
        raise ValueError(str(exc).removeprefix(f"{path}: ")) from None


def log_format_problem(path: str, *, followed: bool) -> str | None:
    """Why ``--server-log-format PATH`` would do nothing: no log is followed (no ``--server-log``
    or ``--server-log-cmd``) and the file has no ``[metrics]`` table either, or None.

    >>> log_format_problem("any.toml", followed=True) is None
    True
    """
    if followed:
        return None
    from llm_locust.analysis.server.userformat import UserFormatError, format_file_path, load_user_format

    try:
        fmt = load_user_format(format_file_path(path).read_text(encoding="utf-8"), source=path)
    except (OSError, UserFormatError):
        return None  # refused with its own message by the file check
    if fmt.metric_specs or fmt.metric_config:
        return None  # its [metrics] table reads the scraped /metrics
    return (
        f"--server-log-format {path} reads a server log, and none is followed: add --server-log PATH "
        '(or --server-log-cmd "CMD")'
    )


def _check_input_file(name: str, path: str) -> None:
    """Read ``--prompts-file`` / ``--payload-file`` with the loader the workers use, and
    ``--server-log-format`` with the analysis's parser, so a missing, empty or malformed file is
    refused before any load is sent (naming the file and the cause)."""
    from llm_locust.client.config import load_payload
    from llm_locust.client.prompts import load_prompts

    loaders = {"prompts_file": load_prompts, "payload_file": load_payload, "server_log_format": _load_format_file}
    loader = loaders[name]
    try:
        loader(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"--{name.replace('_', '-')} {path}: {exc}") from None


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
    group.add_argument("--temperature", type=finite_non_negative_float, default=0.0, help="Sampling temperature")
    group.add_argument("--prompts-file", default="", help="JSON list of prompts, or one prompt per line")
    group.add_argument(
        "--api-key",
        default="",
        env_var="LLM_LOCUST_API_KEY",
        help="Bearer token (or env LLM_LOCUST_API_KEY); never written to the run directory nor shown in the web UI",
        include_in_web_ui=False,  # Locust's page would carry the value (extra_options.*.default_value)
    )
    group.add_argument("--run-dir", default="", help="Write the run directory here (master or standalone only)")
    group.add_argument(
        "--ladder", type=_ladder, default="1,2,4,8", help="Concurrency ladder for LadderShape, e.g. 1,2,4,8"
    )
    group.add_argument("--dwell-s", type=positive_float, default=20.0, help="Seconds each ladder step is held")
    group.add_argument(
        "--warmup-s",
        type=non_negative_float,
        default=5.0,
        help="Seconds at the start of each step left out of analysis",
    )
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
        "--scrape-timeout-s", type=non_negative_float, default=0.0,
        help="Total time (connect + read) one scrape may take, each endpoint on its own; "
             "0 = 2.9 x --scrape-interval-s (default)",
    )  # fmt: skip
    group.add_argument(
        "--scrape-max-bytes", type=positive_int, default=8 * 1024 * 1024,
        help="Largest /metrics body read (default 8 MiB); a bigger one is aborted and recorded as a failed scrape",
    )  # fmt: skip
    group.add_argument(
        "--slo", default="", metavar="OBJECTIVES",
        help='Service-level objectives for goodput in the report, e.g. "ttft_ms<=500,tpot_ms<=50" '
             "(recorded in run.json; llm-locust analyze --slo overrides)",
    )  # fmt: skip
    group.add_argument(
        "--label", action="append", default=[], metavar="KEY=VALUE", help="Label recorded in run.json (repeatable)"
    )
    add_rate_options(group)
    add_client_options(group)
    add_workload_options(group)
    add_server_options(group)
    group.add_argument(
        "--records-window", type=positive_int, default=200_000, metavar="N",
        help="Records a worker ships that the master has not written yet, at most; the rest wait on the worker "
             "(backpressure when the master cannot keep up)",
    )  # fmt: skip
    bind_web_ui_to_loopback(parser)


WEB_HOST_DEFAULT = "127.0.0.1"
"""Where the web UI listens when llm-locust is loaded and ``--web-host`` is not given."""


def bind_web_ui_to_loopback(parser) -> None:
    """Make Locust's ``--web-host`` default 127.0.0.1 instead of every interface.

    The web UI starts and stops the load and, with ``--run-dir``, serves ``requests.csv``; a UI
    others must reach is a choice: ``--web-host 0.0.0.0`` (or ``LOCUST_WEB_HOST``), with
    ``--web-login`` to protect it.
    """
    for action in parser._actions:  # configargparse/argparse keep no public lookup by dest
        if action.dest == "web_host":
            action.help = (
                f"Host to bind the web interface to. Defaults to {WEB_HOST_DEFAULT} with llm-locust "
                "(only this machine); '*' or 0.0.0.0 for all interfaces (add --web-login)"
            )
    parser.set_defaults(web_host=WEB_HOST_DEFAULT)


MAX_USERS_DEFAULT = 64
"""``--max-users`` of every command: a rate run's pool of users, ``diagnose``'s ladder bound."""


def add_rate_options(group) -> None:
    """The request-rate (open-loop) shape's options (:class:`~llm_locust.master.rateshape.RateShape`)."""
    group.add_argument(
        "--rate", type=non_negative_float, default=0.0, metavar="R",
        help="Requests per second over all workers, sent on a fixed schedule (--shape rate); held --dwell-s",
    )  # fmt: skip
    group.add_argument(
        "--rates", default="", metavar="R1,R2,...",
        help="Rate ladder (requests/s), each rate held --dwell-s (--shape rate), e.g. 1,2,4,8",
    )  # fmt: skip
    group.add_argument(
        "--arrival", default="constant", choices=["constant", "poisson"],
        help="Spacing of the sends: constant (evenly spaced) or poisson (random; see --burstiness)",
    )  # fmt: skip
    group.add_argument(
        "--burstiness", type=positive_float, default=1.0,
        help="With --arrival poisson: gamma shape of the gaps (1 = Poisson, < 1 burstier, > 1 more regular; "
             "as vLLM's benchmark --burstiness)",
    )  # fmt: skip
    group.add_argument(
        "--max-users", type=positive_int, default=MAX_USERS_DEFAULT, metavar="N",
        help="Rate runs: users over all workers that send the schedule (one request each at a time); "
             "a send due when none is free leaves late, its lag recorded",
    )  # fmt: skip
    group.add_argument(
        "--rate-seed", type=int, default=-1, metavar="N",
        help="Seed of the poisson schedule (worker i draws with N + i); -1: a new one per run (in run.json)",
    )  # fmt: skip
    group.add_argument(
        "--trace", default="", metavar="FILE",
        help="Replay a request trace open-loop (--shape rate): each request at its own time, with its input and "
             "output lengths (exact, as --input-tokens builds them) and shared prefixes; see --trace-format",
    )  # fmt: skip
    group.add_argument(
        "--trace-format", default="jsonl", choices=[f.value for f in TraceFormat],
        help="--trace's format: jsonl ({timestamp_s|interarrival_s, input_tokens, output_tokens, session_id?, "
             "prefix_id?, prefix_tokens?}), mooncake (Mooncake's JSONL: timestamp ms, input_length, output_length, "
             "hash_ids) or azure (Azure LLM inference CSV: TIMESTAMP,ContextTokens,GeneratedTokens)",
    )  # fmt: skip
    group.add_argument(
        "--trace-speed", type=positive_float, default=1.0, metavar="X",
        help="Replay the trace X times as fast (2: every gap halved); 1 = at its own times",
    )  # fmt: skip


def add_client_options(group) -> None:
    """The client knobs of issue 3: payload, usage, token counting, connections, timeouts."""
    group.add_argument(
        "--payload-file", default="",
        help="A JSON body sent verbatim with every request (or a JSON list of prompts, like --prompts-file)",
    )  # fmt: skip
    group.add_argument(
        "--protocol-format", default="", metavar="FILE",
        help="With --protocol generic: TOML file giving the path, the body template and where the text, "
             "token count, finish reason and error sit in the JSON answer (SSE, JSON lines or one body)",
    )  # fmt: skip
    group.add_argument(
        "--no-stream", action="store_true", default=False,
        help="Ask for one JSON answer instead of a stream (openai-chat, openai-completions; tgi: /generate): "
             "E2E and tokens are recorded, TTFT stays empty",
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
        "--backoff", type=parse_bool, default=True, metavar="BOOL",
        help="Pause a user after a refused connection, a 429 or a 5xx (0.1 s doubling to 2 s with jitter, or the "
             "server's Retry-After up to 10 s); false sends the next request at once",
    )  # fmt: skip
    group.add_argument(
        "--connections", type=int, default=0, metavar="N",
        help="Connections shared by all users of a worker (0: one per user); fewer than users queues requests "
             "client-side, recorded as conn_wait_ms",
    )  # fmt: skip
    group.add_argument(
        "--connect-timeout-s",
        type=non_negative_float,
        default=60.0,
        help="Fail a request (connect_timeout) when no connection opens in this time; 0 = off",
    )
    group.add_argument(
        "--ttft-timeout-s",
        type=non_negative_float,
        default=900.0,
        help="Fail a request (ttft_timeout) with no token this long after sending; 0 = off",
    )
    group.add_argument(
        "--stall-timeout-s",
        type=non_negative_float,
        default=300.0,
        help="Fail a request (stall_timeout) when no SSE event comes for this long after the first token; 0 = off",
    )
    group.add_argument(
        "--total-timeout-s",
        type=non_negative_float,
        default=0.0,
        help="Fail a request (total_timeout) that takes longer than this; 0 = off (default)",
    )


def add_server_options(group) -> None:
    """Server-side capture of issue 4: the server's log and extra metrics endpoints."""
    group.add_argument(
        "--server-log", default="", metavar="PATH",
        help="Follow this server log file during the run (on the master); copied into the run "
             "directory as server.log, each line stamped on arrival",
    )  # fmt: skip
    group.add_argument(
        "--server-log-cmd", default="", metavar="CMD",
        help="Follow the output of this command as the server's log (on the master), e.g. "
             "\"kubectl logs -f deploy/vllm\", \"ssh gpu1 tail -F /var/log/vllm.log\", \"docker logs -f tgi\"; "
             "stamped on arrival like --server-log; stopped at the end",
    )  # fmt: skip
    group.add_argument(
        "--server-metrics-url", action="append", default=[], metavar="URL",
        help="A Prometheus endpoint to scrape, URL or NAME=URL (repeatable or comma-separated: each "
             "replica behind a gateway, a GPU exporter); replaces the default HOST/metrics, adds to "
             "--metrics-url; an endpoint that reaches the same server as another is scraped once",
    )  # fmt: skip
    group.add_argument(
        "--server-log-format", default="", metavar="FILE",
        help="User format file (TOML: named-group regexes, metric names) for a server without a "
             "built-in parser, or a shipped format's name (nginx-error: nginx's error log in front "
             "of the server); copied into the run directory",
    )  # fmt: skip
