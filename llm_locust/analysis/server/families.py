"""Inference-server families: the engines whose logs and metrics this package reads."""

from __future__ import annotations

import enum


class ServerFamily(str, enum.Enum):
    """An inference-server family.

    ``GENERIC`` is any other server, read through a user format file (named-group regexes and a
    metric-name table, see :mod:`llm_locust.analysis.server.serverlog.user`).
    """

    VLLM = "vllm"
    SGLANG = "sglang"
    TGI = "tgi"
    LLAMACPP = "llamacpp"
    TRITON = "triton"
    GENERIC = "generic"


def parse_family(name: ServerFamily | str | None) -> ServerFamily | None:
    """``name`` as a :class:`ServerFamily` (None stays None).

    Raises
    ------
    ValueError
        If ``name`` is no family; the message lists the known ones.

    >>> parse_family("llamacpp").value
    'llamacpp'
    """
    if name is None or isinstance(name, ServerFamily):
        return name
    try:
        return ServerFamily(str(name).strip().lower())
    except ValueError:
        known = [f.value for f in ServerFamily]
        raise ValueError(f"unknown server family {name!r}; known: {known}") from None
