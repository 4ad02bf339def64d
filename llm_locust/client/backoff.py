"""The pause a user takes after the server turned a request away, so it is not hammered.

A closed-loop user whose server is down gets ``connection refused`` in well under a millisecond,
and one whose server is full gets ``429 Too Many Requests`` almost as fast; either would send its
next request at once: thousands of failed requests a second (56,000 in 40 s against
``llm-locust sim-server --max-queue 1``), a huge ``requests.csv``, and nothing learned. Instead
each user (each one on its own, so a few failures never slow a healthy user) waits after such a
failure before its next request:

- the failures that ask for a pause (:data:`BACKOFF_KINDS`) are the connection-level ones,
  ``connection_error`` (refused, reset, closed mid-stream) and ``connect_timeout``, and the
  rejections, ``http_429`` and ``http_5xx`` (503 and every other 5xx: the server is overloaded
  or failing);
- the n-th such failure in a row waits ``min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2**(n-1))``
  seconds times a random factor in ``[BACKOFF_JITTER_LOW, 1]`` (jitter, so users that failed
  together do not come back together): 0.05–0.1 s, 0.1–0.2 s, 0.2–0.4 s, 0.4–0.8 s,
  0.8–1.6 s, then 1–2 s for as long as it lasts;
- a rejection that carries ``Retry-After`` (RFC 9110 §10.2.3: whole seconds, or an HTTP date)
  waits what the server asked, at most :data:`RETRY_AFTER_MAX_S`, instead (no jitter: the server
  named the moment);
- the first request that is answered otherwise (a success, a timeout, a 4xx other than 429: the
  server is reachable and accepting again) ends the streak, and the next request goes out at once.

So a user turned away for good sends at most one request per second after its first five
(``1 / (BACKOFF_JITTER_LOW * BACKOFF_MAX_S)``), and the requests that fail are still recorded,
each with its kind, time and the pause it led to (``backoff_ms`` in ``requests.csv``). A pause is
no request: it is in no latency, no count of Locust's, and the analysis sets the users it holds
apart from the client's in-flight (:mod:`llm_locust.analysis.perrequest.faults`). Failing fast is kept: a refused
connection or a 429 is reported as soon as it comes; only the *next* request waits.
``--backoff false`` turns the pauses off (every user then sends its next request at once).

Why own code: the rule is a few lines, and the retry libraries (tenacity, backoff) retry one call,
while here each request is recorded and the pause sits between two of a user's requests.
"""

from __future__ import annotations

import math
import random
import time
from email.utils import parsedate_to_datetime

from llm_locust.client.record import ErrorKind

BACKOFF_FIRST_S = 0.1
"""Nominal pause after the first failure in a row, s."""
BACKOFF_MAX_S = 2.0
"""Longest nominal pause, s."""
BACKOFF_JITTER_LOW = 0.5
"""The pause is the nominal one times a uniform random factor in ``[BACKOFF_JITTER_LOW, 1]``."""
RETRY_AFTER_MAX_S = 10.0
"""Longest pause a ``Retry-After`` header can ask for, s (a longer one is cut to this)."""
CONNECTION_KINDS: frozenset[str] = frozenset({ErrorKind.CONNECTION_ERROR.value, ErrorKind.CONNECT_TIMEOUT.value})
"""``error_kind`` values of connection-level failures."""
REJECTION_KINDS: frozenset[str] = frozenset({ErrorKind.HTTP_429.value, ErrorKind.HTTP_5XX.value})
"""``error_kind`` values of requests the server answered with 429 or a 5xx status."""
BACKOFF_KINDS: frozenset[str] = CONNECTION_KINDS | REJECTION_KINDS
"""``error_kind`` values after which a user pauses."""


def nominal_pause_s(failures: int) -> float:
    """Nominal pause after ``failures`` failures in a row, s (0 for none).

    >>> [nominal_pause_s(n) for n in range(7)]
    [0.0, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0]
    """
    if failures <= 0:
        return 0.0
    return min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2.0 ** min(failures - 1, 30))


def retry_after_s(value: str | None, *, now_s: float | None = None) -> float:
    """Seconds a ``Retry-After`` header value asks to wait (RFC 9110 §10.2.3), NaN when absent or
    unreadable; never negative (a date in the past is 0).

    Parameters
    ----------
    value : str or None
        The header's value: ``delay-seconds`` (a whole number) or an ``HTTP-date``.
    now_s : float, optional
        The wall clock (Unix s) a date is measured from; ``time.time()`` by default.

    >>> retry_after_s("3"), retry_after_s(" 0 "), retry_after_s(""), retry_after_s("soon")
    (3.0, 0.0, nan, nan)
    >>> retry_after_s("Wed, 21 Oct 2015 07:28:05 GMT", now_s=1445412480.0)
    5.0
    """
    text = (value or "").strip()
    if not text:
        return math.nan
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return math.nan
    if when.tzinfo is None:  # an HTTP-date is always GMT
        return math.nan
    return max(0.0, when.timestamp() - (time.time() if now_s is None else now_s))


class Backoff:
    """One user's streak of failures that ask for a pause, and the pause it asks for.

    Parameters
    ----------
    rng : random.Random, optional
        Source of the jitter (by default a fresh one, seeded from the OS, made at the first
        jittered pause: a ``random.Random`` holds 2.5 KB of state, which a user that never
        backs off need not carry; found with tracemalloc, 1,000 users in one worker).
    enabled : bool, default True
        False (``--backoff false``): never pause.
    """

    __slots__ = ("failures", "enabled", "_rng")

    def __init__(self, rng: random.Random | None = None, *, enabled: bool = True) -> None:
        self.failures = 0
        self.enabled = enabled
        self._rng = rng

    def after(self, error_kind: str, retry_after: float = math.nan) -> float:
        """Account for a request that ended with ``error_kind`` ("" for a success); return the
        pause before this user's next request, s (0 unless its kind is in :data:`BACKOFF_KINDS`).

        Parameters
        ----------
        error_kind : str
            The request's ``error_kind``.
        retry_after : float, default NaN
            Seconds the server's ``Retry-After`` asked for (:func:`retry_after_s`); used for a
            rejection, cut to :data:`RETRY_AFTER_MAX_S`.
        """
        if error_kind not in BACKOFF_KINDS:
            self.failures = 0
            return 0.0
        self.failures += 1
        if not self.enabled:
            return 0.0
        if error_kind in REJECTION_KINDS and retry_after >= 0:
            return min(RETRY_AFTER_MAX_S, retry_after)
        rng = self._rng
        if rng is None:
            rng = self._rng = random.Random()
        return nominal_pause_s(self.failures) * rng.uniform(BACKOFF_JITTER_LOW, 1.0)
