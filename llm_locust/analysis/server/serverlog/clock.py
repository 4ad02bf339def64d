"""Placing log lines in time: own stamps (with or without year and zone), arrival stamps,
stamps relative to the server start.

vLLM and recent SGLang print ``MM-DD HH:MM:SS`` in the server's local time, without a year;
TGI prints ISO 8601 in UTC; llama.cpp prints the time since the server started. The run's
capture stamps each line on arrival (master's clock, the requests' clock). :func:`resolve`
applies the :class:`~llm_locust.analysis.server.serverlog.base.TimeSource` policy; a line that cannot be placed
stays NaN and is reported by the caller.
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from typing import cast

import numpy as np
import pandas as pd

from llm_locust.analysis.server.serverlog.base import LogClock, LogText, TimeSource

_OFFSET_RE = re.compile(r"^(?:UTC|GMT)?([+-])(\d{1,2}):?(\d{2})?$")


def parse_tz(name: str) -> dt.tzinfo:
    """A time zone from ``"UTC"``, ``"local"``, ``"+05:30"`` / ``"-0800"`` / ``"UTC+2"`` or an
    IANA name.

    Raises
    ------
    ValueError
        If ``name`` is none of these.

    >>> parse_tz("+05:30").utcoffset(None)
    datetime.timedelta(seconds=19800)
    """
    text = (name or "UTC").strip()
    if text.upper() in ("UTC", "Z", "GMT"):
        return dt.UTC
    if text.lower() == "local":
        # astimezone() always returns an aware datetime; the stubs type every tzinfo as optional
        return cast(dt.tzinfo, dt.datetime.now().astimezone().tzinfo)
    match = _OFFSET_RE.match(text)
    if match:
        sign = -1 if match.group(1) == "-" else 1
        delta = dt.timedelta(hours=int(match.group(2)), minutes=int(match.group(3) or 0))
        return dt.timezone(sign * delta)
    try:
        return zoneinfo.ZoneInfo(text)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {name!r}: use UTC, local, +HH:MM or an IANA name such as Europe/Paris"
        ) from None


def tz_from_offset(offset_s: float) -> str:
    """``+HH:MM`` for a UTC offset in seconds (run.json ``utc_offset_s``).

    >>> tz_from_offset(-28800)
    '-08:00'
    """
    sign = "-" if offset_s < 0 else "+"
    minutes = int(round(abs(offset_s) / 60))
    return f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def _localize(naive: pd.Series, tz: dt.tzinfo) -> np.ndarray:
    """Unix s of naive local datetimes (NaT where the zone makes the instant invalid)."""
    if tz is dt.UTC:
        aware = naive.dt.tz_localize("UTC")
    else:
        aware = naive.dt.tz_localize(tz, ambiguous="NaT", nonexistent="NaT")
    return _unix(aware)


_EPOCH = pd.Timestamp("1970-01-01", tz="UTC")


def _unix(aware: pd.Series) -> np.ndarray:
    """Unix s of zone-aware datetimes (whatever their resolution); NaT -> NaN."""
    return (aware.dt.tz_convert("UTC") - _EPOCH).dt.total_seconds().to_numpy(float)


def place_without_year(stamps: list[str], clock: LogClock) -> np.ndarray:
    """Unix s of ``MM-DD HH:MM:SS[.ffffff]`` stamps in ``clock.tz``.

    The year is the one (reference year, the one before or after) that puts each stamp nearest
    ``clock.reference_s``, which handles a run across December -> January. NaN when there is no
    reference, or the date is impossible in every candidate year (Feb 29) or does not exist in
    the zone (a DST gap).
    """
    if not stamps or clock.reference_s is None:
        return np.full(len(stamps), np.nan)
    tz = parse_tz(clock.tz)
    ref_year = dt.datetime.fromtimestamp(clock.reference_s, tz).year
    series = pd.Series(stamps, dtype=str)
    best = np.full(len(stamps), np.nan)
    for year in (ref_year, ref_year - 1, ref_year + 1):
        naive = pd.to_datetime(f"{year}-" + series, format="ISO8601", errors="coerce")
        placed = _localize(naive, tz)
        better = np.isfinite(placed) & (
            ~np.isfinite(best) | (np.abs(placed - clock.reference_s) < np.abs(best - clock.reference_s))
        )
        best = np.where(better, placed, best)
    return best


def place_with_date(stamps: list[str], clock: LogClock) -> np.ndarray:
    """Unix s of full stamps (``YYYY-MM-DD HH:MM:SS``, ISO 8601 with or without zone).

    A stamp with a zone (``Z``, ``+02:00``) is exact; one without is read in ``clock.tz``.
    """
    if not stamps:
        return np.array([])
    series = pd.Series(stamps, dtype=str)
    zoned = series.str.contains(r"(?:Z|[+-]\d\d:?\d\d)$", regex=True)
    out = np.full(len(stamps), np.nan)
    if zoned.any():
        parsed = pd.to_datetime(series[zoned], format="ISO8601", errors="coerce", utc=True)
        out[zoned.to_numpy()] = _unix(parsed)
    if (~zoned).any():
        naive = pd.to_datetime(series[~zoned], format="ISO8601", errors="coerce")
        out[(~zoned).to_numpy()] = _localize(naive, parse_tz(clock.tz))
    return out


def anchor_relative(rel_s: np.ndarray, lines: np.ndarray, log: LogText) -> float | None:
    """Wall-clock instant of the server's time zero, from lines that carry both a relative stamp
    and an arrival stamp: ``min(arrival - relative)`` (a line arrives after it is written, so
    the smallest difference is the tightest). None without such lines."""
    arrival = log.arrival(lines)
    diff = arrival - np.asarray(rel_s, float)
    diff = diff[np.isfinite(diff)]
    return float(diff.min()) if len(diff) else None


OWN_AHEAD_TOLERANCE_S = 0.05
"""How far a line's own stamp may come after its arrival stamp (stamp rounding, the two clocks'
reads) before the server's clock counts as ahead of the capture's, s."""

OWN_BEHIND_LIMIT_S = 2.0
"""Smallest arrival - own over a log beyond which the server's clock counts as behind the
capture's, s: more than any capture delay of the lines that arrive quickest (the file follower
polls every 0.1 s; a command's pipe passes lines on as they come)."""


