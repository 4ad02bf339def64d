"""The soak's locustfile: ``llm_locust/locustfiles/chat_stream.py``'s user, with Locust's liveness checks
widened: the master marks a worker missing after :data:`HEARTBEAT_LIVENESS` (120) missed
heartbeats instead of 3, a worker quits after :data:`MASTER_HEARTBEAT_TIMEOUT_S` (300 s) without
one from the master instead of 60.

Why: the soak runs at ``nice -n 10`` on a shared 2-core machine, where a worker process may get
no CPU for tens of seconds (seen: 32 s while it started its 256 users, with other processes keeping
both cores busy); Locust's master then marks it missing and, with no worker left, stops the test
(``locust/runners.py``, ``heartbeat_worker``) — the soak would measure the neighbours' load, not
leaks. ``locust.runners`` reads these module constants each time it checks, so setting them
here, in the file master and workers both load, is enough. Worker loss
itself is tested in ``tests/e2e/test_worker_killed.py``, with Locust's default.
"""

import locust.runners

import llm_locust.plugin  # noqa: F401  (options, record shipping, run directory)
from llm_locust.client.user import LLMUser

HEARTBEAT_LIVENESS = 120
MASTER_HEARTBEAT_TIMEOUT_S = 300
locust.runners.HEARTBEAT_LIVENESS = HEARTBEAT_LIVENESS
locust.runners.MASTER_HEARTBEAT_TIMEOUT = MASTER_HEARTBEAT_TIMEOUT_S


class ChatUser(LLMUser):
    pass
