"""Request-rate (open-loop) run: --rate R or --rates 1,2,4,8 requests/s, each held --dwell-s seconds.

Sends follow a schedule fixed in advance (--arrival constant|poisson, --burstiness), spread over a
pool of --max-users users; each record keeps its scheduled send time.

    locust -f llm_locust/locustfiles/rate.py --headless --host http://127.0.0.1:8000 --model sim-llama \
        --rates 2,4,8 --dwell-s 30 --warmup-s 5 --arrival poisson --max-users 64 --run-dir runs/rate
    llm-locust analyze runs/rate

With --trace FILE (--trace-format jsonl|mooncake|azure, --trace-speed X) the schedule is the
trace's own: each request at its time, with its input and output lengths (docs/workloads.md).
"""

import llm_locust.plugin  # noqa: F401  (options, record shipping, run directory)
from llm_locust.client import rateuser
from llm_locust.client.rateuser import RateUser
from llm_locust.master.rateshape import RateShape  # noqa: F401  (Locust picks the shape up from this module)

rateuser.install()


class ChatUser(RateUser):
    pass
