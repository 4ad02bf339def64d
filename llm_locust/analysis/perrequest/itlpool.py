"""Pooled per-token ITL and inter-chunk latency over many requests, in bulk and in bounded memory.

:func:`llm_locust.analysis.perrequest.itl.request_itl` and :func:`llm_locust.analysis.perrequest.itl.chunk_gaps_ms` define the values of one
request; this module gives the same values for a block of requests at once (numpy over every
token event of the block, the ``token_times_us`` / ``event_tokens`` strings split and parsed by
pyarrow in bulk), and keeps them as histograms: each distinct value with its total weight
(ITL) or count (inter-chunk gaps). A million requests of 64 tokens are 64 million values, a
histogram of them a few hundred thousand (the times are whole microseconds), so a pass over
``requests.csv`` block by block holds one block and the histograms.

Exactness: a quantile of a histogram is the quantile of the values it counts, so the
percentiles equal those of the raw values (the ITL's :func:`llm_locust.analysis.perrequest.itl.weighted_quantile`, the
gaps' ``numpy.percentile``, linear interpolation, :func:`linear_percentile`) whenever the
weights add up exactly - always for whole token counts (``event_tokens`` present); the mean is
the same sum taken in another order (equal to about 1e-15 relative). A block whose times do not
parse as finite numbers is read by :func:`llm_locust.analysis.perrequest.itl.request_itl` row by row instead (which
raises for a cell that is no number, as before).

Written here rather than taken from a library: it is measurement (the ITL definition), joined
to the run directory's own string encoding.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from llm_locust.analysis.perrequest.itl import chunk_gaps_ms, request_itl, weighted_quantile
from llm_locust.analysis.rundir.csvread import complete_length, iter_typed
from llm_locust.analysis.schema import ERROR_KINDS, REQUEST_SCHEMA

ITL_COLUMNS: tuple[str, ...] = ("error_kind", "ttft_ms", "e2e_ms", "output_tokens", "token_times_us", "event_tokens")
"""``requests.csv`` columns the pooled ITL reads."""


def split_numbers(strings: Sequence[str | None] | pd.Series) -> tuple[np.ndarray, np.ndarray, bool] | None:
    """Space-separated numbers of each row, parsed in bulk.

    Parameters
    ----------
    strings : pandas.Series of str, or a sequence of str
        Cells as in ``requests.csv`` (``"29431 52835 74454"``; "" or None for none).

    Returns
    -------
    (values, counts, whole) : tuple, or None
        ``values`` all rows' numbers end to end: int64 when ``whole`` (every number written as a
        whole number, below 2**53 in magnitude), else float64; ``counts`` int64, how many each
        row has. None when a token is not a finite number (the caller reads row by row).
    """
    cells = strings.tolist() if isinstance(strings, pd.Series) else list(strings)
    whole_numbers = _whole_numbers(cells)
    if whole_numbers is not None:
        return whole_numbers
    try:
        array = pa.array(cells, from_pandas=True)
    except (pa.ArrowException, TypeError):
        return None  # a cell that is no string: row by row
    if pa.types.is_null(array.type):
        array = pc.cast(array, pa.string())  # all None
    elif not pa.types.is_string(array.type) and not pa.types.is_large_string(array.type):
        return None  # numbers, not text: row by row (as request_itl reads them)
    lists = pc.ascii_split_whitespace(array)
    flat = pc.list_flatten(lists)
    keep = pc.not_equal(flat, "")
    tokens = pc.filter(flat, keep)
    whole = True
    try:
        values = pc.cast(tokens, pa.int64()).to_numpy(zero_copy_only=False)
        whole = not len(values) or bool(np.abs(values).max() <= _EXACT_INT)
        if not whole:
            values = values.astype(np.float64)
    except pa.ArrowInvalid:
        whole = False
        try:
            values = pc.cast(tokens, pa.float64()).to_numpy(zero_copy_only=False)
        except pa.ArrowInvalid:
            return None
        if not np.isfinite(values).all():
            return None
    parents = pc.list_parent_indices(lists).to_numpy()
    counts = np.bincount(parents[keep.to_numpy(zero_copy_only=False)], minlength=len(cells))
    return values, counts.astype(np.int64), whole


_EXACT_INT = 1 << 53
"""Whole numbers up to this magnitude are exact in float64."""
_MARK = -1
"""Written after every cell by :func:`_whole_numbers`: no time nor token count is negative."""


def tokens_per_event(tokens: np.ndarray, m: np.ndarray, given: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Tokens each token event carried, for rows whose events lie end to end: the row's own
    counts when it has one per event (``event_tokens``), else :func:`llm_locust.analysis.perrequest.itl.request_itl`'s
    spread: the first event one token and each later one ``(N - 1) / (m - 1)``, a single event
    ``N``.

    Parameters
    ----------
    tokens : numpy.ndarray
        ``N`` of each row (output tokens), float64, shape (n,).
    m, k : numpy.ndarray
        Events and given counts of each row, int64, shape (n,) (:func:`split_numbers`' counts).
    given : numpy.ndarray
        The given counts end to end, shape (k.sum(),).

    Returns
    -------
    numpy.ndarray
        float64, shape (m.sum(),).

    >>> tokens_per_event(np.array([5.0, 3.0]), np.array([3, 1]), np.zeros(0), np.array([0, 0])).tolist()
    [1.0, 2.0, 2.0, 3.0]
    """
    starts = np.cumsum(m) - m
    first = np.zeros(int(m.sum()), bool)
    first[starts[m > 0]] = True
    row = np.repeat(np.arange(len(m)), m)
    c = np.repeat((tokens - 1.0) / np.maximum(m - 1, 1), m)
    c[first] = np.where(m > 1, 1.0, tokens)[row[first]]
    own = k == m
    c[np.repeat(own, m)] = given[np.repeat(own, k)]
    return c


