"""Stream OpenAI chat completions; users and spawn rate from -u / -r (or the web UI).

    locust -f llm_locust/locustfiles/chat_stream.py --host http://127.0.0.1:8000 --model sim-llama \
        --run-dir runs/mine -u 8 -r 8 -t 60s --headless
"""

import llm_locust.plugin  # noqa: F401  (options, record shipping, run directory)
from llm_locust.client.user import LLMUser


class ChatUser(LLMUser):
    pass
