"""The server's own timings of one request, read from what it sends, as ``requests.csv`` columns.

Sources:

- llama.cpp ``llama-server`` (``tools/server/server-common.cpp`` ``server_slot_stats::to_json``,
  build b1-0c1e570; ``shared/fixtures/llama-cpp-b1-0c1e570/sse_chat_stream.txt``): a
  ``timings`` object on the final chunk (the usage chunk of a chat stream, the body of a
  non-streamed answer): ``prompt_n`` (prompt tokens processed, the cached ones not counted),
  ``prompt_ms`` (slot start -> prompt processed: the prefill; the wait for a free slot is *not*
  in it), ``predicted_n`` (tokens generated, the first one included), ``predicted_ms`` (prompt
  processed -> last token: the decode), ``predicted_per_second`` (``(predicted_n - 1) /
  predicted_ms``).
- A ``--protocol-format`` file's ``[response.timings]`` paths (:mod:`.genericformat`).

:data:`TIMING_COLUMNS` are the record fields they fill (NaN when the server did not say).
"""

from __future__ import annotations

import math
from typing import Any

TIMING_COLUMNS: tuple[str, ...] = (
    "server_queue_ms",
    "server_prompt_ms",
    "server_prompt_tokens",
    "server_decode_ms",
    "server_decode_tokens",
)
"""Record fields of the server's timings: queue wait, prefill time and tokens, decode time and
tokens (ms, tokens)."""

LLAMACPP_KEYS: dict[str, str] = {
    "prompt_ms": "server_prompt_ms",
    "prompt_n": "server_prompt_tokens",
    "predicted_ms": "server_decode_ms",
    "predicted_n": "server_decode_tokens",
}
"""llama.cpp ``timings`` key -> record field."""


def number(value: Any) -> float:
    """A finite, non-negative JSON number as float, else NaN (a bool is no number).

    >>> number(12.5), number(-1), number("3"), number(True)
    (12.5, nan, nan, nan)
    """
    if value.__class__ in (int, float) and math.isfinite(value) and value >= 0:
        return float(value)
    return math.nan


def llamacpp_timings(timings: Any) -> dict[str, float] | None:
    """The record fields of a llama.cpp ``timings`` object; None when it is not an object or
    holds none of the keys. A value that is not a non-negative number is left out (NaN), never
    guessed.

    >>> llamacpp_timings({"prompt_n": 15, "prompt_ms": 98.154, "predicted_n": 12, "predicted_ms": 223.335})
    {'server_prompt_ms': 98.154, 'server_prompt_tokens': 15.0, 'server_decode_ms': 223.335, 'server_decode_tokens': 12.0}
    """
    if timings.__class__ is not dict:
        return None
    found = {field: number(timings[key]) for key, field in LLAMACPP_KEYS.items() if key in timings}
    return found or None
