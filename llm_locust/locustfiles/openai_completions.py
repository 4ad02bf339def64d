"""Stream OpenAI completions (POST /v1/completions); users and spawn rate from -u / -r (or the web UI).

    locust -f llm_locust/locustfiles/openai_completions.py --host http://127.0.0.1:8000 --model sim-llama \
        --run-dir runs/completions -u 8 -r 8 -t 60s --headless
"""

from locust import events

import llm_locust.plugin  # noqa: F401  (options, record shipping, run directory)
from llm_locust.client.user import LLMUser


@events.init_command_line_parser.add_listener
def _default_protocol(parser, **_kwargs) -> None:
    parser.set_defaults(protocol="openai-completions")


class CompletionsUser(LLMUser):
    request_name = "completions"
