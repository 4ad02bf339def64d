"""Deterministic pseudo-text of the simulated model: token strings, early-stop lengths, ids.

Everything is a function of ``(seed, request_number)``: ``request_number`` counts the accepted
requests of one server process from 1 in arrival order, so a given seed and arrival order give
the same bytes. Each stream uses its own ``random.Random`` seeded with a string
(``"text-<seed>-<n>"``, ...), which Python hashes deterministically (independent of
``PYTHONHASHSEED``).
"""

from __future__ import annotations

import random

_SYLLABLES: tuple[str, ...] = (
    "lyr",
    "bel",
    "hou",
    "va",
    "bram",
    "ndt",
    "al",
    "je",
    "an",
    "tra",
    "quist",
    "run",
    "stait",
    "par",
    "lel",
    "jout",
    "truck",
    "mo",
    "ren",
    "ki",
    "sol",
    "dor",
    "ith",
    "ne",
    "vas",
    "ul",
)
_NEW_WORD_PROBABILITY = 0.4


class TokenTextGenerator:
    """The token strings of one request's output, one call per token.

    Every token is a non-empty syllable; a token that starts a new word (probability 0.4, never
    the first) carries a leading space, so the joined text reads as pseudo-words.

    Parameters
    ----------
    seed : int
        Server seed (``--seed``).
    request_number : int
        Position of the request in arrival order, from 1.

    Examples
    --------
    >>> a = TokenTextGenerator(seed=0, request_number=1)
    >>> b = TokenTextGenerator(seed=0, request_number=1)
    >>> [a.next_token() for _ in range(5)] == [b.next_token() for _ in range(5)]
    True
    """

    def __init__(self, *, seed: int, request_number: int) -> None:
        self._rng = random.Random(f"text-{seed}-{request_number}")
        self._count = 0

    def next_token(self) -> str:
        """The next token's text (never empty)."""
        syllable = self._rng.choice(_SYLLABLES)
        new_word = self._rng.random() < _NEW_WORD_PROBABILITY
        self._count += 1
        return f" {syllable}" if new_word and self._count > 1 else syllable


def stop_length(*, seed: int, request_number: int, max_tokens: int, ignore_eos: bool) -> int:
    """Output length of a request, tokens.

    Parameters
    ----------
    seed, request_number : int
        As in :class:`TokenTextGenerator`.
    max_tokens : int
        The request's output ceiling (>= 1).
    ignore_eos : bool
        True: the request runs to ``max_tokens``. False: the simulated model emits EOS after a
        length drawn uniformly from 1..max_tokens (finish ``stop`` unless it equals
        ``max_tokens``).

    Returns
    -------
    int
        A length in 1..max_tokens.

    >>> stop_length(seed=0, request_number=3, max_tokens=50, ignore_eos=True)
    50
    """
    if ignore_eos:
        return max_tokens
    return random.Random(f"stop-{seed}-{request_number}").randint(1, max_tokens)


def response_id(*, prefix: str, seed: int, request_number: int) -> str:
    """Response id in vLLM's shape, ``<prefix>-<16 hex digits>`` (e.g. ``chatcmpl-965688b1c3780c9e``)."""
    bits = random.Random(f"id-{seed}-{request_number}").getrandbits(64)
    return f"{prefix}-{bits:016x}"
