"""What each request sends: prompts of exact token lengths, datasets, the fixed prompt set.

The interface other modules use is :class:`~llm_locust.client.workload.source.RequestSource`'s
``next_request() -> WorkItem`` (prompt or chat messages, max_tokens, target prompt length), built
once per process by :func:`~llm_locust.client.workload.build.build_request_source`.
"""

from __future__ import annotations

from llm_locust.client.workload.build import build_request_source, workload_meta
from llm_locust.client.workload.source import CyclingPrompts, RequestSource, WorkItem

__all__ = ["CyclingPrompts", "RequestSource", "WorkItem", "build_request_source", "workload_meta"]
