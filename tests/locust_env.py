"""Build a real Locust environment and LLMUsers in-process, for measurement tests."""

from __future__ import annotations

from locust.argument_parser import get_parser
from locust.env import Environment

import llm_locust.plugin  # noqa: F401  (registers llm-locust's options on Locust's parser)
from llm_locust.client.user import LLMUser


def make_users(host: str, count: int, *args: str, shared_reader: bool = True):
    """``count`` LLMUsers on one local Environment whose options are Locust's parser run on ``args``.

    Returns ``(users, environment, events_fired)`` where ``events_fired`` collects every Locust
    request event's keyword arguments. ``shared_reader=False`` makes each user read its own
    stream (the path taken for TLS or without epoll) instead of the process's StreamReader.
    """
    options = get_parser().parse_args(["-f", "x.py", "--host", host, "--model", "m", *args])
    user_class = type("TestUser", (LLMUser,), {"host": host})
    environment = Environment(user_classes=[user_class], host=host, parsed_options=options)
    environment.create_local_runner()
    fired = []
    environment.events.request.add_listener(lambda **kwargs: fired.append(kwargs))
    users = [user_class(environment) for _ in range(count)]
    for user in users:
        user.on_start()
    if not shared_reader:
        users[0].config.reader = None  # one config per environment, shared by its users
    return users, environment, fired


def make_user(host: str, *args: str, shared_reader: bool = True):
    """One LLMUser: ``(user, environment, events_fired)`` (see :func:`make_users`)."""
    users, environment, fired = make_users(host, 1, *args, shared_reader=shared_reader)
    return users[0], environment, fired
