"""Single-request baseline: one stream at a time, exactly --baseline-requests requests.

    locust -f llm_locust/locustfiles/baseline.py --headless --host http://127.0.0.1:8000 --model sim-llama \
        --baseline-requests 10 --run-dir runs/baseline
"""

import llm_locust.plugin  # noqa: F401  (options, record shipping, run directory)
from llm_locust.client.baseline import BaselineUser
from llm_locust.master.shapes import BaselineShape  # noqa: F401  (Locust picks the shape up from this module)


class ChatUser(BaselineUser):
    pass