def _missing(cell: object) -> bool:
    """None, NaN or pandas' NA: a cell with nothing in it."""
    return cell is None or cell is pd.NA or (isinstance(cell, float) and math.isnan(cell))


def _whole_numbers(cells: list) -> tuple[np.ndarray, np.ndarray, bool] | None:
    """:func:`split_numbers` of cells of whole numbers (as the writer writes them): numpy's C
    text parser over the cells joined, each followed by :data:`_MARK`; None for any other cell
    (a fraction, a negative or huge number, text: the general path splits and parses each
    token)."""
    if not cells:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), True
    try:
        if not any(cells):  # no cell holds anything (event_tokens, usually)
            return np.zeros(0, np.int64), np.zeros(len(cells), np.int64), True
        text = f" {_MARK} ".join(cells) + f" {_MARK}"
    except TypeError:  # None, NaN, NA or another object among the cells
        strings = [cell if isinstance(cell, str) else "" if _missing(cell) else None for cell in cells]
        return None if None in strings else _whole_numbers(strings)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a cell it cannot read: "could not be read to its end"
            values = np.fromstring(text, dtype=np.int64, sep=" ")
    except (ValueError, DeprecationWarning):
        return None
    marks = np.flatnonzero(values == _MARK)
    if len(marks) != len(cells) or (len(values) and (values.min() < _MARK or values.max() > _EXACT_INT)):
        return None  # a negative or huge number in a cell
    counts = np.diff(marks, prepend=-1) - 1
    return np.delete(values, marks), counts.astype(np.int64), True


def linear_percentile(values: np.ndarray, counts: np.ndarray, percent: float) -> float:
    """``numpy.percentile(raw, percent)`` (linear interpolation) of the raw values a histogram counts.

    Parameters
    ----------
    values : numpy.ndarray
        Distinct values, increasing.
    counts : numpy.ndarray
        How many times each occurs (> 0).
    percent : float
        0-100.

    Returns
    -------
    float
        NaN for an empty histogram. The two neighbouring order statistics are found in the
        cumulative counts and interpolated by numpy itself (``numpy.quantile`` of the pair at
        numpy's own fraction ``(n - 1) * percent / 100 - floor(...)``), so the figure is the one
        numpy gives on the raw values (``tests/unit/analysis/test_itlpool.py`` checks it).

    >>> linear_percentile(np.array([1.0, 2.0, 10.0]), np.array([2, 1, 1]), 50)
    1.5
    """
    n = int(counts.sum())
    if n == 0:
        return math.nan
    virtual = (n - 1) * (percent / 100)
    below = math.floor(virtual)
    if below >= n - 1:
        return float(values[-1])
    cumulative = np.cumsum(counts)
    low, high = np.searchsorted(cumulative, [below + 1, below + 2], side="left")
    return float(np.quantile(np.array([values[low], values[high]]), virtual - below))


