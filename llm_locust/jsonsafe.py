"""JSON without NaN: the one conversion of "not measured" floats to ``null``.

Python's :func:`json.dumps` writes NaN and infinities as the bare words ``NaN`` / ``Infinity``,
which are not JSON (browsers' ``JSON.parse`` refuses them). Every JSON the master writes or
serves (``client_report.json``, the web UI's LLM tab) goes through :func:`json_safe` first.
"""

from __future__ import annotations

import math
from typing import Any


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, ±inf) replaced by None, in nested dicts,
    lists and tuples too (tuples become lists); other values are returned unchanged.

    >>> json_safe({"a": float("nan"), "b": [1.5, float("inf")], "c": (2, "x")})
    {'a': None, 'b': [1.5, None], 'c': [2, 'x']}
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
