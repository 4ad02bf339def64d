"""Output token counts when the server does not say them: one estimate on the joined text.

Used only when a stream carried no ``usage.completion_tokens`` (and no per-event counts): the
generated text of the whole request is joined and estimated once — never chunk by chunk (a
tokenizer run on pieces over-counts at their seams), never by counting chunks (a server doing
speculative decoding sends several tokens per chunk).

- :class:`TokenizerCounter`: a Hugging Face ``tokenizers`` tokenizer from a local
  ``tokenizer.json`` (``--tokenizer PATH``; the optional extra ``llm-locust[tokenizer]``).
- :func:`heuristic_tokens`: ``ceil(characters / 4)``, OpenAI's rule of thumb for English text
  (about 4 characters per token); at least 1 for non-empty text.

Either estimate is clipped to the request's ``max_tokens`` (a server never sends more).
"""

from __future__ import annotations

import math
from pathlib import Path

CHARS_PER_TOKEN = 4.0
"""Characters per token assumed by :func:`heuristic_tokens`."""


def heuristic_tokens(text: str) -> int:
    """``ceil(len(text) / 4)`` tokens; 0 for empty text.

    >>> heuristic_tokens(""), heuristic_tokens("Hi"), heuristic_tokens("Hello, world")
    (0, 1, 3)
    """
    return math.ceil(len(text) / CHARS_PER_TOKEN) if text else 0


class TokenizerCounter:
    """Count tokens with a Hugging Face tokenizer read from a local file.

    Parameters
    ----------
    path : str or Path
        A ``tokenizer.json`` file, or a folder holding one (a model snapshot).

    Raises
    ------
    ImportError
        The ``tokenizers`` package is not installed (``pip install 'llm-locust[tokenizer]'``).
    FileNotFoundError
        No ``tokenizer.json`` at ``path``.
    """

    def __init__(self, path: str | Path) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise ImportError("--tokenizer needs the tokenizers package: pip install 'llm-locust[tokenizer]'") from exc
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        if not path.is_file():
            raise FileNotFoundError(f"no tokenizer.json at {path}")
        self.path = path
        self._tokenizer = Tokenizer.from_file(str(path))

    def __call__(self, text: str) -> int:
        """Tokens of ``text`` without special tokens (what the model generated)."""
        if not text:
            return 0
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)