_MERGE_EVERY = 32
"""Histogram pieces (one per block) held before they are merged into one."""

_BINS_US = 1 << 20
"""Whole-microsecond gaps below this (1.05 s) are counted in an array indexed by the gap; longer
ones are kept as values."""


def _merge(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """One histogram (distinct values, summed weights; in no particular order) from several."""
    if not parts:
        return np.zeros(0), np.zeros(0)
    values = np.concatenate([v for v, _ in parts])
    weights = np.concatenate([w for _, w in parts])
    codes, distinct = pd.factorize(values, use_na_sentinel=False)  # a hash table: no sort of every value
    return np.asarray(distinct, dtype=float), np.bincount(codes, weights=weights, minlength=len(distinct))


class _Histogram:
    """Values with weights: whole-microsecond gaps (value ``k / 1000`` ms, ``0 <= k <`` :data:`_BINS_US`)
    counted in an array by ``k``, any other value kept in (value, weight) pieces."""

    def __init__(self) -> None:
        self.bins = np.zeros(0, dtype=np.int64)
        self.pieces: list[tuple[np.ndarray, np.ndarray]] = []

    def add_whole_us(self, gaps_us: np.ndarray) -> None:
        """Add gaps given in whole microseconds (int64, or float64 holding integers), weight 1 each."""
        if not len(gaps_us):
            return
        keys = np.asarray(gaps_us, dtype=np.int64)  # exact: whole numbers
        if keys.min() < 0 or keys.max() >= _BINS_US:  # rare: count the others, keep these as values
            inside = (keys >= 0) & (keys < _BINS_US)
            outside = gaps_us[~inside] / 1000.0
            self.add(outside, np.ones(len(outside)))
            keys = keys[inside]
        if not len(keys):
            return
        low = int(keys.min())
        self.add_counts(np.bincount(keys - low), low)  # over the block's own range: a small block stays cheap

    def add_counts(self, counted: np.ndarray, low: int = 0) -> None:
        """Add ``counted[i]`` gaps of ``low + i`` whole microseconds (``0 <= low``, ``low +
        len(counted) <=`` :data:`_BINS_US`)."""
        high = low + len(counted)
        if high > len(self.bins):
            grown = max(high, min(2 * len(self.bins), _BINS_US))
            self.bins = np.concatenate([self.bins, np.zeros(grown - len(self.bins), np.int64)])
        self.bins[low:high] += counted

    def add(self, values: np.ndarray, weights: np.ndarray) -> None:
        if len(values):
            self.pieces.append(_merge([(values, weights)]))
        if len(self.pieces) >= _MERGE_EVERY:
            self.pieces = [_merge(self.pieces)]

    def sorted(self) -> tuple[np.ndarray, np.ndarray]:
        """(distinct values increasing, their total weights)."""
        keys = np.flatnonzero(self.bins)
        values, weights = _merge([(keys / 1000.0, self.bins[keys].astype(float)), *self.pieces])
        order = np.argsort(values, kind="stable")
        return values[order], weights[order]


class PooledItl:
    """Accumulates the pooled per-token ITL and inter-chunk gaps of blocks of requests.

    Feed blocks with :meth:`add` (any number, any size), then read :meth:`summary`.
    """

    def __init__(self) -> None:
        self._itl = _Histogram()
        self._gaps = _Histogram()
        self._weighted_sum_ms = 0.0

    def add(self, requests: pd.DataFrame) -> None:
        """Add the successful requests of a block (columns :data:`ITL_COLUMNS`; a block without
        ``token_times_us`` adds nothing, one without ``event_tokens`` counts tokens as unknown)."""
        if "token_times_us" not in requests.columns:
            return
        ok = requests[requests["error_kind"].astype(str) == ""]
        events = ok["event_tokens"] if "event_tokens" in ok.columns else pd.Series([""] * len(ok), dtype=object)
        self.add_columns(
            ok["ttft_ms"].to_numpy(dtype=float),
            ok["e2e_ms"].to_numpy(dtype=float),
            ok["output_tokens"].to_numpy(dtype=float),
            ok["token_times_us"],
            events,
        )

    def add_columns(
        self,
        ttft_ms: np.ndarray,
        e2e_ms: np.ndarray,
        output_tokens: np.ndarray,
        token_times_us: Sequence[str | None] | pd.Series,
        event_tokens: Sequence[str | None] | pd.Series,
    ) -> None:
        """Add successful requests given column by column (the master's rows as they arrive).

        Parameters
        ----------
        ttft_ms, e2e_ms, output_tokens : numpy.ndarray
            float64, shape (n,): ms from the send, and ``N`` (NaN where unknown).
        token_times_us, event_tokens : sequence of str, length n
            As in ``requests.csv`` (space-separated whole microseconds / token counts; "" or
            None for none).

        Raises
        ------
        ValueError
            For a cell that is no number (:func:`llm_locust.analysis.perrequest.itl.request_itl`); nothing of the
            block is added then.
        """
        times = split_numbers(token_times_us)
        counts = split_numbers(event_tokens) if times is not None else None
        if times is None or counts is None:
            self._add_rows(zip(ttft_ms, e2e_ms, output_tokens, token_times_us, event_tokens))
            return
        self._add_bulk(ttft_ms, e2e_ms, output_tokens, times, counts[:2])

    def _add_rows(self, rows: Iterable[tuple]) -> None:
        """Row by row through :func:`request_itl` (blocks the bulk parser refuses); every row is
        computed before anything is added, so a refused cell leaves the pool as it was."""
        itl, gaps = [], []
        for row in rows:
            itl.append(request_itl(*row))
            gaps.append(chunk_gaps_ms(row[3]))
        for (values, weights), row_gaps in zip(itl, gaps):
            self._weighted_sum_ms += float((values * weights).sum())
            self._itl.add(values, weights)
            self._gaps.add(row_gaps, np.ones(len(row_gaps)))

    def _add_bulk(self, ttft, e2e, tokens, times: tuple, counts: tuple) -> None:
        """:func:`request_itl` and :func:`chunk_gaps_ms` of every row at once: the plain rows
        (:meth:`_add_plain`) and the others (:meth:`_add_general`)."""
        times_us, m, whole = times
        given, k = counts
        # plain: 2+ events of one token each (as stated, or N = events), finished
        plain = (m >= 2) & (tokens == m) & ~np.isnan(e2e)
        if k.any():
            not_one = np.bincount(np.repeat(np.arange(len(k)), k), weights=given != 1, minlength=len(k))
            plain &= (k == 0) | ((k == m) & (not_one == 0))
        if plain.all():
            self._add_plain(times_us, m, e2e, whole)
            return
        if plain.any():
            events = np.repeat(plain, m)
            self._add_plain(times_us[events], m[plain], e2e[plain], whole)
            rest = ~plain
            times = (times_us[~events], m[rest], whole)
            counts = (given[~np.repeat(plain, k)], k[rest])
            ttft, e2e, tokens = ttft[rest], e2e[rest], tokens[rest]
        self._add_general(ttft, e2e, tokens, times, counts)

    def _add_plain(self, times_us: np.ndarray, m: np.ndarray, e2e: np.ndarray, whole: bool) -> None:
        """Rows of ``m >= 2`` events of one token each, finished: every gap is a chunk gap, every
        gap but the last an ITL value of weight 1, the last event's value is from the previous
        event to the stream's end (``max(e2e, last event)``), weight 1 - as :func:`request_itl`
        computes them, with the same floats (a few passes over the times, no per-event weights)."""
        ends = np.cumsum(m)
        between = ends[:-1] - 1  # in the differences: from one row's last event to the next row's first
        gaps_us = np.diff(times_us)
        if whole:
            gaps_us[between] = 0  # counted as zeros below, then taken out
            last = gaps_us[ends - 2]  # each row's last gap: a chunk gap, not an ITL value
            if len(gaps_us) and gaps_us.min() >= 0 and gaps_us.max() < _BINS_US:  # one count for both
                counted = np.bincount(gaps_us)
                counted[0] -= len(between)
                self._gaps.add_counts(counted)
                self._itl.add_counts(counted - np.bincount(last, minlength=len(counted)))
                self._weighted_sum_ms += float((gaps_us.sum() - last.sum()) / 1000.0)
            else:  # a gap below 0 or above a second: each histogram on its own
                gaps_us = np.delete(gaps_us, between)
                simple = np.delete(gaps_us, ends - np.arange(1, len(m) + 1) - 1)
                self._gaps.add_whole_us(gaps_us)
                self._itl.add_whole_us(simple)
                self._weighted_sum_ms += float(simple.sum() / 1000.0)
        else:
            gaps_us = np.delete(gaps_us, between)  # within rows: row r's m - 1 gaps
            simple = np.delete(gaps_us, ends - np.arange(1, len(m) + 1) - 1)  # all but each row's last
            self._gaps.add(gaps_us / 1000.0, np.ones(len(gaps_us)))
            self._itl.add(simple / 1000.0, np.ones(len(simple)))
            self._weighted_sum_ms += float(simple.sum() / 1000.0)
        last_us = times_us[ends - 1].astype(np.float64)
        previous_us = times_us[ends - 2].astype(np.float64)
        values = (np.maximum(e2e * 1000.0, last_us) - previous_us) / 1000.0 / 1.0
        self._weighted_sum_ms += float(values.sum())
        self._itl.add(values, np.ones(len(values)))

    def _add_general(self, ttft, e2e, tokens, times: tuple, counts: tuple) -> None:
        """Any rows: each event's tokens and ITL value at once: the same operations on the
        same floats as :func:`request_itl`, so the same values."""
        times_us, m, whole = times
        times_us = times_us.astype(np.float64)
        given, k = counts
        starts = np.cumsum(m) - m
        first = np.zeros(len(times_us), bool)
        first[starts[m > 0]] = True
        last = np.zeros(len(times_us), bool)
        last[(starts + m - 1)[m > 0]] = True
        row = np.repeat(np.arange(len(m)), m)
        gaps_us = np.diff(times_us, prepend=0.0)  # within a row except at its first event
        inner = ~first
        if whole:
            self._gaps.add_whole_us(gaps_us[inner])
        else:
            self._gaps.add(gaps_us[inner] / 1000.0, np.ones(int(inner.sum())))
        c = tokens_per_event(tokens, m, given, k)
        valid = np.repeat((m > 0) & (tokens >= 2) & ~np.isnan(e2e), m)
        # the common event, neither first nor last and one token: its gap itself, weight 1
        simple = valid & inner & ~last & (c == 1.0)
        if whole:
            self._itl.add_whole_us(gaps_us[simple])
        else:
            self._itl.add(gaps_us[simple] / 1000.0, np.ones(int(simple.sum())))
        self._weighted_sum_ms += float(gaps_us[simple].sum() / 1000.0)
        # every other event: its value and weight, as request_itl computes them
        other = valid & ~simple
        end_us = times_us[other]
        at_last = last[other]
        end_us[at_last] = np.maximum(e2e[row[other][at_last]] * 1000.0, end_us[at_last])
        previous_us = np.concatenate([[0.0], times_us[:-1]])[other]
        c_other, first_other = c[other], first[other]
        single = first_other & at_last
        with np.errstate(divide="ignore", invalid="ignore"):  # rows left out below
            values = np.where(first_other, 0.0, (end_us - previous_us) / 1000.0 / np.where(c_other > 0, c_other, 1.0))
            values[single] = (end_us[single] - ttft[row[other][single]] * 1000.0) / 1000.0 / (c_other[single] - 1.0)
        weights = np.where(first_other & ~single, np.maximum(c_other - 1.0, 0.0), c_other)
        weights[single] = c_other[single] - 1.0
        keep = weights > 0
        self._weighted_sum_ms += float((values[keep] * weights[keep]).sum())
        self._itl.add(values[keep], weights[keep])

    def summary(self) -> dict[str, float]:
        """Pooled figures, as :func:`itl_summary` returns them.

        Returns
        -------
        dict
            ``itl_mean_ms`` (token-weighted), ``itl_p50_ms``, ``itl_p95_ms``, ``itl_p99_ms``
            (:func:`llm_locust.analysis.perrequest.itl.weighted_quantile`), ``chunk_gap_p50_ms``, ``chunk_gap_p99_ms``
            (linear interpolation), ``chunk_gap_max_ms``; NaN when nothing applies.
        """
        values, weights = self._itl.sorted()
        gaps, gap_counts = self._gaps.sorted()
        total = float(weights.sum()) if len(weights) else 0.0
        return {
            "itl_mean_ms": self._weighted_sum_ms / total if total > 0 else math.nan,
            "itl_p50_ms": weighted_quantile(values, weights, 0.50),
            "itl_p95_ms": weighted_quantile(values, weights, 0.95),
            "itl_p99_ms": weighted_quantile(values, weights, 0.99),
            "chunk_gap_p50_ms": linear_percentile(gaps, gap_counts, 50),
            "chunk_gap_p99_ms": linear_percentile(gaps, gap_counts, 99),
            "chunk_gap_max_ms": float(gaps[-1]) if len(gaps) else math.nan,
        }


def itl_from_csv(path: Path) -> dict[str, float]:
    """:meth:`PooledItl.summary` of a ``requests.csv``, read a block at a time.

    Reads only :data:`ITL_COLUMNS` (:func:`llm_locust.analysis.rundir.csvread.iter_typed`), up to the last
    complete row, so memory stays at one block of rows and the histograms however long the file.

    Parameters
    ----------
    path : Path
        A ``requests.csv`` (columns :data:`llm_locust.analysis.schema.REQUEST_SCHEMA`).

    Returns
    -------
    dict
        As :func:`itl_summary`.

    Raises
    ------
    llm_locust.analysis.rundir.reader.RunDirError
        For a file the loader refuses (a cell that is no number, an unknown ``error_kind``, ...):
        a file the typed reader cannot read is loaded whole by :func:`llm_locust.analysis.rundir.reader.read_requests`.
    """
    length, _ = complete_length(path)
    blocks = iter_typed(path, REQUEST_SCHEMA, ITL_COLUMNS, length)
    pool = PooledItl()
    try:
        if blocks is None:
            raise ValueError("header needs the string reader")
        for frame in blocks:
            kinds = frame["error_kind"].str.strip()
            if not set(kinds.unique()) <= ERROR_KINDS | {""}:
                raise ValueError("unknown error_kind")
            pool.add(frame.assign(error_kind=kinds))
    except (pa.ArrowException, ValueError):
        from llm_locust.analysis.rundir.reader import read_requests

        return itl_summary(read_requests(path))
    return pool.summary()


def itl_summary(requests: pd.DataFrame) -> dict[str, float]:
    """Pooled per-token ITL and inter-chunk latency of the successful requests.

    Parameters
    ----------
    requests : pandas.DataFrame
        ``requests.csv`` rows; rows without ``token_times_us`` (older run directories) are skipped.

    Returns
    -------
    dict
        ``itl_mean_ms`` (token-weighted), ``itl_p50_ms``, ``itl_p95_ms``, ``itl_p99_ms``
        (:func:`weighted_quantile`), ``chunk_gap_p50_ms``, ``chunk_gap_p99_ms`` (linear
        interpolation), ``chunk_gap_max_ms``; NaN when nothing applies. Computed in blocks of
        rows by :class:`PooledItl` (the values of :func:`request_itl` and
        :func:`chunk_gaps_ms`, in bulk).
    """
    pool = PooledItl()
    for start in range(0, len(requests), _BLOCK_ROWS):
        pool.add(requests.iloc[start : start + _BLOCK_ROWS])
    return pool.summary()


_BLOCK_ROWS = 20_000
"""Rows :func:`itl_summary` hands :class:`PooledItl` at a time."""
