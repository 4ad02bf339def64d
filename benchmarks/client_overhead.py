"""Client overhead: how many SSE token events one llm-locust worker ingests per CPU core, how
late it stamps the first token, and how much memory an open stream costs — next to a bare
socket reader measured in the same run. The ratio is the figure.

    .venv/bin/python benchmarks/client_overhead.py            # about 7 minutes on 2 cores

Runs after the README's plain install (``pip install -e .``); the sseclient-py line of the
stage table needs the test extra (``pip install -e '.[test]'``) and reads nan without it.

What runs (every process started here is stopped here, by PID; traffic only to 127.0.0.1):

1. A loopback server (this file, ``--serve``): single-threaded, non-blocking. Each request gets a
   chunked SSE stream like vLLM's (role chunk, ``--tokens`` content chunks, finish, usage,
   ``[DONE]``) at exactly ``--rate`` tokens/s, written every ``--tick-ms`` (several events per
   write, as a busy server's socket coalesces them; below one event per tick the period is
   stretched to one event every ``1 / --rate`` s, :func:`write_plan`, and the header prints
   what is sent); keep-alive. It stamps, with ``time.time()``, when it sent each response's
   first content event.
2. llm-locust: a Locust master and ONE worker process (pinned to one core when ``taskset``
   exists), ``--streams`` users in a closed loop, full accounting: TTFT, token times for
   per-token ITL, records shipped to the master and written to ``requests.csv``.
3. A bare socket reader (this file, ``--bare``): one process, ``selectors`` + ``recv`` +
   ``orjson.loads`` per event (the product's parser; ``--bare-parser stdlib`` for ``json.loads``),
   the same streams, counting token events and stamping first tokens, nothing else: the floor.

Streams open evenly over the first 3 s (Locust's spawn rate; the bare reader likewise), so the
closed loops of equal-length requests do not all restart in the same instant. Two phases, each
client in turn: *capacity* (``--streams`` streams at ``--rate`` tokens/s, several events per
write: how many events a core can take) and *latency* (``--latency-streams`` streams, 1,000 by
default, at ``--latency-rate``, one event per write: how late the first token is stamped, and
what an open stream costs in memory, at scale). The capacity phase runs ``--rounds`` times, the
two clients back to back in alternating order, and its medians are the result: on a shared
virtual machine one run moves by ±10 % or more (five rounds by default: with three, one slow
round of either client moved the median ratio by 0.06 on 4 Dec 2026). Figures, over a steady window after the ramp:
token events/s received per CPU-second of the client process (its ``psutil`` CPU time over the
window); TTFT error = client's first-token stamp - server's send stamp (p50, p99, joined on the
response id); RSS per open stream (RSS during the window minus RSS before the streams opened, /
streams; at the capacity phase's 400 requests/s it includes the records waiting for the next
report to the master). Then the worker's hot path stage by stage on the same bytes, in this
process (``benchmarks/client_event_cost.py``): what each microsecond per event buys.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from client_event_cost import chunked, content_event, print_table, stage_costs  # noqa: E402


def write_plan(rate: float, tick_ms: float) -> tuple[int, float]:
    """Events per write and the write period (s) that send exactly ``rate`` events/s per stream.

    ``round(rate * tick)`` events every ``tick_ms``, at least one, and the period stretched to
    ``events / rate``: at 50 tokens/s and a 10 ms tick one event per write every 20 ms (the
    unstretched tick sent 100 tokens/s).

    >>> write_plan(50, 10), write_plan(400, 10)
    ((1, 0.02), (4, 0.01))
    """
    per_tick = max(1, round(rate * tick_ms / 1000.0))
    return per_tick, per_tick / rate


# ----------------------------------------------------------------------------- server
class _Stream:
    """One server-side stream (a keep-alive connection and its current response)."""

    __slots__ = ("sock", "inbuf", "out", "events", "event_size", "sent", "next_t", "rid", "first_sent", "tail")
    sock: socket.socket
    inbuf: bytes  # request bytes not yet answered
    out: bytes  # response bytes not yet written
    events: bytes | None  # the response's content events, None between responses
    event_size: int
    sent: int  # bytes of events written
    next_t: float  # monotonic s of the next write
    rid: str
    first_sent: bool
    tail: bytes  # finish, usage, [DONE] and the last chunk


def serve(args) -> None:
    """The loopback server: runs ``--duration-s`` seconds, then writes its stamps and exits."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1024)
    listener.setblocking(False)
    Path(args.port_file).write_text(str(listener.getsockname()[1]))
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, None)
    per_tick, tick = write_plan(args.rate, args.tick_ms)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    stamps: dict[str, float] = {}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        _serve_loop(args, listener, sel, tick, per_tick, head, stamps)
    finally:
        Path(args.stamps_file).write_text(json.dumps(stamps))


