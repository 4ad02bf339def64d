"""The ``type=`` of every numeric command-line option: one definition for all parsers.

``llm-locust``'s own subcommands (:mod:`llm_locust.cli`), the options added to Locust's parser
(:mod:`llm_locust.options`) and the workload options (:mod:`llm_locust.client.workload.options`)
take their numbers through these. Each raises :class:`argparse.ArgumentTypeError` with the rule
and the value given, which argparse turns into ``error: argument --x: must be > 0, got -1`` (exit 2).
This module imports only :mod:`argparse` and :mod:`math`: ``llm-locust run`` parses its flags
before it imports anything heavy.
"""

from __future__ import annotations

import argparse
import math

MAX_INT = 2**31 - 1
"""Largest whole number a request field (``max_tokens``) or a count option may carry: what a
server's JSON parser (a signed 32-bit field in most engines) and Locust's messages (msgpack)
take; ``--max-tokens 99999999999999999999999`` used to crash the master's spawn message."""


def _whole_number(text: str, lowest: int) -> int:
    """``int(text)`` from ``lowest`` to :data:`MAX_INT`, else :class:`argparse.ArgumentTypeError`."""
    value = int(text)
    if value < lowest:
        raise argparse.ArgumentTypeError(f"must be >= {lowest}, got {value}")
    if value > MAX_INT:
        raise argparse.ArgumentTypeError(f"must be <= {MAX_INT}, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """A whole number from 0 to :data:`MAX_INT`.

    >>> non_negative_int("0")
    0
    """
    return _whole_number(text, 0)


def positive_int(text: str) -> int:
    """A whole number from 1 to :data:`MAX_INT`.

    >>> positive_int("8")
    8
    """
    return _whole_number(text, 1)


def non_negative_float(text: str) -> float:
    """A float from 0 up (``inf`` allowed; ``nan`` refused: it compares false with everything).

    >>> non_negative_float("0.5")
    0.5
    """
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def finite_non_negative_float(text: str) -> float:
    """A float from 0 up, not inf (a request body's sampling value: JSON has no nan or inf).

    >>> finite_non_negative_float("0.7")
    0.7
    """
    value = non_negative_float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def positive_float(text: str) -> float:
    """A float above 0 (``nan`` refused).

    >>> positive_float("2.5")
    2.5
    """
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value
