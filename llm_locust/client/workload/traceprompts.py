"""The prompt of one trace row: its exact input length, its shared prefix as shared text.

Built as ``--input-tokens`` builds its prompts (:mod:`llm_locust.client.workload.synthetic`): the
calibrated start (``base_tokens`` of template and ``LEAD``), then one-token words, so the prompt
counts exactly the row's ``input_tokens`` as the server counts it. The words are, in order:

- for each of the row's prefix segments ``(key, tokens)``
  (:class:`~llm_locust.client.workload.trace.TraceRow`), the first ``tokens`` words of a
  sequence drawn from ``random.Random(f"{seed}:{key}")``: the same key gives the same words in
  every process and every row, so rows that share their first segments share that prompt text
  (and a prefix cache holds it);
- then words of this process's own generator (``seed``, worker index) up to the length.

The prefix is cut to the room the length leaves after ``base_tokens``. A row shorter than the
shortest buildable prompt (``base_tokens`` + 1) is sent at that length, and a row of 0 output
tokens asks for 1 (no server takes ``max_tokens`` 0); the record's ``prompt_tokens_target`` and
``max_tokens`` say what was sent, and :attr:`TracePrompts.adjusted` counts such rows.
"""

from __future__ import annotations

import random
from collections import OrderedDict

from llm_locust.client.workload.source import WorkItem
from llm_locust.client.workload.synthetic import Calibration
from llm_locust.client.workload.trace import TraceRow

PROBE_MAX_TOKENS = 16
"""Output tokens of :meth:`TracePrompts.next_request`."""
SEGMENT_CACHE = 4096
"""Segments' word lists kept (most recently used); a trace of many distinct blocks draws again."""


class TracePrompts:
    """The request of each trace row (:meth:`item_for`); one per process.

    Parameters
    ----------
    calibration : Calibration
    seed : int, default 0
    stream : str, default "0"
        This process's name among the load generators (the worker index): its own words after
        the shared prefix.

    Attributes
    ----------
    adjusted : int
        Rows sent longer than the trace says (below the shortest buildable prompt) or with
        ``max_tokens`` 1 for 0 output tokens.
    """

    def __init__(self, calibration: Calibration, *, seed: int = 0, stream: str = "0") -> None:
        self.calibration = calibration
        self.seed = seed
        self.rng = random.Random(f"{seed}:trace:{stream}")
        self.minimum_tokens = calibration.base_tokens + 1
        self.adjusted = 0
        self._segments: OrderedDict[str, list[str]] = OrderedDict()

    def segment_words(self, key: str, tokens: int) -> list[str]:
        """The first ``tokens`` words of segment ``key`` (the same in every process)."""
        words = self._segments.get(key)
        if words is None or len(words) < tokens:
            rng = random.Random(f"{self.seed}:{key}")
            words = [rng.choice(self.calibration.words) for _ in range(tokens)]
            self._segments[key] = words
            if len(self._segments) > SEGMENT_CACHE:
                self._segments.popitem(last=False)
        else:
            self._segments.move_to_end(key)
        return words[:tokens]

    def item_for(self, row: TraceRow) -> WorkItem:
        """The :class:`~llm_locust.client.workload.source.WorkItem` of ``row``: a text prompt of
        ``row.input_tokens`` (module docstring), ``max_tokens = row.output_tokens``."""
        total = max(row.input_tokens, self.minimum_tokens)
        max_tokens = max(row.output_tokens, 1)
        if total != row.input_tokens or max_tokens != row.output_tokens:
            self.adjusted += 1
        room = total - self.calibration.base_tokens
        words: list[str] = []
        for key, tokens in row.prefix:
            if len(words) >= room:
                break
            words += self.segment_words(key, min(tokens, room - len(words)))
        choice, vocabulary = self.rng.choice, self.calibration.words
        words += [choice(vocabulary) for _ in range(room - len(words))]
        return WorkItem(self.calibration.content(words), max_tokens, float(total))

    def next_request(self) -> WorkItem:
        """A request outside the trace (the first-request check before the run): the shortest
        buildable prompt, :data:`PROBE_MAX_TOKENS` output tokens. The replay itself sends
        :meth:`item_for` of each row."""
        return self.item_for(TraceRow(-1, 0, 0.0, self.minimum_tokens, PROBE_MAX_TOKENS))
