"""Prompts of an exact token length: a word vocabulary calibrated against a counter, and lengths.

Why our own: the length must be exact as the *served* model counts it (chat template included),
with no tokenizer at all when the server can count; no library builds prompts that way.

How a prompt is built: ``LEAD`` then words separated by single spaces, each word drawn from a
vocabulary of words that are one token each *after a space*. Tokenizers split text at spaces
before merging (GPT-2 byte-level BPE, SentencePiece, WordPiece), so such a prompt counts
``base + n`` tokens, where ``base`` is the count of ``LEAD`` alone (template included) and ``n``
the number of words. :func:`calibrate` finds the vocabulary and ``base`` with a counter
(:mod:`llm_locust.client.workload.counting`) and checks the sum on whole prompts; a counter for which it
does not hold is refused (:class:`CalibrationError`), never used for wrong lengths.

Distinct prompts: the words come from a seeded ``random.Random`` per process (seed, worker
index), so no two requests share more than chance; with ``shared_prefix_tokens = K`` the first
``K`` words after ``LEAD`` are one fixed sequence (seeded by the seed alone, the same in every
process), so every prompt starts with the same ``base + K`` tokens (a prefix cache's workload).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from llm_locust.client.workload.counting import Counter

LEAD = "Words:"
"""Fixed start of every built prompt (its tokens are part of ``base``)."""

CANDIDATE_WORDS: tuple[str, ...] = tuple(
    "the of and to in is it that was for on are with as his they be at one have this from or had by "
    "but what some we can out other were all there when up use your how said an each she which do "
    "their time if will way about many then them would like so these her long make thing see him two "
    "has look more day could go come did number sound no most people my over know water than call "
    "first who may down side been now find any new work part take get place made live where after "
    "back little only round man year came show every good me give our under name very through just "
    "form great think say help low line differ turn cause much mean before move right boy old too same "
    "tell does set three want air well also play small end put home read hand port large spell add "
    "even land here must big high such follow act why ask men change went light kind off need house".split()
)
"""Candidate vocabulary, commonest English words first (one token each in most tokenizers)."""

VOCABULARY_SIZE = 16
"""Calibration stops once this many one-token words are found."""

CHUNK = 8
"""Words probed together; a chunk that does not add exactly ``CHUNK`` tokens is probed word by word."""


class CalibrationError(RuntimeError):
    """No exact prompt can be built with this counter (the message says why)."""


@dataclass(frozen=True)
class Calibration:
    """What building an exact prompt needs.

    Attributes
    ----------
    base_tokens : int
        Prompt tokens of ``LEAD`` alone (chat template included), tokens.
    words : tuple of str
        One-token words (after a space).
    method : str
        ``"tokenizer"``, ``"tokenizer+server"`` or ``"server"``: what counted.
    """

    base_tokens: int
    words: tuple[str, ...]
    method: str

    def content(self, words: list[str]) -> str:
        """The prompt text of ``words`` (``LEAD`` first)."""
        return " ".join([LEAD, *words])

    def to_json(self) -> str:
        """This calibration as ``--input-calibration`` text (:meth:`from_json` reads it)."""
        return json.dumps({"base_tokens": self.base_tokens, "words": list(self.words), "method": self.method})

    @classmethod
    def from_json(cls, text: str) -> Calibration:
        """Read :meth:`to_json`'s text.

        Raises
        ------
        ValueError
            Not such a JSON object.
        """
        try:
            value = json.loads(text)
            calibration = cls(int(value["base_tokens"]), tuple(str(w) for w in value["words"]), str(value["method"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"--input-calibration is not a calibration: {exc}") from None
        if len(calibration.words) < 2:
            raise ValueError("--input-calibration needs at least 2 words")
        return calibration


def calibrate(count: Counter, *, method: str, check_lengths: tuple[int, ...] = (7, 64)) -> Calibration:
    """Find the one-token vocabulary and the base length with ``count``.

    Parameters
    ----------
    count : callable
        ``count(content) -> prompt tokens`` (:mod:`llm_locust.client.workload.counting`).
    method : str
        Recorded in the result.
    check_lengths : tuple of int
        Word counts of the whole prompts checked at the end (each must count ``base + n``).

    Raises
    ------
    CalibrationError
        Fewer than 2 one-token words among :data:`CANDIDATE_WORDS`, or a whole prompt that does
        not count ``base + n`` (the tokenizer merges across spaces).
    """
    base = count(LEAD)
    words: list[str] = []
    for start in range(0, len(CANDIDATE_WORDS), CHUNK):
        chunk = list(CANDIDATE_WORDS[start : start + CHUNK])
        if count(" ".join([LEAD, *chunk])) - base == len(chunk):
            words += chunk
        else:
            words += [word for word in chunk if count(f"{LEAD} {word}") - base == 1]
        if len(words) >= VOCABULARY_SIZE:
            break
    if len(words) < 2:
        raise CalibrationError(f"only {len(words)} of {len(CANDIDATE_WORDS)} common words are one token each")
    calibration = Calibration(base_tokens=base, words=tuple(words[:VOCABULARY_SIZE]), method=method)
    rng = random.Random("calibration")
    for n in check_lengths:
        counted = count(calibration.content([rng.choice(calibration.words) for _ in range(n)]))
        if counted != base + n:
            raise CalibrationError(
                f"a prompt of {n} one-token words after a {base}-token start counted {counted} tokens, "
                f"not {base + n}: this tokenizer merges across spaces; use --dataset instead"
            )
    return calibration


def sample_lengths(rng: random.Random, mean_tokens: int, stddev_tokens: float, minimum: int) -> int:
    """One prompt length: ``round(normal(mean, stddev))``, clipped below at ``max(1, minimum)``.

    >>> sample_lengths(random.Random(0), 256, 0.0, 9)
    256
    >>> sample_lengths(random.Random(0), 5, 0.0, 9)
    9
    """
    value = mean_tokens if stddev_tokens <= 0 else round(rng.gauss(mean_tokens, stddev_tokens))
    return max(1, minimum, int(value))


class SyntheticPrompts:
    """Prompts of exact (or normally distributed) token lengths; :meth:`next_request` per request.

    Parameters
    ----------
    calibration : Calibration
    input_tokens : int
        Mean prompt length as the server counts it, tokens.
    stddev_tokens : float, default 0
        Standard deviation of the length, tokens (0: every prompt ``input_tokens`` long).
    shared_prefix_tokens : int, default 0
        Words after ``LEAD`` common to every prompt (module docstring).
    seed : int, default 0
    stream : str, default "0"
        Which process this is (worker index): its own random words and lengths.
    max_tokens : int, default 64
        Output tokens asked for by every request.

    Raises
    ------
    ValueError
        ``input_tokens`` shorter than the shortest buildable prompt (``base + K``).
    """

    def __init__(
        self, calibration: Calibration, *, input_tokens: int, stddev_tokens: float = 0.0,
        shared_prefix_tokens: int = 0, seed: int = 0, stream: str = "0", max_tokens: int = 64,
    ) -> None:  # fmt: skip
        self.calibration = calibration
        self.minimum_tokens = calibration.base_tokens + shared_prefix_tokens
        if input_tokens < self.minimum_tokens:
            raise ValueError(
                f"--input-tokens {input_tokens} is shorter than the shortest prompt this server can take: "
                f"{calibration.base_tokens} tokens of template and start"
                + (f" + {shared_prefix_tokens} shared prefix" if shared_prefix_tokens else "")
            )
        self.input_tokens = input_tokens
        self.stddev_tokens = stddev_tokens
        words = calibration.words
        prefix_rng = random.Random(f"{seed}:prefix")
        self.prefix = [prefix_rng.choice(words) for _ in range(shared_prefix_tokens)]
        self.rng = random.Random(f"{seed}:{stream}")
        self.max_tokens = max_tokens

    def build(self, total_tokens: int) -> str:
        """A prompt of ``total_tokens`` as the calibrated counter counts it (``>= minimum_tokens``)."""
        n = total_tokens - self.calibration.base_tokens - len(self.prefix)
        words = self.calibration.words
        choice = self.rng.choice
        return self.calibration.content(self.prefix + [choice(words) for _ in range(n)])

    def next_request(self):
        """The next :class:`~llm_locust.client.workload.source.WorkItem` (text prompt, target length)."""
        from llm_locust.client.workload.source import WorkItem

        total = sample_lengths(self.rng, self.input_tokens, self.stddev_tokens, self.minimum_tokens)
        return WorkItem(self.build(total), self.max_tokens, float(total))