def own_clock_offset_s(own_s: np.ndarray, arrival_s: np.ndarray) -> float:
    """What to add to a log's own absolute stamps to put them on the run's clock (0.0 = nothing).

    A line arrives after it is written, so on one clock ``arrival - own`` is at least 0 for every
    line, and its minimum over the log is the capture's quickest delay: milliseconds. A minimum
    below ``-OWN_AHEAD_TOLERANCE_S`` (lines arriving before they were written) or above
    ``OWN_BEHIND_LIMIT_S`` means the server's clock is not the capture's: a server on another
    host with its clock off, or a clock stepped before the run. Then the own stamps are moved by
    that minimum, as llama.cpp's relative stamps are anchored (:func:`anchor_relative`); the
    quickest line lands on its arrival and the spacing of the own stamps is kept. A skew between
    0 and ``OWN_BEHIND_LIMIT_S`` cannot be told from a capture delay and is left; so is a clock
    stepped during the run (one offset for the whole log). Own code: the field's clock rule, no
    library has it.

    Parameters
    ----------
    own_s, arrival_s : numpy.ndarray
        Per line, Unix s (NaN where a line has no such stamp).

    Returns
    -------
    float
        Seconds to add to ``own_s``.
    """
    lag = np.asarray(arrival_s, float) - np.asarray(own_s, float)
    lag = lag[np.isfinite(lag)]
    if not len(lag):
        return 0.0
    quickest = float(lag.min())
    return quickest if quickest < -OWN_AHEAD_TOLERANCE_S or quickest > OWN_BEHIND_LIMIT_S else 0.0


def resolve(
    own_s: np.ndarray, lines: np.ndarray, log: LogText, clock: LogClock, *, prefer_own: bool = False
) -> tuple[np.ndarray, str]:
    """Place lines by the ``clock.time_source`` policy.

    Parameters
    ----------
    own_s : numpy.ndarray
        Each line's own stamp as Unix s (NaN when it has none or it could not be read).
    lines : numpy.ndarray
        0-based line numbers (for the arrival stamps).
    log : LogText
    clock : LogClock
    prefer_own : bool, default False
        In ``AUTO``, use the own stamp first (llama.cpp's relative stamps once anchored: they
        are microsecond-exact where arrival stamps carry the capture's polling delay), moved to
        the run's clock when the server's clock is off (:func:`own_clock_offset_s`).

    Returns
    -------
    (times, how) : tuple of numpy.ndarray and str
        Unix s per line (NaN = not placed) and a phrase for the report.
    """
    own = np.asarray(own_s, float)
    arrival = log.arrival(lines)
    policy = clock.time_source
    if policy is TimeSource.LINE:
        return own, "the lines' own stamps"
    if policy is TimeSource.ARRIVAL:
        return arrival, "arrival stamps taken during the run"
    offset_s = own_clock_offset_s(own, arrival) if prefer_own else 0.0
    own = own + offset_s
    first, second = (own, arrival) if prefer_own else (arrival, own)
    times = np.where(np.isfinite(first), first, second)
    used_arrival = np.isfinite(arrival) & ~(prefer_own & np.isfinite(own))
    own_text = "the lines' own stamps"
    if offset_s:
        own_text += f" moved {offset_s:+.3f} s to the capture's clock (the server's clock differs)"
    if used_arrival.all() and len(times):
        how = "arrival stamps taken during the run"
    elif not used_arrival.any():
        how = own_text
    else:
        how = f"arrival stamps ({int(used_arrival.sum())} lines) and {own_text} (the rest)"
    return times, how
