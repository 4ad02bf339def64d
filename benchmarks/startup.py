"""Start-up and wind-down of a short test: plain Locust against ``llm-locust run``, one command.

    .venv/bin/python benchmarks/startup.py            # ~1.5 min: 3 rounds of 4 commands, 5 s tests
    git archive COMMIT | tar -x -C /tmp/before        # an earlier tree, then in the same rounds:
    .venv/bin/python benchmarks/startup.py --before /tmp/before

Each round runs, one after the other, against one embedded server (``llm-locust sim-server``,
started here), a 5 s test with one user streaming 64-token chat completions:

- ``plain``: plain Locust, no llm-locust (``benchmarks/startup_plain_locustfile.py``, an
  ``HttpUser``), ``locust -f … --headless -u 1 -t 5s``: the yardstick;
- ``locust -f``: llm-locust's ``llm_locust/locustfiles/chat_stream.py`` in one Locust process, ``--run-dir``;
- ``run none``: ``llm-locust run --shape none -u 1 -t 5s --workers 1`` (master + 1 worker, the
  client report and the analysis);
- ``run ladder``: ``llm-locust run --ladder 1 --dwell-s 5 --workers 1`` (the default shape, its
  drain included).

Figures, per command (medians over the rounds): **first request**, launch -> the first POST's
bytes at the server (every byte the clients send passes through a relay in this process, which
stamps the first ``POST`` with ``time.time()``); **wall**, launch -> the process's exit; **tail**,
the end of the test (Locust's run-time limit or the ladder's last step) -> the exit, analysis
included. For ``llm-locust run`` also its phases, from its own output (each stdout line stamped on
arrival), the master's log (Locust's millisecond stamps) and ``run.json``: launcher ready (flags
parsed, server checked), master up, worker connected, test start, first request, test end, the
master's exit (the launcher's client report), exit. Ratios are against ``plain``.

Why own code: no tool times a whole multi-process Locust run from the server's side; the relay is
the one place where every client's first request can be seen with one clock. Traffic goes only to
127.0.0.1; every process started here is stopped here, by PID.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from llm_locust.run.demo import start_sim_server  # noqa: E402
from llm_locust.run.launcher import free_port, stop_process  # noqa: E402

BIN = Path(sys.executable).parent
LOG_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")
COMMAND_TIMEOUT_S = 120.0
"""Upper bound of one command, s (a test of a few seconds takes ~10)."""


class FirstPostRelay:
    """A TCP relay on 127.0.0.1 in front of ``target_port`` that stamps the first ``POST``.

    Every connection gets two forwarding threads; the first chunk a client sends that starts
    with ``POST `` sets :attr:`first_post_s` (``time.time()``) once after each :meth:`reset`.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.first_post_s: float | None = None
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def reset(self) -> None:
        with self._lock:
            self.first_post_s = None

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        try:
            while data := source.recv(65536):
                if from_client and self.first_post_s is None and data.startswith(b"POST "):
                    with self._lock:
                        if self.first_post_s is None:
                            self.first_post_s = time.time()
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()


def _log_times(path: Path) -> list[tuple[float, str]]:
    """(Unix s, line) of each stamped line of a Locust log (its stamps are local time, ms)."""
    found: list[tuple[float, str]] = []
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return found
    for line in lines:
        if match := LOG_STAMP.match(line):
            stamp = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            found.append((stamp, line))
    return found


def _first(times: list[tuple[float, str]], needle: str) -> float | None:
    return next((t for t, line in times if needle in line), None)


def run_one(name: str, argv: list[str], relay: FirstPostRelay, run_dir: Path | None, cwd: Path = REPO) -> dict:
    """Run ``argv`` in ``cwd`` to its end; return its figures (s, from its launch)."""
    relay.reset()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    stdout_times: list[tuple[float, str]] = []
    launched = time.time()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               env=env, text=True, cwd=cwd)  # fmt: skip
    try:
        assert process.stdout is not None
        for line in process.stdout:
            stdout_times.append((time.time(), line.rstrip("\n")))
        process.wait(timeout=COMMAND_TIMEOUT_S)
    finally:
        stop_process(process, grace_s=10)
    exited = time.time()
    if process.returncode != 0:
        tail = "\n".join(line for _, line in stdout_times[-15:])
        raise RuntimeError(f"{name}: exit code {process.returncode}\n{tail}")
    result: dict = {"name": name, "first_request_s": None, "wall_s": exited - launched}
    if relay.first_post_s is not None:
        result["first_request_s"] = relay.first_post_s - launched
    logs = _log_times(run_dir / "locust_master.log") if run_dir and (run_dir / "locust_master.log").exists() else []
    logs = logs or [(t, line) for t, line in stdout_times if LOG_STAMP.match(line)]
    logs = logs or _parse_stamped(stdout_times)
    meta = {}
    if run_dir is not None and (run_dir / "run.json").exists():
        meta = json.loads((run_dir / "run.json").read_text())
    test_end = None
    steps = meta.get("shape", {}).get("steps") or []
    if steps and steps[-1].get("end_s"):
        test_end = steps[-1]["end_s"]
    else:
        test_end = _first(logs, "--run-time limit reached") or _first(logs, "Time limit reached")
    if test_end is not None:
        result["tail_s"] = exited - test_end
    phases = {
        "launcher ready": _first(stdout_times, "run directory:"),
        "master up": _first(logs, "Starting Locust"),
        "worker connected": _first(logs, "reported as ready"),
        "test start": meta.get("started_at_s"),
        "first request": relay.first_post_s,
        "test end": test_end,
        "master shutting down": _first(logs, "Shutting down (exit code"),
        "master quit event": _first(logs, "server samples") if "run" in name else None,
        "master exited": _first(stdout_times, "LLM requests:") if "run" in name else None,
        "exit": exited,
    }
    result["phases"] = {key: value - launched for key, value in phases.items() if value is not None}
    return result


