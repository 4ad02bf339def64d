"""Concurrency ladder: --ladder 1,2,4,8 users, each held --dwell-s seconds (first --warmup-s excluded).

    locust -f llm_locust/locustfiles/ladder.py --headless --host http://127.0.0.1:8000 --model sim-llama \
        --ladder 1,2,4,8,16 --dwell-s 20 --warmup-s 5 --run-dir runs/ladder
    llm-locust analyze runs/ladder
"""

import llm_locust.plugin  # noqa: F401  (options, record shipping, run directory)
from llm_locust.client.user import LLMUser
from llm_locust.master.shapes import LadderShape  # noqa: F401  (Locust picks the shape up from this module)


class ChatUser(LLMUser):
    pass
