"""The worker's hot path: one streamed request, from the body sent to the record kept.

In: Locust's parsed options (:mod:`llm_locust.client.config`) and the user's task loop
(:mod:`llm_locust.client.user`). Flow of one request: a protocol adapter builds the body
(:mod:`~llm_locust.client.protocols`) -> a pooled connection (:mod:`~llm_locust.client.connection`)
-> the exchange is written and its bytes read as they arrive, each stamped with the instant the
event loop saw the socket readable (:mod:`~llm_locust.client.reader`, :mod:`~llm_locust.client.stream`)
-> SSE framing (:mod:`~llm_locust.client.sse`) -> deadlines (:mod:`~llm_locust.client.watchdog`)
-> the facts of the :class:`~llm_locust.client.record.RequestRecord`
(:mod:`~llm_locust.client.accounting`, :mod:`~llm_locust.client.tokens`).
Out: one Locust ``request`` event per request, carrying the record.
"""
