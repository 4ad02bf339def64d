"""What every user of one Locust process shares: the request to send, limits, connections.

Built once per :class:`locust.env.Environment` from Locust's parsed options (see
:mod:`llm_locust.options`) by :func:`client_config` and kept on the environment
(``environment.llm_client``), so the tokenizer and the payload file are read once per process and
``--connections`` is one pool for all the users of a worker.
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gevent.lock import BoundedSemaphore

from llm_locust.auth import auth_headers
from llm_locust.client.connection import ConnectionPool, Target
from llm_locust.client.models import first_served_model
from llm_locust.client.prompts import load_prompts
from llm_locust.client.protocols import Adapter, Workload, get_adapter
from llm_locust.client.protocols.genericformat import GenericFormat, load_format
from llm_locust.client.reader import StreamReader
from llm_locust.client.stream import Limits
from llm_locust.client.tokens import TokenizerCounter
from llm_locust.client.watchdog import Watchdog
from llm_locust.client.workload import RequestSource, build_request_source, workload_meta

USER_AGENT = "llm-locust"


def load_payload(path: str | Path) -> tuple[bytes | None, tuple[str, ...] | None]:
    """Read ``--payload-file``: a JSON object is a body sent verbatim; a list holds prompts.

    Returns
    -------
    (body, prompts)
        ``(file bytes, None)`` for a JSON object, ``(None, prompts)`` for a list of strings.

    Raises
    ------
    ValueError
        Neither a JSON object nor a list of prompts.
    """
    raw = Path(path).read_bytes()
    value = json.loads(raw)
    if isinstance(value, dict):
        return raw.strip(), None
    if isinstance(value, list):
        return None, load_prompts(path)
    raise ValueError(f"{path}: --payload-file must hold a JSON object (a body) or a list of prompts")


@dataclass(kw_only=True)
class ClientConfig:
    """The per-process settings of :class:`~llm_locust.client.user.LLMUser`.

    Attributes
    ----------
    target : Target
        ``--host``.
    protocol : str
        Adapter name (``--protocol``).
    workload : Workload
        What a built body asks for.
    prompts : tuple of str
        Prompts cycled through (unused with a verbatim body).
    body : bytes or None
        ``--payload-file`` body sent verbatim, or None to build bodies from prompts.
    max_tokens, ignore_eos : int or None, bool
        What the requests ask for (read from the verbatim body when there is one).
    limits : Limits
        Timeouts.
    count_tokens : callable or None
        The ``--tokenizer``'s count, None for the heuristic.
    keep_alive : bool
        ``--keep-alive``.
    backoff : bool
        ``--backoff``: users pause after failures that ask for it (:mod:`llm_locust.client.backoff`).
    shared_pool : ConnectionPool or None
        The ``--connections N`` pool all users share; None gives each user its own.
    headers : str
        Header lines every request carries (``Authorization`` included, in memory only).
    watchdog : Watchdog
        Keeps every user's timeouts.
    reader : StreamReader or None
        Reads every user's response body in one greenlet; None where the platform has no epoll
        (each user then reads its own).
    fmt : GenericFormat or None
        The ``--protocol-format`` file (``--protocol generic``), read once per process.
    source : RequestSource or None
        What each request sends (:mod:`llm_locust.client.workload`: the prompt set, ``--input-tokens``,
        ``--dataset``); one for every user of the process. None only in a config built by hand.
    session_turns : int
        ``--session-turns``: turns per multi-turn session, 0 for single turns
        (:mod:`llm_locust.client.workload.session`).
    think_time_s : float
        ``--think-time-s``: pause between a session's turns, s.
    """

    target: Target
    protocol: str
    workload: Workload
    prompts: tuple[str, ...]
    body: bytes | None
    max_tokens: int | None
    ignore_eos: bool
    limits: Limits
    count_tokens: Callable[[str], int] | None
    keep_alive: bool
    backoff: bool
    shared_pool: ConnectionPool | None
    headers: str
    watchdog: Watchdog
    reader: StreamReader | None
    fmt: GenericFormat | None = None
    source: RequestSource | None = None
    session_turns: int = 0
    think_time_s: float = 0.0

    def adapter(self) -> Adapter:
        return get_adapter(self.protocol, stream=self.workload.stream, fmt=self.fmt)

    def pool(self) -> ConnectionPool:
        """The pool a new user takes its connections from."""
        return self.shared_pool or ConnectionPool(self.target, keep_alive=self.keep_alive)

    def request_head(self, path: str) -> str:
        """Request line and headers up to (without) ``Content-Length``."""
        return f"POST {self.target.base_path}{path} HTTP/1.1\r\n{self.headers}"


def _random_start() -> int:
    """Where in the prompt set a process starts (processes start at different prompts)."""
    return int.from_bytes(os.urandom(4), "little")


def build_client_config(options, host: str, *, stream: str = "0") -> ClientConfig:
    """A :class:`ClientConfig` from Locust's parsed ``options`` and the target ``host``.

    ``stream`` names this process among the load generators (its worker index): its own random
    prompt words, lengths and dataset start (:func:`llm_locust.client.workload.build_request_source`,
    which may ask the server to count prompt tokens).
    """
    target = Target(host)
    format_file = getattr(options, "protocol_format", "")
    fmt = load_format(format_file) if format_file else None
    streamed = not getattr(options, "no_stream", False)
    adapter = get_adapter(options.protocol, stream=streamed, fmt=fmt)
    body = None
    prompts = load_prompts(options.prompts_file or None)
    if getattr(options, "payload_file", ""):
        body, file_prompts = load_payload(options.payload_file)
        prompts = file_prompts or prompts
    needs_model = not body and (fmt is None or fmt.uses_model)
    workload = Workload(
        model=options.model or (first_served_model(host, api_key=options.api_key) if needs_model else ""),
        max_tokens=options.max_tokens,
        ignore_eos=options.ignore_eos,
        temperature=options.temperature,
        include_usage=options.include_usage,
        continuous_usage=options.continuous_usage,
        stream=streamed,
    )
    if body is not None:
        verbatim = json.loads(body)
        max_tokens = adapter.requested_max_tokens(verbatim)
        ignore_eos = bool(verbatim.get("ignore_eos", False))
    else:
        max_tokens, ignore_eos = workload.max_tokens, workload.ignore_eos
        if adapter.name == "tgi":
            ignore_eos = False  # TGI has no ignore_eos: an early stop is not a violation of a request
    headers = [
        f"Host: {target.host_header}",
        f"User-Agent: {USER_AGENT}",
        "Content-Type: application/json",
        "Accept: text/event-stream" if adapter.framing == "sse" else "Accept: application/json",
        "Accept-Encoding: identity",
    ]
    headers += [f"{name}: {value}" for name, value in auth_headers(options.api_key).items()]
    if not options.keep_alive:
        headers.append("Connection: close")
    connections = options.connections
    return ClientConfig(
        target=target,
        protocol=options.protocol,
        workload=workload,
        prompts=prompts,
        body=body,
        max_tokens=max_tokens,
        ignore_eos=ignore_eos,
        limits=Limits(
            connect_s=options.connect_timeout_s,
            ttft_s=options.ttft_timeout_s,
            stall_s=options.stall_timeout_s,
            total_s=options.total_timeout_s,
        ),  # fmt: skip
        count_tokens=TokenizerCounter(options.tokenizer) if options.tokenizer else None,
        keep_alive=options.keep_alive,
        backoff=getattr(options, "backoff", True),
        shared_pool=ConnectionPool(target, limit=connections, keep_alive=options.keep_alive)
        if connections > 0
        else None,
        headers="".join(line + "\r\n" for line in headers),
        watchdog=Watchdog(),
        reader=StreamReader() if StreamReader.available() else None,
        fmt=fmt,
        source=build_request_source(
            options, host=host, model=workload.model, prompts=prompts, stream=stream, start=_random_start()
        ),
        session_turns=getattr(options, "session_turns", 0) or 0,
        think_time_s=getattr(options, "think_time_s", 0.0) or 0.0,
    )


def client_workload_meta(options) -> dict:
    """run.json ``workload`` keys of the client knobs (the payload file as a SHA-256, no secrets)."""
    import hashlib

    payload = getattr(options, "payload_file", "")
    format_file = getattr(options, "protocol_format", "")
    return {
        "stream": not getattr(options, "no_stream", False),
        "protocol_format_sha256": hashlib.sha256(Path(format_file).read_bytes()).hexdigest() if format_file else None,
        "payload_file_sha256": hashlib.sha256(Path(payload).read_bytes()).hexdigest() if payload else None,
        "include_usage": options.include_usage,
        "continuous_usage": options.continuous_usage,
        "tokenizer": options.tokenizer or None,
        "keep_alive": options.keep_alive,
        "backoff": getattr(options, "backoff", True),
        "connections": options.connections,
        "timeouts_s": {
            "connect": options.connect_timeout_s,
            "ttft": options.ttft_timeout_s,
            "stall": options.stall_timeout_s,
            "total": options.total_timeout_s,
        },
        **workload_meta(options),
    }


def client_config(environment, host: str) -> ClientConfig:
    """The environment's :class:`ClientConfig`, built by the first user that asks.

    Building asks the server (the model name, prompt sizing probes), so it yields to other
    greenlets: the users that ask meanwhile wait for the one config (one request source, so no
    two users send the same prompts).
    """
    lock = environment.__dict__.setdefault("llm_client_lock", BoundedSemaphore())  # atomic under gevent
    with lock:
        config = getattr(environment, "llm_client", None)
        if config is None or config.target.url != host:
            stream = str(getattr(environment.runner, "worker_index", 0) or 0)
            config = build_client_config(environment.parsed_options, host, stream=stream)
            environment.llm_client = config
            # Everything allocated so far (Locust, the runner, modules) lives as long as the process:
            # moved out of the collector's sight, a full collection no longer walks it. Measured in
            # benchmarks/client_overhead.py: without this, full collections stall all streams for
            # tens of ms (first tokens stamped late).
            gc.collect()
            gc.freeze()
    return config
