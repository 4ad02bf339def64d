"""How long a scraped sample is data: until the next scrape of its source, within a hold limit.

A ``/metrics`` sample describes the server at the instant it was scraped. It stands for the time
after it only while the scraper keeps seeing the server: it **holds until the next successful
scrape of the same source**, but

- never longer than the hold limit, :data:`HOLD_INTERVALS` x the run's scrape interval
  (``run.json`` ``scrape_interval_s``) - also with a single scrape in the whole run;
- never past a **failed** scrape of that source (``server_scrapes.csv``, written by the master's
  scraper: timeout, connection error, HTTP error, a body too large or not Prometheus text): the
  held value ends at the failed attempt's start.

Past either end there is no data (NaN), never the last value repeated, never zero. Written here
rather than taken from a library because the rule is the analysis' own: it decides what counts
as measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

HOLD_INTERVALS = 3.0
"""Hold limit in scrape intervals."""

DEFAULT_INTERVAL_S = 1.0
"""Scrape interval assumed when ``run.json`` names none and the samples cannot tell (the
``--scrape-interval-s`` default)."""


@dataclass(frozen=True, kw_only=True)
class ScrapeFreshness:
    """What bounds the hold of each source's samples.

    Attributes
    ----------
    interval_s : float or None
        The run's scrape interval, s; None when unknown (then each source's median gap between
        scrapes stands for it, and :data:`DEFAULT_INTERVAL_S` with fewer than two scrapes).
    failed_s : dict of str to numpy.ndarray
        Per source URL, the start instants (Unix s, sorted) of its failed scrapes.
    """

    interval_s: float | None = None
    failed_s: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def from_run(cls, meta: dict, scrapes: pd.DataFrame | None) -> ScrapeFreshness:
        """From ``run.json`` (``scrape_interval_s``) and ``server_scrapes.csv`` as loaded
        (``t_s`` float, ``source`` str, ``ok`` bool; empty or None when the run has none)."""
        interval = meta.get("scrape_interval_s")
        try:
            interval = float(interval) if interval is not None else None
        except (TypeError, ValueError):
            interval = None
        if interval is not None and not (np.isfinite(interval) and interval > 0):
            interval = None
        failed: dict[str, np.ndarray] = {}
        if scrapes is not None and len(scrapes):
            bad = scrapes[~scrapes["ok"].astype(bool)]
            for source, group in bad.groupby("source", sort=True):
                failed[str(source)] = np.sort(group["t_s"].to_numpy(float))
        return cls(interval_s=interval, failed_s=failed)

    def hold_s(self, times: np.ndarray) -> float:
        """Hold limit for a source scraped at ``times`` (Unix s), s.

        >>> ScrapeFreshness(interval_s=2.0).hold_s(np.array([0.0]))
        6.0
        >>> ScrapeFreshness().hold_s(np.array([0.0, 0.5, 1.0]))
        1.5
        >>> ScrapeFreshness().hold_s(np.array([0.0]))
        3.0
        """
        if self.interval_s is not None:
            return HOLD_INTERVALS * self.interval_s
        gaps = np.diff(np.unique(np.asarray(times, float)))
        gaps = gaps[np.isfinite(gaps) & (gaps > 0)]
        interval = float(np.median(gaps)) if len(gaps) else DEFAULT_INTERVAL_S
        return HOLD_INTERVALS * interval


def hold_ends(times: np.ndarray, failed: np.ndarray, hold_s: float) -> np.ndarray:
    """Instants where a source's held sample stops being data (no next scrape came in time).

    Parameters
    ----------
    times : numpy.ndarray
        The source's successful scrape instants, Unix s, sorted, distinct.
    failed : numpy.ndarray
        Its failed scrape instants, Unix s, sorted.
    hold_s : float
        Hold limit, s.

    Returns
    -------
    numpy.ndarray
        For each sample whose next successful scrape comes later than the first failed scrape
        after it or ``hold_s`` after it: that end (the earlier of the two). Sorted.

    Examples
    --------
    >>> hold_ends(np.array([0.0, 1.0, 10.0]), np.array([]), 3.0).tolist()
    [4.0, 13.0]
    >>> hold_ends(np.array([0.0, 1.0, 2.0]), np.array([1.5]), 3.0).tolist()
    [1.5, 5.0]
    """
    times = np.asarray(times, float)
    if not len(times):
        return times
    failed = np.asarray(failed, float)
    nxt = np.append(times[1:], np.inf)
    end = times + hold_s
    if len(failed):
        k = np.searchsorted(failed, times, side="right")
        first_failure = np.where(k < len(failed), failed[np.minimum(k, len(failed) - 1)], np.inf)
        end = np.minimum(end, first_failure)
    return end[end < nxt]


def end_stale(frame: pd.DataFrame, freshness: ScrapeFreshness | None, source: str) -> pd.DataFrame:
    """Copy of one source's per-scrape frame (indexed by scrape instant ``t_s``) with an all-NaN
    row at each of its :func:`hold_ends`, so that a forward fill never carries a stale value.

    >>> f = pd.DataFrame({"running": [2.0]}, index=pd.Index([100.0], name="t_s"))
    >>> end_stale(f, ScrapeFreshness(interval_s=1.0), "u")["running"].tolist()
    [2.0, nan]
    """
    freshness = freshness or ScrapeFreshness()
    times = frame.index.to_numpy(float)
    ends = hold_ends(times, freshness.failed_s.get(source, np.array([])), freshness.hold_s(times))
    if not len(ends):
        return frame
    blanks = pd.DataFrame(np.nan, index=pd.Index(ends, name=frame.index.name), columns=frame.columns)
    return pd.concat([frame, blanks]).sort_index(kind="stable")
