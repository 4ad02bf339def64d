"""Protocol adapters: build a request body and turn one SSE event into a :class:`StreamEvent`.

Adapters sit in the explicit map :data:`ADAPTERS`; :func:`get_adapter` raises ``ValueError``
listing the known names for an unknown one.
"""

from __future__ import annotations

from llm_locust.protocols.base import Adapter, StreamEvent, Workload
from llm_locust.protocols.openai_chat import OpenAIChatAdapter

ADAPTERS: dict[str, type[Adapter]] = {
    OpenAIChatAdapter.name: OpenAIChatAdapter,
}


def get_adapter(name: str) -> Adapter:
    """Return a new adapter for protocol ``name``.

    Raises
    ------
    ValueError
        ``name`` is not in :data:`ADAPTERS`; the message lists the known names.
    """
    try:
        return ADAPTERS[name]()
    except KeyError:
        raise ValueError(f"unknown protocol {name!r}; known: {', '.join(sorted(ADAPTERS))}") from None


__all__ = ["ADAPTERS", "Adapter", "StreamEvent", "Workload", "get_adapter"]
