"""Parse a synthetic 24-hour vLLM server log; the target is 5 s or less.

    python benchmarks/serverlog_parse.py [--hours 24] [--stats-interval-s 2] [--requests-per-s 5]

Writes the log (vLLM 0.32 V1 format: an ``Engine 000:`` stats line every ``--stats-interval-s``
with ``(APIServer pid=N)`` prefixes, uvicorn access lines for ``--requests-per-s`` requests and
``/metrics`` scrapes, an aborted request now and then) into a temporary folder, then measures in
the same run:

- baseline: counting the file's lines in Python (``sum(1 for _ in file)``), the floor any
  line-based reader pays;
- parse: reading the file in chunks (:func:`llm_locust.analysis.server.serverlog.read_log`, keeping the
  lines a parser can use) and :func:`llm_locust.analysis.server.serverlog.parse_server_log` (stats lines
  into the normalised series, the startup config, error lines by kind), as ``llm-locust
  analyze`` does.

Prints both times, the ratio and whether the parse met the target.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llm_locust.analysis.server.serverlog import (
    LogClock,
    keep_rule,
    parse_server_log,
    read_log,
)

TARGET_S = 5.0
START_S = 1_764_504_000.0  # 2025-11-30 12:00:00 UTC


def write_log(path: Path, *, hours: float, stats_interval_s: float, requests_per_s: float) -> int:
    """Write the synthetic log; returns its number of lines."""
    rng = random.Random(0)
    stamp = lambda t: time.strftime("%m-%d %H:%M:%S", time.gmtime(t))  # noqa: E731
    lines = [
        f"(APIServer pid=17614) INFO {stamp(START_S)} [api_utils.py:286] non-default args: "
        "{'model_tag': '/models/llama', 'host': '0.0.0.0', 'port': 8000, 'model': '/models/llama', "
        "'max_model_len': 8192, 'max_num_seqs': 64, 'max_num_batched_tokens': 8192}",
        f"(EngineCore pid=17723) INFO {stamp(START_S)} [kv_cache_utils.py:2327] GPU KV cache "
        "size: 524,288 tokens, Maximum concurrency for 8,192 tokens per request: 64.00x",
    ]
    access = (
        'INFO:     10.0.0.{}:{} - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        'INFO:     10.0.0.9:{} - "GET /metrics HTTP/1.1" 200 OK',
    )
    per_interval = max(1, round(requests_per_s * stats_interval_s))
    n = int(hours * 3600 / stats_interval_s)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
        count = len(lines)
        for k in range(n):
            t = START_S + 60 + k * stats_interval_s
            running, waiting = rng.randint(0, 64), max(0, rng.randint(-40, 20))
            chunk = [
                f"(APIServer pid=17614) INFO {stamp(t)} [loggers.py:335] Engine 000: Avg "
                f"prompt throughput: {rng.uniform(0, 4000):.1f} tokens/s, Avg generation "
                f"throughput: {rng.uniform(0, 3000):.1f} tokens/s, Running: {running} reqs, "
                f"Waiting: {waiting} reqs, GPU KV cache usage: {rng.uniform(0, 100):.1f}%, "
                f"Prefix cache hit rate: {rng.uniform(0, 90):.1f}%"
            ]
            chunk += [access[0].format(rng.randint(1, 250), rng.randint(1024, 65535)) for _ in range(per_interval)]
            chunk.append(access[1].format(rng.randint(1024, 65535)))
            if k % 500 == 0:
                chunk.append(
                    f"(APIServer pid=17614) INFO {stamp(t)} [async_llm.py:402] Aborted request chatcmpl-{k:08x}."
                )
            f.write("\n".join(chunk) + "\n")
            count += len(chunk)
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--stats-interval-s", type=float, default=2.0)
    parser.add_argument("--requests-per-s", type=float, default=5.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "server.log"
        lines = write_log(
            path, hours=args.hours, stats_interval_s=args.stats_interval_s, requests_per_s=args.requests_per_s
        )
        size_mb = path.stat().st_size / 1e6
        t = time.perf_counter()
        with open(path, encoding="utf-8") as f:
            counted = sum(1 for _ in f)
        baseline_s = time.perf_counter() - t
        t = time.perf_counter()
        result = parse_server_log(read_log(path, keep=keep_rule()), clock=LogClock(reference_s=START_S, tz="UTC"))
        parse_s = time.perf_counter() - t
    assert counted == lines
    print(
        f"synthetic vLLM log: {args.hours:g} h, {lines:,} lines, {size_mb:.1f} MB "
        f"({result.data_lines:,} stats lines, {len(result.errors)} error lines, "
        f"max_num_seqs {result.config.batch_ceiling})"
    )
    print(f"baseline (count lines):  {baseline_s:6.3f} s")
    print(f"parse (read + parse):    {parse_s:6.3f} s   ratio {parse_s / baseline_s:.1f}x baseline")
    ok = parse_s <= TARGET_S
    print(f"target <= {TARGET_S:g} s: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