def _parse_stamped(stdout_times: list[tuple[float, str]]) -> list[tuple[float, str]]:
    found: list[tuple[float, str]] = []
    for _, line in stdout_times:
        if match := LOG_STAMP.match(line):
            found.append((datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp(), line))
    return found


def commands(
    host: str, work: Path, round_index: int, test_s: int, before: Path | None = None
) -> list[tuple[str, list[str], Path | None, Path]]:
    """The round's commands: (name, argv, run directory, working directory). With ``before`` (a
    copy of an earlier tree of this repository), its ``llm-locust run`` commands too, run from that
    folder (``python -m`` puts the working directory first on ``sys.path``, so that tree's
    packages are the ones imported, by the launcher and the Locust processes it starts)."""
    py = str(BIN / "python")
    locust = [py, "-m", "locust"]
    common = ["--host", host, "--model", "sim-llama"]
    plain = [*locust, "-f", str(REPO / "benchmarks" / "startup_plain_locustfile.py"), "--headless",
             "--host", host, "-u", "1", "-r", "1", "-t", f"{test_s}s", "--only-summary"]  # fmt: skip
    standalone_dir = work / f"standalone-{round_index}"
    standalone = [*locust, "-f", str(REPO / "llm_locust" / "locustfiles" / "chat_stream.py"), "--headless", *common,
                  "-u", "1", "-r", "1", "-t", f"{test_s}s", "--only-summary", "--run-dir", str(standalone_dir)]  # fmt: skip
    none_dir = work / f"run-none-{round_index}"
    run_none = [py, "-m", "llm_locust.cli", "run", "--shape", "none", "--workers", "1", *common,
                "-u", "1", "-r", "1", "-t", f"{test_s}s", "--run-dir", str(none_dir)]  # fmt: skip
    ladder_dir = work / f"run-ladder-{round_index}"
    run_ladder = [py, "-m", "llm_locust.cli", "run", "--workers", "1", *common, "--ladder", "1",
                  "--dwell-s", str(test_s), "--warmup-s", "1", "--run-dir", str(ladder_dir)]  # fmt: skip
    found = [
        ("plain", plain, None, REPO),
        ("locust -f", standalone, standalone_dir, REPO),
        ("run none", run_none, none_dir, REPO),
        ("run ladder", run_ladder, ladder_dir, REPO),
    ]
    if before is not None:
        for (name, argv, _, _), run_dir in zip(found[2:], (none_dir, ladder_dir), strict=True):
            old_dir = run_dir.with_name(run_dir.name + "-before")
            argv = [str(old_dir) if arg == str(run_dir) else arg for arg in argv]
            found.append((f"{name} (before)", argv, old_dir, before))
    return found


def _median(values: list) -> float:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the four commands (default 3)")
    parser.add_argument("--test-s", type=int, default=5, help="length of each test, s (default 5)")
    parser.add_argument("--before", type=Path, default=None,
                        help="a copy of an earlier tree (git archive COMMIT | tar -x -C DIR): its `run` commands "
                             "too, in the same rounds")  # fmt: skip
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="llm-locust-startup-") as tmp:
        work = Path(tmp)
        port = free_port()
        server = start_sim_server(port=port, max_num_seqs=8, log_path=work / "server.log")
        relay = FirstPostRelay(port)
        results: dict[str, list[dict]] = {}
        try:
            host = f"http://127.0.0.1:{relay.port}"
            for round_index in range(args.rounds):
                for name, argv_, run_dir, cwd in commands(host, work, round_index, args.test_s, args.before):
                    result = run_one(name, argv_, relay, run_dir, cwd)
                    results.setdefault(name, []).append(result)
                    print(f"round {round_index + 1} {name:20s} first request {result['first_request_s']:.2f} s  "
                          f"wall {result['wall_s']:.2f} s  tail {result.get('tail_s', float('nan')):.2f} s", flush=True)  # fmt: skip
        finally:
            relay.close()
            stop_process(server, grace_s=10)
    print(f"\nmedians over {args.rounds} rounds, {args.test_s} s tests, 1 user; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")  # fmt: skip
    plain = results["plain"]
    base_first, base_wall = _median([r["first_request_s"] for r in plain]), _median([r["wall_s"] for r in plain])
    print(f"{'command':20s} {'first request s':>16s} {'x plain':>8s} {'wall s':>8s} {'+ plain s':>10s} {'tail s':>7s}")
    for name, rows in results.items():
        first, wall = _median([r["first_request_s"] for r in rows]), _median([r["wall_s"] for r in rows])
        tail = _median([r.get("tail_s") for r in rows])
        print(f"{name:20s} {first:16.2f} {first / base_first:8.2f} {wall:8.2f} {wall - base_wall:10.2f} {tail:7.2f}")
    for name in [name for name in results if name.startswith("run ")]:
        print(f"\n{name}: phases, s from launch (median)")
        keys = list(results[name][0]["phases"])
        for key in keys:
            print(f"  {key:20s} {_median([r['phases'].get(key) for r in results[name]]):6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
