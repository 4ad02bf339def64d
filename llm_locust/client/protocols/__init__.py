"""Protocol adapters: build a request body and turn one response payload into a :class:`StreamEvent`.

Adapters sit in the explicit map :data:`ADAPTERS` (one module each); :func:`get_adapter` raises
``ValueError`` listing the known names for an unknown one.
"""

from __future__ import annotations

from llm_locust.client.protocols.base import Adapter, StreamEvent, Workload
from llm_locust.client.protocols.generic import GenericAdapter
from llm_locust.client.protocols.genericformat import GenericFormat
from llm_locust.client.protocols.openai_chat import OpenAIChatAdapter
from llm_locust.client.protocols.openai_completions import OpenAICompletionsAdapter
from llm_locust.client.protocols.tgi import TGIAdapter

ADAPTERS: dict[str, type] = {
    OpenAIChatAdapter.name: OpenAIChatAdapter,
    OpenAICompletionsAdapter.name: OpenAICompletionsAdapter,
    TGIAdapter.name: TGIAdapter,
    GenericAdapter.name: GenericAdapter,
}

NON_STREAMING: frozenset[str] = frozenset({OpenAIChatAdapter.name, OpenAICompletionsAdapter.name, TGIAdapter.name})
"""Protocols that take ``stream=False`` (``--no-stream``); ``generic`` takes its framing from its
format file."""


def get_adapter(name: str, *, stream: bool = True, fmt: GenericFormat | None = None) -> Adapter:
    """Return a new adapter for protocol ``name``.

    Parameters
    ----------
    name : str
        A key of :data:`ADAPTERS`.
    stream : bool, default True
        False asks for one JSON body (:data:`NON_STREAMING`).
    fmt : GenericFormat, optional
        The ``--protocol-format`` file, required by ``generic`` and refused by the others.

    Raises
    ------
    ValueError
        ``name`` is not in :data:`ADAPTERS` (the message lists the known names), ``stream`` is
        False for ``generic`` (its format file says), or ``fmt`` is missing for ``generic`` /
        given to another.
    """
    if name not in ADAPTERS:
        raise ValueError(f"unknown protocol {name!r}; known: {', '.join(sorted(ADAPTERS))}")
    if name == GenericAdapter.name:
        if fmt is None:
            raise ValueError("--protocol generic needs --protocol-format FILE")
        if not stream:
            raise ValueError('--no-stream with --protocol generic: set framing = "json" in the format file')
        return GenericAdapter(fmt=fmt)
    if fmt is not None:
        raise ValueError(f"--protocol-format is for --protocol generic, not {name}")
    return ADAPTERS[name](stream=stream)


__all__ = ["ADAPTERS", "NON_STREAMING", "Adapter", "StreamEvent", "Workload", "get_adapter"]
