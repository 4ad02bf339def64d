"""The first request, before any load: one request of the run's own kind, shown to the user.

``run`` and ``diagnose`` send one request built exactly as the workers will build theirs (the
same ``--protocol``, ``--protocol-format``, body, prompts and timeouts, through the same client:
:func:`llm_locust.client.config.build_client_config`, :func:`llm_locust.client.stream.run_exchange`)
and print what came back (status, time, tokens, the start of the text). When it fails, the run
stops there with the request's own message and the start of the server's answer: a format file
adapted wrongly once sent 21,277 requests, all answered HTTP 400, in ~12 s before anyone could
read the message.

The request runs in a child process (``python -m llm_locust.run.firstrequest LOCUST_FLAGS``,
gevent-patched as a Locust worker is; the launcher itself never imports gevent), which writes
one JSON object (:func:`first_request`'s) on its standard output.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import time

FIRST_REQUEST_TOTAL_S = 120.0
"""Longest the first request may take (its ``--total-timeout-s`` when none shorter is given), s."""
PROCESS_GRACE_S = 60.0
"""Beyond :data:`FIRST_REQUEST_TOTAL_S`: the child's start-up (imports, prompt sizing), s."""
SHOWN_CHARS = 120
"""Characters of the answer's text (or of a failed answer's body) printed."""


