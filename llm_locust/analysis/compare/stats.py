"""Bootstrap intervals for the round comparison: a median, a ratio of medians, a window's throughput.

Written here rather than taken from ``scipy.stats.bootstrap`` because scipy is not a dependency
and the three statistics below need only numpy's generator; each is a plain percentile
bootstrap with a fixed seed, so the same run directories always give the same interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

RESAMPLES = 2000
"""Bootstrap resamples per interval."""

CONFIDENCE = 0.95
"""Two-sided coverage of every interval."""

SEED = 20240601
"""Seed of the generator (fixed: the same data always gives the same interval)."""


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """A point estimate with its bootstrap interval.

    Attributes
    ----------
    value : float
        The statistic on the data (NaN when it does not apply: no data).
    low, high : float
        Percentile-bootstrap interval (:data:`CONFIDENCE`); NaN when fewer than 2 values.
    n : int
        Values (requests) behind it.
    """

    value: float
    low: float
    high: float
    n: int
    samples: np.ndarray | None = field(default=None, repr=False, compare=False)
    """Bootstrap replicates of ``value`` when kept (for :func:`ratio_of`)."""

    def to_json(self) -> dict:
        """``{"value", "low", "high", "n"}`` with NaN as None."""
        return {"value": _num(self.value), "low": _num(self.low), "high": _num(self.high), "n": self.n}

    @property
    def excludes_one(self) -> bool:
        """For a ratio: the interval lies wholly above or below 1."""
        return bool(self.low > 1.0 or self.high < 1.0)

    def text(self, fmt: str = "{:.1f}") -> str:
        """``"12.3 [11.0, 13.5]"`` (``"-"`` for NaN)."""
        if not math.isfinite(self.value):
            return "-"
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            return fmt.format(self.value)
        return f"{fmt.format(self.value)} [{fmt.format(self.low)}, {fmt.format(self.high)}]"


def nan_estimate() -> Estimate:
    """An estimate of nothing: value and interval NaN, ``n`` 0 (a figure that was not measured)."""
    return Estimate(value=math.nan, low=math.nan, high=math.nan, n=0)


def _num(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _interval(samples: np.ndarray) -> tuple[float, float]:
    tail = (1.0 - CONFIDENCE) / 2.0
    return float(np.quantile(samples, tail)), float(np.quantile(samples, 1.0 - tail))


def median_ci(values) -> Estimate:
    """Median of ``values`` (NaN dropped) with a percentile-bootstrap interval.

    Parameters
    ----------
    values : array-like of float
        E.g. per-request TTFT (ms) or decode rate (tokens/s).

    Returns
    -------
    Estimate
        ``value`` = ``numpy.median``; NaN everywhere when no value; no interval below 2 values.
    """
    x = np.asarray(values, dtype="float64")
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return Estimate(value=math.nan, low=math.nan, high=math.nan, n=0)
    if len(x) < 2:
        return Estimate(value=float(np.median(x)), low=math.nan, high=math.nan, n=len(x))
    rng = np.random.default_rng(SEED)
    samples = np.median(x[rng.integers(0, len(x), (RESAMPLES, len(x)))], axis=1)
    low, high = _interval(samples)
    return Estimate(value=float(np.median(x)), low=low, high=high, n=len(x))


def median_ratio_ci(after, before) -> Estimate:
    """``median(after) / median(before)`` with a bootstrap interval (each side resampled alone).

    Returns
    -------
    Estimate
        ``n`` is the smaller of the two sample sizes; NaN when either side is empty or the
        baseline median is 0; no interval when either side has fewer than 2 values.
    """
    a = np.asarray(after, dtype="float64")
    b = np.asarray(before, dtype="float64")
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    n = int(min(len(a), len(b)))
    if len(a) == 0 or len(b) == 0 or np.median(b) == 0:
        return Estimate(value=math.nan, low=math.nan, high=math.nan, n=n)
    value = float(np.median(a) / np.median(b))
    if len(a) < 2 or len(b) < 2:
        return Estimate(value=value, low=math.nan, high=math.nan, n=n)
    rng = np.random.default_rng(SEED)
    ma = np.median(a[rng.integers(0, len(a), (RESAMPLES, len(a)))], axis=1)
    mb = np.median(b[rng.integers(0, len(b), (RESAMPLES, len(b)))], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = ma / mb
    low, high = _interval(ratios[np.isfinite(ratios)])
    return Estimate(value=value, low=low, high=high, n=n)


THROUGHPUT_SLICES = 10
"""Equal slices a step window is cut into for :func:`throughput_ci`."""


def throughput_ci(value_tps: float, slice_tps, n: int) -> Estimate:
    """A step's output tokens/s with an interval from the token rate's spread across the window.

    The window is cut into slices; ``slice_tps`` is the token rate generated in each (tokens
    prorated over each request's decode, :func:`llm_locust.analysis.perrequest.metrics.prorated_tokens`, so a slice is
    not empty just because no request ended in it). The slices are resampled with replacement;
    half the replicates are their mean (the prorated throughput, ``output_tps_prorated``), half
    that mean scaled by ``value_tps / mean(slice_tps)`` (centred on ``output_tps``). The interval
    is the percentile interval of all of them: it covers the spread of the token rate *and* the
    gap between counting whole requests at their end and prorating them (requests ending in waves
    make ``output_tps`` jump by a wave, see :mod:`llm_locust.analysis.perstep.table`).

    Parameters
    ----------
    value_tps : float
        The step's ``output_tps`` (completed requests' tokens / window, tokens/s).
    slice_tps : array-like of float
        Prorated tokens/s of each slice of the window.
    n : int
        Requests completed in the window.

    Returns
    -------
    Estimate
        With ``samples`` kept; no interval when the slices generated no token.
    """
    x = np.asarray(slice_tps, dtype="float64")
    x = x[np.isfinite(x)]
    if not math.isfinite(value_tps) or len(x) < 2 or x.mean() <= 0:
        return Estimate(value=value_tps, low=math.nan, high=math.nan, n=n)
    rng = np.random.default_rng(SEED)
    means = x[rng.integers(0, len(x), (RESAMPLES, len(x)))].mean(axis=1)
    half = RESAMPLES // 2
    samples = np.concatenate([means[:half] * (value_tps / x.mean()), means[half:]])
    low, high = _interval(samples)
    return Estimate(value=float(value_tps), low=low, high=high, n=n, samples=samples)


def bin_mean_ci(value_tps: float, bin_tps, n: int) -> Estimate:
    """A step's prorated tokens/s with a percentile-bootstrap interval over its bins.

    The bins (equal slices of the steady window) are resampled with replacement and each
    replicate is their mean; the interval is the percentile interval of those means
    (:data:`CONFIDENCE`). ``value_tps`` is the step's ``output_tps_prorated``, which equals the
    bins' mean when the bins partition the window (:func:`llm_locust.analysis.compare.rounds.prorated_step_estimates`).

    Parameters
    ----------
    value_tps : float
        The step's prorated output tokens/s.
    bin_tps : array-like of float
        Prorated output tokens/s of each bin, shape (k,).
    n : int
        Requests completed in the window.

    Returns
    -------
    Estimate
        With ``samples`` kept (for :func:`ratio_of`); no interval with fewer than 2 finite bins or
        when the bins hold no token.

    >>> e = bin_mean_ci(2.0, [1.0, 2.0, 3.0], 5)
    >>> e.value, 1.0 <= e.low <= e.high <= 3.0, e.n
    (2.0, True, 5)
    """
    x = np.asarray(bin_tps, dtype="float64")
    x = x[np.isfinite(x)]
    if not math.isfinite(value_tps) or len(x) < 2 or x.mean() <= 0:
        return Estimate(value=value_tps, low=math.nan, high=math.nan, n=n)
    rng = np.random.default_rng(SEED)
    samples = x[rng.integers(0, len(x), (RESAMPLES, len(x)))].mean(axis=1)
    low, high = _interval(samples)
    return Estimate(value=float(value_tps), low=low, high=high, n=n, samples=samples)


def ratio_of(after: Estimate, before: Estimate) -> Estimate:
    """Ratio of two independent estimates, ``after.value / before.value``.

    Interval: when both kept their bootstrap ``samples``, the percentile interval of
    ``after.samples / shuffled(before.samples)`` (shuffled with a fixed seed so the two sides'
    replicates are paired at random, as independent runs are); otherwise the conservative
    ``[after.low / before.high, after.high / before.low]``. NaN when either value is missing.
    """
    if not (math.isfinite(after.value) and math.isfinite(before.value)) or before.value == 0:
        return Estimate(value=math.nan, low=math.nan, high=math.nan, n=min(after.n, before.n))
    if after.samples is not None and before.samples is not None:
        rng = np.random.default_rng(SEED + 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = after.samples / rng.permutation(before.samples)
        ratios = ratios[np.isfinite(ratios)]
        if len(ratios):
            low, high = _interval(ratios)
            return Estimate(value=after.value / before.value, low=low, high=high, n=min(after.n, before.n))
    low = after.low / before.high if before.high > 0 else math.nan
    high = after.high / before.low if before.low > 0 else math.nan
    return Estimate(value=after.value / before.value, low=low, high=high, n=min(after.n, before.n))
