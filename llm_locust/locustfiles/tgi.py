"""Stream Hugging Face TGI (POST /generate_stream, one token per event); users from -u / -r.

    locust -f llm_locust/locustfiles/tgi.py --host http://127.0.0.1:8080 --metrics-url none \
        --run-dir runs/tgi -u 8 -r 8 -t 60s --headless

TGI needs no --model; --ignore-eos has no TGI equivalent and is not sent.
"""

from locust import events

import llm_locust.plugin  # noqa: F401  (options, record shipping, run directory)
from llm_locust.client.user import LLMUser


@events.init_command_line_parser.add_listener
def _defaults(parser, **_kwargs) -> None:
    parser.set_defaults(protocol="tgi", model="tgi")


class TGIUser(LLMUser):
    request_name = "generate_stream"
