"""Build a real Locust environment and one LLMUser in-process, for measurement tests."""

from __future__ import annotations

from locust.argument_parser import get_parser
from locust.env import Environment

import llm_locust.plugin  # noqa: F401  (registers llm-locust's options on Locust's parser)
from llm_locust.user import LLMUser


def make_user(host: str, *args: str):
    """An ``LLMUser`` on a local Environment whose options are Locust's parser run on ``args``.

    Returns ``(user, environment, events_fired)`` where ``events_fired`` collects every Locust
    request event's keyword arguments.
    """
    options = get_parser().parse_args(["-f", "x.py", "--host", host, "--model", "m", *args])
    user_class = type("TestUser", (LLMUser,), {"host": host})
    environment = Environment(user_classes=[user_class], host=host, parsed_options=options)
    environment.create_local_runner()
    fired = []
    environment.events.request.add_listener(lambda **kwargs: fired.append(kwargs))
    user = user_class(environment)
    user.on_start()
    return user, environment, fired
