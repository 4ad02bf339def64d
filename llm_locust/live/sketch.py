"""A mergeable quantile sketch, for the live table's per-token inter-token latency (ITL).

The ITL values themselves are :func:`llm_locust.analysis.perrequest.itl.request_itl`'s (the post-run definition). A
request holds tens to thousands of tokens, so the master does not keep them: a log-bucket
histogram with relative accuracy ``alpha`` (the DDSketch construction, Masson et al.,
VLDB 2019) holds them. A positive value ``x`` falls in bucket ``i = ceil(log(x) / log(gamma))``
with ``gamma = (1 + alpha) / (1 - alpha)``, and bucket ``i`` answers ``2 * gamma**i / (gamma +
1)``, within ``alpha`` of every value in it. Sketches merge by adding bucket weights, so a
quantile over every worker's tokens is exact to ``alpha`` and never an average of per-worker
quantiles. Zero and negative values share one bucket answering 0.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

DEFAULT_ALPHA = 0.01
"""Relative accuracy of a quantile (1 %)."""


class LogHistogram:
    """Weighted quantile sketch of non-negative values (see the module docstring).

    Parameters
    ----------
    alpha : float, default 0.01
        Relative accuracy, 0 < alpha < 1.

    Examples
    --------
    >>> sketch = LogHistogram()
    >>> sketch.add_many(np.arange(1.0, 101.0))
    >>> abs(sketch.quantile(0.99) - 99.0) <= 0.01 * 99.0
    True
    """

    def __init__(self, alpha: float = DEFAULT_ALPHA) -> None:
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {alpha}")
        self.alpha = alpha
        self.gamma = (1 + alpha) / (1 - alpha)
        self._log_gamma = math.log(self.gamma)
        self.buckets: dict[int, float] = defaultdict(float)
        self.zero_weight = 0.0
        self.total_weight = 0.0

    def add_many(self, values: np.ndarray, weights: np.ndarray | None = None) -> None:
        """Add ``values`` (ms or any unit) with ``weights`` (default 1 each); NaN and non-positive
        weights are ignored."""
        values = np.asarray(values, dtype=float)
        weights = np.ones_like(values) if weights is None else np.asarray(weights, dtype=float)
        keep = np.isfinite(values) & (weights > 0)
        values, weights = values[keep], weights[keep]
        positive = values > 0
        self.zero_weight += float(weights[~positive].sum())
        if positive.any():
            index = np.ceil(np.log(values[positive]) / self._log_gamma).astype(np.int64)
            unique, inverse = np.unique(index, return_inverse=True)
            for bucket, weight in zip(unique.tolist(), np.bincount(inverse, weights=weights[positive]).tolist()):
                self.buckets[bucket] += weight
        self.total_weight += float(weights.sum())

    def merge(self, other: LogHistogram) -> None:
        """Add ``other``'s weights to this sketch (same ``alpha``)."""
        if other.alpha != self.alpha:
            raise ValueError("cannot merge sketches of different accuracy")
        for index, weight in other.buckets.items():
            self.buckets[index] += weight
        self.zero_weight += other.zero_weight
        self.total_weight += other.total_weight

    def quantile(self, q: float) -> float:
        """The ``q``-quantile (0 <= q <= 1): the value of the bucket where the cumulative weight
        first reaches ``q * total``; NaN when the sketch is empty."""
        if not self.total_weight > 0:
            return math.nan
        rank = q * self.total_weight
        seen = self.zero_weight
        if seen >= rank and seen > 0:
            return 0.0
        for index in sorted(self.buckets):
            seen += self.buckets[index]
            if seen >= rank:
                return 2.0 * self.gamma**index / (self.gamma + 1.0)
        return 2.0 * self.gamma ** max(self.buckets) / (self.gamma + 1.0)
