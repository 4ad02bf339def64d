"""Per-token inter-token latency (ITL) and inter-chunk latency from ``requests.csv``'s raw times.

Inputs per request (columns of :attr:`llm_locust.analysis.rundir.reader.Run.requests`): ``ttft_ms``, ``e2e_ms``
(ms from the send), ``output_tokens``, ``token_times_us`` (when each token event arrived, µs from
the send, space-separated; the first is the TTFT) and ``event_tokens`` (tokens each of those
events carried, space-separated; "" when the server did not say: then the first event counts one
token, as the TPOT formula assumes, and the other ``N - 1`` are spread evenly over the later
events).

Definitions, for token events ``i = 0..m`` arriving at ``t_i`` carrying ``n_i`` tokens
(``sum n_i = N``), and the stream's end ``t_end`` (``e2e_ms``):

- **Inter-chunk latency**: the raw gaps ``t_i - t_(i-1)``, ``i >= 1`` (smaller is better).
- **Per-token ITL**: each gap divided by the tokens of the event that closes it — the values
  ``(t_i - t_(i-1)) / n_i``, each weighing ``n_i`` tokens, where the last gap runs to ``t_end``
  (the last token counts as delivered when the stream ends). The ``n_0 - 1`` tokens that came with
  the first token have ITL 0 (or share ``t_end - t_0`` when there is a single token event). So the
  ITL never includes the TTFT, and the token-weighted mean ITL is exactly
  ``TPOT = (e2e - ttft) / (N - 1)``.
"""

from __future__ import annotations

import numpy as np


def _numbers(value: object) -> np.ndarray:
    """Space-separated numbers (as in ``requests.csv``), or a sequence of numbers, as floats."""
    if isinstance(value, (list, tuple, np.ndarray)):
        return np.asarray(value, dtype=float)
    if not isinstance(value, str) or not value.strip():
        return np.empty(0)
    return np.array(value.split(), dtype=float)


def request_itl(
    ttft_ms: float, e2e_ms: float, output_tokens: float, token_times_us: str, event_tokens: str = ""
) -> tuple[np.ndarray, np.ndarray]:
    """Per-token ITL values of one request and the tokens each weighs.

    Parameters
    ----------
    ttft_ms, e2e_ms : float
        ms from the send.
    output_tokens : float
        ``N``.
    token_times_us, event_tokens : str or sequence of numbers
        As in ``requests.csv`` (or as a record holds them).

    Returns
    -------
    (values_ms, weights) : tuple of numpy.ndarray
        float64; ``sum(values * weights) = e2e - ttft`` and ``sum(weights) = N - 1``. Empty when
        ``N < 2`` or no token event was recorded (the metric does not apply).

    Examples
    --------
    Three events of 1, 2 and 1 tokens at 100, 130 and 150 ms, the stream ending at 160 ms:

    >>> v, w = request_itl(100.0, 160.0, 4, "100000 130000 150000", "1 2 1")
    >>> v.tolist(), w.tolist()
    ([15.0, 30.0], [2.0, 1.0])
    >>> float((v * w).sum() / w.sum()) == (160.0 - 100.0) / (4 - 1)
    True
    """
    times_us = _numbers(token_times_us)
    if len(times_us) == 0 or not output_tokens >= 2 or np.isnan(e2e_ms):
        return np.empty(0), np.empty(0)
    counts = _numbers(event_tokens)
    if len(counts) != len(times_us):
        counts = np.full(len(times_us), (output_tokens - 1.0) / max(len(times_us) - 1, 1))
        counts[0] = 1.0 if len(times_us) > 1 else output_tokens
    ends_us = times_us.copy()
    ends_us[-1] = max(e2e_ms * 1000.0, times_us[-1])
    if len(times_us) == 1:
        weight = counts[0] - 1.0
        if not weight > 0:  # one token in all (a count contradicting output_tokens): no gap
            return np.empty(0), np.empty(0)
        return np.array([(ends_us[0] - ttft_ms * 1000.0) / 1000.0 / weight]), np.array([weight])
    gaps_ms = np.diff(np.concatenate([[times_us[0]], ends_us[1:]])) / 1000.0  # differences taken in us
    values = np.concatenate([np.array([0.0]), gaps_ms / np.where(counts[1:] > 0, counts[1:], 1.0)])
    weights = np.concatenate([np.array([max(counts[0] - 1.0, 0.0)]), counts[1:]])
    keep = weights > 0
    return values[keep], weights[keep]


def chunk_gaps_ms(token_times_us: str) -> np.ndarray:
    """Raw gaps between consecutive token events, ms (inter-chunk latency).

    >>> chunk_gaps_ms("100000 130000 150000").tolist()
    [30.0, 20.0]
    """
    return np.diff(_numbers(token_times_us)) / 1000.0


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """Quantile ``q`` (0-1) of values repeated by their weights (inverse of the weighted CDF).

    NaN when the total weight is 0.

    >>> weighted_quantile(np.array([1.0, 10.0]), np.array([3.0, 1.0]), 0.5)
    1.0
    """
    total = float(weights.sum()) if len(weights) else 0.0
    if total <= 0:
        return float("nan")
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    index = int(np.searchsorted(cumulative, q * total, side="left"))
    return float(values[order][min(index, len(order) - 1)])