def _serve_loop(args, listener, sel, tick: float, per_tick: int, head: bytes, stamps: dict) -> None:
    streams: list[_Stream] = []
    served = 0
    end = time.monotonic() + args.duration_s
    next_tick = time.monotonic()
    while time.monotonic() < end:
        for key, _ in sel.select(max(0.0, next_tick - time.monotonic())):
            if key.data is None:
                try:
                    while True:
                        sock, _ = listener.accept()
                        sock.setblocking(False)
                        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                        s = _Stream()
                        s.sock, s.inbuf, s.out, s.events, s.next_t = sock, b"", b"", None, 0.0
                        sel.register(sock, selectors.EVENT_READ, s)
                except BlockingIOError:
                    pass
                continue
            s = key.data
            try:
                data = s.sock.recv(65536)
            except (BlockingIOError, ConnectionError):
                continue
            if not data:
                sel.unregister(s.sock)
                s.sock.close()
                continue
            s.inbuf += data
            if b"\r\n\r\n" in s.inbuf and s.events is None:
                headers, _, body = s.inbuf.partition(b"\r\n\r\n")
                if not headers.startswith(b"POST"):  # the recorder's server probes (GET /props, /info…)
                    s.sock.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    sel.unregister(s.sock)
                    s.sock.close()
                    continue
                length = int(headers.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                if len(body) < length:
                    continue
                s.inbuf = body[length:]
                served += 1
                s.rid = f"bench-{served}"
                one = content_event(s.rid)
                s.events, s.event_size, s.sent, s.first_sent = one * args.tokens, len(one), 0, False
                finish = {"id": s.rid, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
                usage = {"id": s.rid, "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": args.tokens}}
                s.tail = chunked(b"data: " + json.dumps(finish).encode() + b"\n\ndata: " + json.dumps(usage).encode()
                                 + b"\n\ndata: [DONE]\n\n") + b"0\r\n\r\n"  # fmt: skip
                role = {"id": s.rid, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
                s.out += head + chunked(b"data: " + json.dumps(role).encode() + b"\n\n")
                s.next_t = time.monotonic() + tick
                streams.append(s)
                _flush(s)
        now = time.monotonic()
        if now >= next_tick:
            next_tick = now + tick
            active = []
            for s in streams:
                if s.events is not None and s.next_t <= now:
                    piece = s.events[s.sent : s.sent + per_tick * s.event_size]
                    s.sent += len(piece)
                    s.out += chunked(piece)
                    if s.sent >= len(s.events):
                        s.out += s.tail
                        s.events = None
                    s.next_t += tick
                    if _flush(s) and not s.first_sent:
                        s.first_sent = True
                        stamps[s.rid] = time.time()
                elif s.out:
                    _flush(s)
                if s.events is not None or s.out:
                    active.append(s)
            streams = active


def _flush(s: _Stream) -> bool:
    try:
        sent = s.sock.send(s.out)
    except BlockingIOError:
        sent = 0
    except OSError:
        return False
    s.out = s.out[sent:]
    return True


# ----------------------------------------------------------------------------- bare reader
def bare(args) -> None:
    """The bare socket reader: recv, split events, parse each (orjson, as the product; the stdlib
    with ``--bare-parser stdlib``), count the token events, stamp each stream's first token.

    The floor: per event only what any reader must do to know a token came. Its own records are
    compact (token events per 10 ms of wall clock, first tokens in two arrays), so its memory
    per stream is the streams' and not a growing list of every token's time.
    """
    from array import array

    loads = json.loads if args.bare_parser == "stdlib" else __import__("orjson").loads
    port = int(Path(args.port_file).read_text())
    body = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                       "max_tokens": args.tokens}).encode()  # fmt: skip
    request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body  # fmt: skip
    sel = selectors.DefaultSelector()
    first_rid, first_t = array("q"), array("d")  # response "bench-<n>" -> n; its first token's arrival
    per_10ms: dict[int, int] = {}  # token events per 10 ms of wall clock
    time.sleep(1.0)
    rss_before = _rss(os.getpid())
    started = time.monotonic()
    end = started + args.run_s
    spawn_every = _spawn_seconds(args) / args.streams
    opened = 0
    rss_open = 0
    while time.monotonic() < end:
        while opened < args.streams and time.monotonic() >= started + opened * spawn_every:
            sock = socket.create_connection(("127.0.0.1", port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(request)
            sel.register(sock, selectors.EVENT_READ, [b"", None])
            opened += 1
        for key, _ in sel.select(0.1 if opened == args.streams else min(0.1, spawn_every)):
            state = key.data
            data = key.fileobj.recv(65536)  # type: ignore[union-attr]  # a socket (registered above); no cast here
            now = time.time()
            if not data:
                raise SystemExit("server closed a stream")
            parts = (state[0] + data).split(b"\n\n")
            state[0] = parts.pop()
            tokens = 0
            for part in parts:
                i = part.find(b"data: ")
                if i < 0:
                    continue
                payload = part[i + 6 :]
                if payload == b"[DONE]":
                    state[1] = None
                    key.fileobj.sendall(request)  # type: ignore[union-attr]
                    continue
                chunk = loads(payload)
                delta = chunk["choices"][0]["delta"] if chunk["choices"] else {}
                if delta.get("content"):
                    tokens += 1
                    if state[1] is None:
                        state[1] = chunk["id"]
                        first_rid.append(int(chunk["id"].rpartition("-")[2]))
                        first_t.append(now)
            if tokens:
                slot = int(now * 100)
                per_10ms[slot] = per_10ms.get(slot, 0) + tokens
        if not rss_open and time.monotonic() > end - args.run_s / 2:
            rss_open = _rss(os.getpid())
    Path(args.out_file).write_text(json.dumps({
        "first_token": {f"bench-{n}": t for n, t in zip(first_rid, first_t)},
        "per_10ms": per_10ms, "rss_per_stream": (rss_open - rss_before) / args.streams}))  # fmt: skip


def _spawn_seconds(args) -> float:
    """Streams open evenly over the first 3/4 of the ramp (as Locust spawns users at -r), so the
    closed loops do not all restart in the same instant."""
    return args.ramp_s * 0.75


def _rss(pid: int) -> int:
    import psutil

    return psutil.Process(pid).memory_info().rss


# ----------------------------------------------------------------------------- orchestration
def _pin(core: int | None) -> list[str]:
    return ["taskset", "-c", str(core)] if core is not None and shutil.which("taskset") else []


def _start_server(args, work: Path, duration_s: float) -> tuple[subprocess.Popen, int]:
    port_file = work / "port"
    port_file.unlink(missing_ok=True)
    server = subprocess.Popen(
        [*_pin(args.server_core), sys.executable, __file__, "--serve", "--port-file", str(port_file),
         "--stamps-file", str(work / "stamps.json"), "--duration-s", str(duration_s), "--rate", str(args.rate),
         "--tick-ms", str(args.tick_ms), "--tokens", str(args.tokens)],
    )  # fmt: skip
    for _ in range(100):
        if port_file.exists() and port_file.read_text():
            return server, int(port_file.read_text())
        time.sleep(0.05)
    raise RuntimeError("benchmark server did not start")


def _window_cpu(process, window: tuple[float, float]) -> tuple[float, int]:
    """CPU seconds of ``process`` over the window (sampled at its ends) and RSS at its middle."""
    import psutil

    p = psutil.Process(process.pid)
    time.sleep(max(0.0, window[0] - time.time()))
    t0 = sum(p.cpu_times()[:2])
    time.sleep(max(0.0, (window[0] + window[1]) / 2 - time.time()))
    rss = p.memory_info().rss
    time.sleep(max(0.0, window[1] - time.time()))
    return sum(p.cpu_times()[:2]) - t0, rss


def _percentiles(values: list[float]) -> tuple[float, float]:
    import numpy as np

    return (float(np.percentile(values, 50)), float(np.percentile(values, 99))) if values else (float("nan"),) * 2


def run_llm_locust(args, work: Path) -> dict:
    import psutil

    work.mkdir(parents=True, exist_ok=True)
    total_s = args.ramp_s + args.window_s + args.tokens / args.rate + 3  # requests in the window end before the stop
    server, port = _start_server(args, work, total_s + 15)
    run_dir = work / "run"
    master_port = _free_port()
    locustfile = REPO / "llm_locust" / "locustfiles" / "chat_stream.py"
    common = ["--host", f"http://127.0.0.1:{port}"]
    worker = subprocess.Popen(
        [*_pin(args.client_core), sys.executable, "-m", "locust", "-f", str(locustfile), "--worker",
         "--master-host", "127.0.0.1", "--master-port", str(master_port)],
        stdout=open(work / "worker.log", "w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    time.sleep(3.0)  # the worker has imported everything; no master yet, so no user either
    rss_before = psutil.Process(worker.pid).memory_info().rss
    master = subprocess.Popen(
        [*_pin(args.server_core), sys.executable, "-m", "locust", "-f", str(locustfile), "--master", "--headless",
         "--expect-workers", "1", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(master_port),
         "-u", str(args.streams), "-r", f"{args.streams / _spawn_seconds(args):g}", "-t", f"{total_s:.0f}s",
         "--only-summary",
         "--run-dir", str(run_dir), "--model", "bench", "--max-tokens", str(args.tokens), "--metrics-url", "none",
         *common, "--stop-timeout", "5"],
        stdout=open(work / "master.log", "w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        started = time.time()
        while not (run_dir / "run.json").exists() and time.time() - started < 30:
            time.sleep(0.05)
        window = (time.time() + args.ramp_s, time.time() + args.ramp_s + args.window_s)
        cpu_s, rss = _window_cpu(worker, window)
        master.wait(timeout=total_s + 60)
        worker.wait(timeout=30)
    finally:
        for process in (master, worker, server):
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=10)
    stamps = json.loads((work / "stamps.json").read_text())
    import pandas as pd

    requests = pd.read_csv(run_dir / "requests.csv", keep_default_na=False, na_values=[""])
    in_window, errors = 0, []
    for row in requests.itertuples():
        if not isinstance(row.token_times_us, str):
            continue
        times = [row.t_start_s + int(t) / 1e6 for t in row.token_times_us.split()]
        in_window += sum(1 for t in times if window[0] <= t < window[1])
        first = row.t_start_s + row.ttft_ms / 1000.0
        if window[0] <= first < window[1] and row.response_id in stamps:
            errors.append((first - stamps[row.response_id]) * 1000.0)
    p50, p99 = _percentiles(errors)
    kinds = requests["error_kind"].dropna().value_counts().to_dict()
    failed = sum(kinds.values())
    return {"events_per_s": in_window / args.window_s, "events_per_cpu_s": in_window / cpu_s, "cpu": cpu_s / args.window_s,
            "ttft_err_p50_ms": p50, "ttft_err_p99_ms": p99, "rss_per_stream_kb": (rss - rss_before) / args.streams / 1024,
            "requests": len(requests), "failed": failed, "failure_kinds": kinds}  # fmt: skip


def run_bare(args, work: Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    total_s = args.ramp_s + args.window_s + args.tokens / args.rate + 3  # requests in the window end before the stop
    server, _port = _start_server(args, work, total_s + 10)
    out = work / "bare.json"
    reader = subprocess.Popen(
        [*_pin(args.client_core), sys.executable, __file__, "--bare", "--port-file", str(work / "port"),
         "--out-file", str(out), "--run-s", str(total_s), "--streams", str(args.streams), "--tokens", str(args.tokens),
         "--ramp-s", str(args.ramp_s), "--bare-parser", args.bare_parser],
    )  # fmt: skip
    try:
        time.sleep(1.0)
        window = (time.time() + args.ramp_s, time.time() + args.ramp_s + args.window_s)
        cpu_s, _ = _window_cpu(reader, window)
        reader.wait(timeout=total_s + 30)
    finally:
        for process in (reader, server):
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=10)
        server.wait(timeout=30)
    result = json.loads(out.read_text())
    stamps = json.loads((work / "stamps.json").read_text())
    in_window = sum(n for slot, n in result["per_10ms"].items() if window[0] <= int(slot) / 100 < window[1])
    errors = [
        (t - stamps[rid]) * 1000.0
        for rid, t in result["first_token"].items()
        if rid in stamps and window[0] <= t < window[1]
    ]
    p50, p99 = _percentiles(errors)
    return {"events_per_s": in_window / args.window_s, "events_per_cpu_s": in_window / cpu_s, "cpu": cpu_s / args.window_s,
            "ttft_err_p50_ms": p50, "ttft_err_p99_ms": p99, "rss_per_stream_kb": result["rss_per_stream"] / 1024}  # fmt: skip


def _median(values: list[float]) -> float:
    import statistics

    return statistics.median(values) if values else float("nan")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=256, help="open streams (users) per worker")
    parser.add_argument("--rate", type=float, default=400.0, help="tokens/s per stream, capacity phase")
    parser.add_argument(
        "--tick-ms", type=float, default=10.0, help="server write period per stream, capacity phase, ms"
    )
    parser.add_argument("--latency-streams", type=int, default=1000, help="open streams, latency phase")
    parser.add_argument("--latency-rate", type=float, default=50.0, help="tokens/s per stream, latency phase")
    parser.add_argument("--latency-tick-ms", type=float, default=20.0, help="server write period, latency phase, ms")
    parser.add_argument("--tokens", type=int, default=256, help="tokens per request")
    parser.add_argument("--ramp-s", type=float, default=4.0)
    parser.add_argument("--window-s", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=5, help="capacity rounds (medians are reported; 0: none)")
    parser.add_argument("--bare-parser", choices=("orjson", "stdlib"), default="orjson",
                        help="the bare reader's JSON parser (orjson: the product's)")  # fmt: skip
    parser.add_argument("--client-core", type=int, default=1, help="core the client process is pinned to")
    parser.add_argument("--server-core", type=int, default=0, help="core the server (and master) are pinned to")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    for name in ("--port-file", "--stamps-file", "--out-file"):
        parser.add_argument(name, help=argparse.SUPPRESS)
    parser.add_argument("--duration-s", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--run-s", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args)
    if args.bare:
        return bare(args)
    phases = {
        "capacity": argparse.Namespace(**{**vars(args), "rate": args.rate, "tick_ms": args.tick_ms}),
        "latency": argparse.Namespace(**{**vars(args), "rate": args.latency_rate, "tick_ms": args.latency_tick_ms,
                                         "streams": args.latency_streams}),
    }  # fmt: skip
    pinning = (f"client pinned to core {args.client_core}, server and master to core {args.server_core}"
               if shutil.which("taskset") else "no taskset: processes not pinned")  # fmt: skip
    print(f"{args.tokens} tokens per request, {pinning}; bare reader parses with {args.bare_parser}")
    for name, phase in phases.items():
        per_write, period_s = write_plan(phase.rate, phase.tick_ms)
        print(f"  {name} phase: {phase.streams} streams, {phase.rate:g} tokens/s per stream, {per_write} per write "
              f"every {period_s * 1000:g} ms = {phase.streams * phase.rate:,.0f} token events/s offered")  # fmt: skip
    print(f"  capacity: {args.rounds} rounds, llm-locust and the bare reader back to back (order alternating), "
          "medians reported; latency: one round each")  # fmt: skip
    rounds: list[tuple[dict, dict]] = []
    with tempfile.TemporaryDirectory(prefix="llm-locust-bench-") as tmp:
        for i in range(args.rounds):
            work = Path(tmp) / f"capacity-{i}"
            if i % 2:
                bare_result = run_bare(phases["capacity"], work / "bare")
                ours = run_llm_locust(phases["capacity"], work / "ours")
            else:
                ours = run_llm_locust(phases["capacity"], work / "ours")
                bare_result = run_bare(phases["capacity"], work / "bare")
            rounds.append((ours, bare_result))
        latency = (run_llm_locust(phases["latency"], Path(tmp) / "latency-ours"),
                   run_bare(phases["latency"], Path(tmp) / "latency-bare"))  # fmt: skip
    print()
    print(f"{'phase':<14}{'client':<27}{'events/s':>10}{'CPU':>6}{'events/s/core':>15}{'TTFT err p50':>14}"
          f"{'p99 ms':>8}{'KB/stream':>11}")  # fmt: skip
    rows = [(f"capacity {i + 1}", pair) for i, pair in enumerate(rounds)] + [("latency", latency)]
    for name, (ours, bare_result) in rows:
        for label, r in (("llm-locust worker (full)", ours), (f"bare reader ({args.bare_parser})", bare_result)):
            print(f"{name:<14}{label:<27}{r['events_per_s']:>10,.0f}{r['cpu']:>6.2f}{r['events_per_cpu_s']:>15,.0f}"
                  f"{r['ttft_err_p50_ms']:>14.2f}{r['ttft_err_p99_ms']:>8.2f}{r['rss_per_stream_kb']:>11.1f}")  # fmt: skip
    ours_rate = _median([r[0]["events_per_cpu_s"] for r in rounds])
    bare_rate = _median([r[1]["events_per_cpu_s"] for r in rounds])
    ratio = _median([r[0]["events_per_cpu_s"] / r[1]["events_per_cpu_s"] for r in rounds])  # nan with --rounds 0
    failed = sum(r[0]["failed"] for r in rounds) + latency[0]["failed"]
    ours_kb = _median([r[0]["rss_per_stream_kb"] for r in rounds])
    at_scale = latency[0]
    print(f"capacity medians over {args.rounds} rounds, token events/s per core: llm-locust {ours_rate:,.0f}, "
          f"bare reader {bare_rate:,.0f}; median of the rounds' ratios llm-locust / bare {ratio:.2f}")  # fmt: skip
    kinds: dict[str, int] = {}
    for r in [ours for ours, _ in rounds] + [latency[0]]:
        for kind, n in r["failure_kinds"].items():
            kinds[kind] = kinds.get(kind, 0) + n
    print(f"llm-locust failed requests: {failed} {kinds or ''} (interrupted: in flight when the test stopped)")
    print("goals (issue 15):")
    print(f"  >= 0.75 of the bare reader's token events/s per core, full accounting: {ratio:.2f} "
          f"({'met' if ratio >= 0.75 else 'not met'})")  # fmt: skip
    print(f"  <= 24 KB per open stream: {at_scale['rss_per_stream_kb']:.1f} KB at {args.latency_streams} streams "
          f"({'met' if at_scale['rss_per_stream_kb'] <= 24 else 'not met'}); {ours_kb:.1f} KB at {args.streams} "
          f"streams of {args.rate:g} tokens/s (median)")  # fmt: skip
    print(f"  TTFT error p99 <= 10 ms at {args.latency_streams} streams of {args.latency_rate:g} tokens/s: "
          f"{at_scale['ttft_err_p99_ms']:.2f} ms, p50 {at_scale['ttft_err_p50_ms']:.2f} "
          f"({'met' if at_scale['ttft_err_p99_ms'] <= 10 else 'not met'})")  # fmt: skip
    print()
    print_table(stage_costs())


if __name__ == "__main__":
    main()
