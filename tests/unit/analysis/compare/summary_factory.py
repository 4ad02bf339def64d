"""Round summaries from numbers you can check by hand, for the attribution rules.

:func:`summary` builds a :class:`~llm_locust.analysis.compare.rounds.RoundSummary` from per-request
single-request figures and per-step prorated throughputs given as ``(value, low, high)`` (no
bootstrap replicates: :func:`llm_locust.analysis.compare.stats.ratio_of` then gives the conservative interval
``[a.low / b.high, a.high / b.low]``, which a test can work out by hand).

``QUANT_F32`` / ``QUANT_Q4_0`` and ``STATIC_MAX8`` / ``STATIC_MAX1`` are the figures of two real
A/Bs run for issue 25 (7 Dec 2026, this machine, run directories kept under /tmp only):

- ``llm-locust diagnose --host <f32> --host-b <q4_0>`` against llama.cpp ``llama-server`` (the
  ``slow`` model as f32 and as q4_0, ``SLOTS=4``, ``--no-repack``, one thread each), ``--ladder
  1,2,4,8 --dwell-s 15 --warmup-s 3 --baseline-requests 8 --max-tokens 64 --ignore-eos true``
  (``/tmp/attr-ab/run1``): the attribution then read ``mixed``;
- the embedded server's static batcher (``--batching static --batch-wait-ms 200``) with
  ``--max-num-seqs 8`` against ``1``, ``--ladder 1,2,4,8 --dwell-s 10 --warmup-s 2
  --baseline-requests 8 --max-tokens 32`` (``/tmp/attr-static/run1``): also ``mixed``.

Per round: the baseline run's 8 decode rates (tokens/s) and TTFTs (ms), the server's prefill
times (llama.cpp ``timings.prompt_ms``; none from the embedded server's vLLM flavour), each step's
``output_tps_prorated`` with its interval, the step TTFT p50, critical concurrency, observed
running and waiting maxima and the startup config's ceiling.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from llm_locust.analysis.compare.rounds import RoundSummary
from llm_locust.analysis.compare.stats import Estimate, median_ci, nan_estimate
from llm_locust.analysis.server.config import ServerConfig


def est(value: float, low: float, high: float, n: int = 10) -> Estimate:
    return Estimate(value=value, low=low, high=high, n=n)


def summary(
    name: str,
    *,
    decode: list[float],
    ttft: list[float],
    steps: dict[float, tuple[float, float, float]],
    ttft_p50: dict[float, float],
    critical: float | None,
    running_max: float,
    waiting_max: float,
    ceiling: int | None,
    waiting_mean: float = math.nan,
    prefill: list[float] | None = None,
    batch_wait_max_ms: float | None = None,
    repeat_decode: Estimate | None = None,
    prefix_hit: float | None = None,
) -> RoundSummary:
    """A round summary from its numbers (module docstring)."""
    tps = {float(u): est(*v) for u, v in steps.items()}
    table = pd.DataFrame(
        {
            "target_users": [float(u) for u in steps],
            "output_tps": [v[0] for v in steps.values()],
            "output_tps_prorated": [v[0] for v in steps.values()],
            "ttft_p50_ms": [ttft_p50[u] for u in steps],
        }
    )
    if prefix_hit is not None:  # every step the same ratio, 1000 prompt tokens looked up each
        table["prefix_cache_hit_ratio"] = prefix_hit
        table["prefix_cache_queried_tokens"] = 1000.0
    return RoundSummary(
        name=name,
        steps=table,
        step_tps=tps,
        step_tps_prorated=tps,
        single_ttft_ms=median_ci(ttft),
        single_decode_tps=median_ci(decode),
        single_ttft_values=np.array(ttft, float),
        single_decode_values=np.array(decode, float),
        single_prefill_values=np.array(prefill if prefill is not None else [math.nan] * len(ttft), float),
        single_source="baseline run (8 requests)",
        single_repeat_decode_ratio=repeat_decode or nan_estimate(),
        critical_users=critical,
        knee_users=critical if critical is not None else max(tps),
        bottleneck="scheduler_ceiling",
        successes=100,
        failures=0,
        running_max=running_max,
        waiting_max=waiting_max,
        waiting_mean=waiting_mean,
        server_config=ServerConfig(
            batch_ceiling=ceiling, batch_ceiling_name="n_slots", batch_wait_max_ms=batch_wait_max_ms
        ),
    )


QUANT_F32 = dict(
    decode=[52.69, 57.49, 58.05, 58.40, 59.44, 59.12, 59.91, 57.00],
    ttft=[146.7, 125.3, 131.6, 121.5, 125.2, 105.2, 125.0, 125.6],
    prefill=[144.2, 120.8, 126.9, 116.6, 120.9, 100.8, 120.9, 120.4],
    steps={1: (58.4, 58.1, 58.7), 2: (61.7, 59.7, 63.7), 4: (101.2, 95.4, 106.8), 8: (99.7, 93.0, 105.7)},
    ttft_p50={1: 21.0, 2: 92.0, 4: 207.0, 8: 2722.0},
    critical=4.0,
    running_max=4.0,
    waiting_max=4.0,
    ceiling=4,
)
QUANT_Q4_0 = dict(
    decode=[165.25, 168.04, 167.16, 167.34, 166.96, 165.66, 167.86, 168.97],
    ttft=[127.7, 101.6, 104.5, 108.8, 103.6, 105.0, 90.7, 101.9],
    prefill=[124.0, 88.1, 91.4, 91.7, 91.2, 91.4, 77.9, 89.5],
    steps={1: (169.3, 168.7, 170.1), 2: (146.4, 145.7, 147.3), 4: (207.7, 206.1, 209.5), 8: (209.7, 207.0, 212.0)},
    ttft_p50={1: 9.0, 2: 19.0, 4: 42.0, 8: 1253.0},
    critical=4.0,
    running_max=4.0,
    waiting_max=4.0,
    ceiling=4,
)
STATIC_MAX8 = dict(
    decode=[47.64, 47.56, 47.57, 47.62, 47.60, 47.59, 47.58, 47.71],
    ttft=[226.9, 225.1, 225.0, 225.0, 224.9, 225.2, 224.6, 226.8],
    steps={1: (36.6, 35.0, 37.7), 2: (69.8, 67.3, 72.0), 4: (131.5, 130.5, 132.0), 8: (280.0, 280.0, 280.0)},
    ttft_p50={1: 225.0, 2: 228.0, 4: 232.0, 8: 44.0},
    critical=None,
    running_max=8.0,
    waiting_max=4.0,
    ceiling=8,
)
STATIC_MAX1 = dict(
    decode=[47.61, 47.64, 47.59, 47.60, 47.59, 47.61, 47.58, 47.65],
    ttft=[24.8, 24.0, 24.3, 23.9, 24.0, 24.1, 23.9, 24.5],
    steps={1: (47.4, 47.1, 47.7), 2: (47.5, 47.1, 47.9), 4: (47.5, 47.1, 47.9), 8: (47.5, 47.1, 47.9)},
    ttft_p50={1: 24.0, 2: 696.0, 4: 2043.0, 8: 4737.0},
    critical=1.0,
    running_max=1.0,
    waiting_max=7.0,
    ceiling=1,
)

NO_PREFIX_CACHE = dict(
    decode=[81.88, 78.94, 68.43, 86.11, 77.36, 72.81, 77.89, 122.35, 72.04, 62.88, 61.03, 58.72, 61.87, 62.47, 69.61],
    ttft=[314.5, 302.8, 312.5, 302.2, 323.4, 326.8, 343.5, 455.2, 338.0, 333.7, 345.5, 339.2, 351.0, 344.7, 334.5],
    steps={1: (29.2, 27.5, 30.5), 2: (32.0, 32.0, 32.0)},
    ttft_p50={1: 334.5, 2: 521.6},
    critical=None,
    running_max=2.0,
    waiting_max=0.0,
    ceiling=None,
    prefix_hit=0.0,
)
"""The real prefix-caching A/B of ``tests/real/test_real_vllm_prefix.py`` (7 Dec 2026, vLLM CPU
0.32, ``slow`` model, ``--max-num-seqs 8``; ``--ladder 1,2 --dwell-s 10 --warmup-s 2 --max-tokens 16
--input-tokens 512 --shared-prefix-tokens 448``): the round with ``--no-enable-prefix-caching``,
its concurrency-1 step's decode rates and TTFTs; step intervals rounded."""
PREFIX_CACHE = dict(
    decode=[42.92, 62.55, 63.69, 73.84, 67.3, 56.26, 59.05, 68.58, 59.39, 53.43, 61.06, 54.96, 48.88, 69.18, 75.5,
            57.67, 66.9, 64.77, 58.86, 58.55, 67.1, 65.79],
    ttft=[267.4, 98.6, 107.5, 115.7, 104.3, 105.5, 104.3, 105.7, 99.2, 118.2, 113.2, 110.4, 119.1, 106.2, 106.5,
          116.7, 99.7, 109.2, 105.5, 115.2, 114.2, 107.1],
    steps={1: (44.9, 43.0, 46.5), 2: (63.1, 58.3, 68.4)},
    ttft_p50={1: 107.3, 2: 134.2},
    critical=None,
    running_max=2.0,
    waiting_max=0.0,
    ceiling=None,
    prefix_hit=0.75,
)  # fmt: skip
"""The same A/B's round with prefix caching on (vLLM's default): 3 of each prompt's 4 blocks found
cached from the second request on."""