def first_request(options) -> dict:
    """Send one request as a worker would and describe its outcome (runs gevent-patched).

    Parameters
    ----------
    options : argparse.Namespace
        Locust's parsed options with llm-locust's (:func:`llm_locust.clihelp.parse_locust_args`).

    Returns
    -------
    dict
        ``url``, ``ok`` (bool), ``status`` (HTTP status, 0 without one), ``error_kind``,
        ``error_message``, ``e2e_ms``, ``ttft_ms`` (None when not streamed or no token),
        ``output_tokens``, ``tokens_source``, ``text`` (the start of the generated text),
        ``body_head`` (the start of the body, for an answer that failed).
    """
    from llm_locust.client.accounting import fill_record
    from llm_locust.client.config import build_client_config
    from llm_locust.client.record import RequestRecord
    from llm_locust.client.stream import Limits, run_exchange
    from llm_locust.client.user import _json_body

    config = build_client_config(options, options.host)
    limits = config.limits
    total_s = limits.total_s if 0 < limits.total_s < FIRST_REQUEST_TOTAL_S else FIRST_REQUEST_TOTAL_S
    config.limits = Limits(connect_s=limits.connect_s, ttft_s=limits.ttft_s, stall_s=limits.stall_s, total_s=total_s)
    adapter = config.adapter()
    item = config.source.next_request() if config.source is not None else None
    body = config.body
    if body is None:
        workload = config.workload
        if item is not None and item.max_tokens is not None:
            workload = dataclasses.replace(workload, max_tokens=item.max_tokens)
        prompt = item.prompt if item is not None else config.prompts[0]
        body = _json_body(adapter.build_body(prompt=prompt, workload=workload))
    request = (config.request_head(adapter.path) + f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1") + body
    record = RequestRecord(
        request_id=os.urandom(8).hex(), worker_id="first-request", name="first", t_start_s=time.time(),
        scheduled_s=math.nan,
    )  # fmt: skip
    pool = config.pool()
    try:
        exchange, _ = run_exchange(pool, request, adapter, config.limits, config.watchdog, config.reader)
    finally:
        pool.close()
    fill_record(
        record, exchange, max_tokens=config.max_tokens, ignore_eos=config.ignore_eos, count_tokens=config.count_tokens
    )

    def number(value):
        return None if value is None or (isinstance(value, float) and math.isnan(value)) else value

    return {
        "url": config.target.url.rstrip("/") + adapter.path,
        "ok": bool(record.ok),
        "status": exchange.status,
        "error_kind": record.error_kind or "",
        "error_message": record.error_message or "",
        "e2e_ms": number(record.e2e_ms),
        "ttft_ms": number(record.ttft_ms),
        "output_tokens": number(record.output_tokens),
        "tokens_source": record.tokens_source or "",
        "text": "".join(exchange.texts)[:SHOWN_CHARS],
        "body_head": exchange.body_head[: SHOWN_CHARS * 2].decode("utf-8", "replace"),
    }


def shown_lines(result: dict) -> list[str]:
    """What the user reads of a first request's outcome: one line, and the answer's start.

    >>> shown_lines({"url": "http://h/generate", "ok": True, "status": 200, "e2e_ms": 412.0, "ttft_ms": 30.0,
    ...              "output_tokens": 8, "tokens_source": "usage", "text": "Hello there"})
    ['first request: POST http://h/generate -> HTTP 200 in 0.41 s (TTFT 30 ms), 8 tokens (usage): "Hello there"']
    """
    where = f"POST {result['url']} -> HTTP {result['status'] or 'none'}"
    seconds = f" in {result['e2e_ms'] / 1000:.2f} s" if result.get("e2e_ms") is not None else ""
    if result["ok"]:
        ttft = f" (TTFT {result['ttft_ms']:.0f} ms)" if result.get("ttft_ms") is not None else ""
        tokens = result.get("output_tokens")
        counted = f", {tokens:g} tokens ({result.get('tokens_source') or 'estimated'})" if tokens is not None else ""
        return [f"first request: {where}{seconds}{ttft}{counted}: {json.dumps(result.get('text', ''))}"]
    lines = [f"the first request failed, nothing else was sent: {where}{seconds}: {result['error_kind']}: "
             f"{result['error_message']}"]  # fmt: skip
    if result.get("body_head"):
        lines.append(f"  the answer began: {result['body_head']!r}")
    return lines


def hint(result: dict, locust_args: list[str]) -> str:
    """What to check after a failed first request (the flags that shape the request)."""
    if "--protocol-format" in locust_args:
        return "check --protocol-format: [request] path and body, [response] framing and text"
    if "--payload-file" in locust_args:
        return "check --payload-file: the body is sent as written"
    if result.get("status") in (401, 403):
        return "check --api-key (or LLM_LOCUST_API_KEY)"
    return "check --host, --model and --protocol; --no-first-request skips this check"


def check_first_request(locust_args: list[str], *, prog: str, echo=print, timeout_s: float | None = None) -> None:
    """Send the first request (in a child process) and print its outcome; exit 2 when it failed.

    Parameters
    ----------
    locust_args : list of str
        The Locust flags of the run (``--host`` among them; an API key stays in the environment).
    prog : str
        The command's name for the error line (``llm-locust run``).
    echo : callable
        Where the success line goes.

    Raises
    ------
    SystemExit
        Status 2, after ``<prog>: error: …`` lines on stderr, when the request failed or no
        outcome came back.
    """
    limit_s = timeout_s or FIRST_REQUEST_TOTAL_S + PROCESS_GRACE_S
    try:
        done = subprocess.run(
            [sys.executable, "-m", "llm_locust.run.firstrequest", *locust_args],
            capture_output=True, text=True, timeout=limit_s, stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip
        result = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 and done.stdout else None
    except subprocess.TimeoutExpired:
        print(f"{prog}: error: the first request gave no outcome within {limit_s:.0f} s", file=sys.stderr)
        raise SystemExit(2) from None
    except (ValueError, IndexError):
        result = None
    if result is None:
        tail = (done.stderr or "").strip().splitlines()[-1:] or ["no output"]
        print(f"{prog}: error: the first request could not be sent: {tail[0]}", file=sys.stderr)
        raise SystemExit(2)
    if result["ok"]:
        for line in shown_lines(result):
            echo(line)
        return
    for line in shown_lines(result):
        print(f"{prog}: error: {line}" if not line.startswith(" ") else line, file=sys.stderr)
    print(f"  {hint(result, locust_args)}", file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str]) -> int:
    """The child: parse the Locust flags, send the request, print the outcome as one JSON line."""
    from gevent import monkey

    monkey.patch_all()
    from llm_locust.clihelp import parse_locust_args

    options = parse_locust_args(argv, strict=False)
    print(json.dumps(first_request(options)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
