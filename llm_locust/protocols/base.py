"""The adapter interface shared by every protocol, and the typed event it produces."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol


@dataclass(slots=True, frozen=True, kw_only=True)
class Workload:
    """What every request of a run asks for (the run's workload fingerprint, minus the prompts).

    Attributes
    ----------
    model : str
        Model name sent in the body.
    max_tokens : int
        Output token limit per request.
    ignore_eos : bool
        Ask the server to generate exactly ``max_tokens`` (vLLM's ``ignore_eos`` extension).
    temperature : float
        Sampling temperature (0 = greedy, the default for reproducible load).
    include_usage : bool
        Ask for a final usage chunk (``stream_options.include_usage``).
    """

    model: str
    max_tokens: int = 64
    ignore_eos: bool = True
    temperature: float = 0.0
    include_usage: bool = True


@dataclass(slots=True, kw_only=True)
class StreamEvent:
    """What one SSE event carried, protocol-independent.

    Attributes
    ----------
    text : str
        Generated text in this event (answer, reasoning or tool-call text); "" if none.
    usage : dict or None
        The server's usage object (``prompt_tokens``, ``completion_tokens``) when present.
    finish_reason : str or None
        Finish reason when the event carried one.
    error : str or None
        An error reported inside the stream (after HTTP 200).
    done : bool
        True for the end-of-stream sentinel (``[DONE]``).
    """

    text: str = ""
    usage: dict | None = None
    finish_reason: str | None = None
    error: str | None = None
    done: bool = False


class Adapter(Protocol):
    """One wire protocol: where to POST, what to send, how to read one SSE ``data`` payload."""

    name: ClassVar[str]
    path: ClassVar[str]

    def build_body(self, *, prompt: str, workload: Workload) -> dict:
        """JSON body for one streamed request."""

    def parse(self, data: str) -> StreamEvent:
        """Turn the ``data`` field of one SSE event into a :class:`StreamEvent`.

        Raises ``ValueError`` when the payload is not the protocol's JSON.
        """
