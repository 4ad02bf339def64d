"""Protocol adapters: build a request body and turn one SSE payload into a :class:`StreamEvent`.

Adapters sit in the explicit map :data:`ADAPTERS` (one module each); :func:`get_adapter` raises
``ValueError`` listing the known names for an unknown one.
"""

from __future__ import annotations

from llm_locust.protocols.base import Adapter, StreamEvent, Workload, parse_payload
from llm_locust.protocols.openai_chat import OpenAIChatAdapter
from llm_locust.protocols.openai_completions import OpenAICompletionsAdapter
from llm_locust.protocols.tgi import TGIAdapter

ADAPTERS: dict[str, type[Adapter]] = {
    OpenAIChatAdapter.name: OpenAIChatAdapter,
    OpenAICompletionsAdapter.name: OpenAICompletionsAdapter,
    TGIAdapter.name: TGIAdapter,
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


__all__ = ["ADAPTERS", "Adapter", "StreamEvent", "Workload", "get_adapter", "parse_payload"]
