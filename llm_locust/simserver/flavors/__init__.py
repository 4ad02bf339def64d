"""Engine flavours of the embedded server (``--flavor``): whose log lines and metric names it
writes. One module per engine; :data:`FLAVORS` is the explicit name map."""

from __future__ import annotations

from llm_locust.simserver.flavors.base import Flavor
from llm_locust.simserver.flavors.generic import GenericFlavor
from llm_locust.simserver.flavors.llamacpp import LlamaCppFlavor
from llm_locust.simserver.flavors.sglang import SglangFlavor
from llm_locust.simserver.flavors.tgi import TgiFlavor
from llm_locust.simserver.flavors.vllm import VllmFlavor

FLAVORS: dict[str, type[Flavor]] = {
    f.name: f for f in (VllmFlavor, SglangFlavor, TgiFlavor, LlamaCppFlavor, GenericFlavor)
}
"""Flavour name -> class."""


def make_flavor(name: str, **kwargs) -> Flavor:
    """Instantiate the flavour ``name`` (keyword arguments of :class:`Flavor`).

    Raises
    ------
    ValueError
        If ``name`` is unknown; the message lists the known ones.
    """
    try:
        cls = FLAVORS[name]
    except KeyError:
        raise ValueError(f"unknown flavor {name!r}; known: {sorted(FLAVORS)}") from None
    return cls(**kwargs)


__all__ = ["FLAVORS", "Flavor", "make_flavor"]
