"""Automatic prefix caching of the simulated engine, modelled on vLLM V1's.

What vLLM does (``vllm/v1/core/kv_cache_utils.py``, ``kv_cache_manager.py``, ``block_pool.py``,
``vllm/v1/metrics/stats.py``; docs ``design/prefix_caching.md``):

- the prompt is cut into KV blocks of ``block_size`` tokens; each *full* block gets a hash of its
  parent block's hash and its own tokens (a chain: a block's hash names the whole prefix up to
  its end); a partial last block is never cached;
- when a waiting request is scheduled, ``get_computed_blocks`` walks its block hashes from the
  first and stops at the first one not in the cache; the hit is capped at ``num_tokens - 1``
  (``max_cache_hit_length``: the last token is always computed, for its logits), so a prompt
  cached in full still prefills its last block;
- only the tokens after the hit are prefilled (they alone take the step's token budget);
- the request's full blocks are then cached (``cache_blocks`` at allocation, so a request
  scheduled later in the same step already finds them); freed blocks stay cached until their
  memory is needed again, least recently used first;
- ``PrefixCacheStats.record``: a request not preempted before adds its ``num_tokens`` to
  ``queries`` and its hit tokens to ``hits`` (``vllm:prefix_cache_queries_total`` /
  ``vllm:prefix_cache_hits_total``, both in tokens); a request resumed after a preemption is
  counted apart (``preempted_queries``, not exported); with prefix caching off nothing is looked
  up and nothing counted. The stats line's ``Prefix cache hit rate`` is hits / queries over the
  most recent 1,000 such requests (``CachingMetrics``).

Simplifications (the engine counts KV in tokens): the cache holds at most
``kv_capacity_tokens // block_size`` block hashes, evicted least recently used first, beside the
running requests' KV (a running request's cached blocks are not counted once only, as vLLM's
shared physical blocks are); blocks of generated tokens are not cached.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from collections.abc import Sequence

RECENT_REQUESTS = 1000
"""Requests the stats line's hit rate aggregates (vLLM ``CachingMetrics.max_recent_requests``)."""


def block_hashes(tokens: Sequence[str], block_size: int) -> tuple[bytes, ...]:
    """The chained hashes of the full blocks of ``tokens``.

    Parameters
    ----------
    tokens : sequence of str
        The prompt's tokens, in order (:func:`llm_locust.simserver.openai_request.prompt_tokens_of`).
    block_size : int
        Tokens per KV block (>= 1).

    Returns
    -------
    tuple of bytes
        ``len(tokens) // block_size`` SHA-256 digests; block ``i``'s is the digest of block
        ``i - 1``'s and the block's tokens (vLLM ``hash_block_tokens``, ``sha256`` algorithm), so
        two prompts share digest ``i`` exactly when their first ``(i + 1) * block_size`` tokens
        are the same.

    >>> a = block_hashes(["x"] * 40, 16)
    >>> b = block_hashes(["x"] * 32 + ["y"] * 8, 16)
    >>> len(a), a == b, block_hashes(["y"] + ["x"] * 39, 16)[1] == a[1]
    (2, True, False)
    """
    out: list[bytes] = []
    parent = b""
    for start in range(0, len(tokens) - block_size + 1, block_size):
        digest = hashlib.sha256(parent)
        digest.update("\x1f".join(tokens[start : start + block_size]).encode())
        parent = digest.digest()
        out.append(parent)
    return tuple(out)


class PrefixCache:
    """Cached block hashes, least recently used first, and vLLM's counters.

    Parameters
    ----------
    block_size : int
        Tokens per block.
    capacity_blocks : int
        Most block hashes held (>= 1).

    Attributes
    ----------
    queries_total : int
        Prompt tokens looked up by requests not preempted before, tokens.
    hits_total : int
        Of those, tokens found cached, tokens.
    """

    def __init__(self, *, block_size: int, capacity_blocks: int) -> None:
        if block_size < 1 or capacity_blocks < 1:
            raise ValueError("block_size and capacity_blocks must be at least 1")
        self.block_size = block_size
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[bytes, None] = OrderedDict()
        self._recent: deque[tuple[int, int]] = deque(maxlen=RECENT_REQUESTS)
        self.queries_total = 0
        self.hits_total = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def hit_tokens(self, hashes: Sequence[bytes], num_tokens: int) -> int:
        """Tokens of a request's start found cached: whole blocks from the first, up to the first
        block not cached, at most ``num_tokens - 1`` tokens (``max_cache_hit_length``)."""
        most = max(0, num_tokens - 1) // self.block_size
        found = 0
        for digest in hashes[:most]:
            if digest not in self._blocks:
                break
            found += 1
        return found * self.block_size

    def admit(self, hashes: Sequence[bytes], *, num_tokens: int, hit_tokens: int, preempted: bool) -> None:
        """A request was scheduled: count it (unless ``preempted`` before), mark its blocks the
        most recently used, cache the ones not cached yet and evict beyond the capacity."""
        if not preempted:
            self.queries_total += num_tokens
            self.hits_total += hit_tokens
            self._recent.append((num_tokens, hit_tokens))
        for digest in hashes:
            self._blocks[digest] = None
            self._blocks.move_to_end(digest)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)

    @property
    def recent_hit_ratio(self) -> float:
        """Hits / queries over the last :data:`RECENT_REQUESTS` requests counted (0 before any),
        the stats line's ``Prefix cache hit rate`` as a 0-1 ratio."""
        queries = sum(q for q, _ in self._recent)
        return sum(h for _, h in self._recent) / queries if queries else 0.0
