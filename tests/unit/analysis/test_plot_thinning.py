"""The timeline's long series drawn as bin averages (llm_locust/analysis/report/plots.py ``thinned``),
against the step function's integral summed interval by interval in plain Python."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from llm_locust.analysis.report.plots import thinned


def _by_hand(t: list[float], v: list[float], start: float, end: float) -> float:
    """Mean of the step function over [start, end) where measured: each interval's overlap."""
    total = covered = 0.0
    for k in range(len(t) - 1):
        overlap = min(end, t[k + 1]) - max(start, t[k])
        if overlap > 0 and not math.isnan(v[k]):
            total += v[k] * overlap
            covered += overlap
    return total / covered if covered > 0 else math.nan


@pytest.mark.parametrize("seed", range(3))
def test_bin_means_equal_the_integral_interval_by_interval(seed):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.uniform(0.1, 3.0, 500))
    v = rng.integers(0, 64, 500).astype(float)
    v[rng.random(500) < 0.1] = np.nan  # gaps in the measurement
    v[200:260] = np.nan  # a bin or more with nothing measured
    frame, bin_s = thinned(pd.DataFrame({"t_s": t, "running": v}), ("running",), max_points=37)

    assert len(frame) == 37 and bin_s == pytest.approx((t[-1] - t[0]) / 37)
    for start, mean in zip(frame["t_s"], frame["running"]):
        expected = _by_hand(t.tolist(), v.tolist(), start, min(start + bin_s, t[-1]))
        if math.isnan(expected):
            assert math.isnan(mean)
        else:
            assert mean == pytest.approx(expected, rel=1e-9)
    assert frame["running"].isna().any()


def test_a_short_series_is_drawn_as_it_is():
    frame = pd.DataFrame({"t_s": [0.0, 1.0], "inflight": [2.0, 0.0]})
    same, bin_s = thinned(frame, ("inflight",), max_points=2)
    assert same is frame and bin_s is None
