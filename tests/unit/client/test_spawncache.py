"""The worker's spawn message: Locust's default options computed once per process, not once per
option key (llm_locust/client/spawncache.py)."""

from __future__ import annotations

from locust import argument_parser

from llm_locust.client import spawncache


def test_default_args_are_computed_once_and_equal_locusts(monkeypatch):
    calls = []
    real = argument_parser.default_args_dict

    def counted() -> dict:
        calls.append(1)
        return real()

    monkeypatch.setattr(argument_parser, "default_args_dict", counted)
    expected = real()
    spawncache.install_default_args_cache()
    spawncache.install_default_args_cache()  # idempotent: not a cache of the cache

    # what WorkerRunner.handle_message does for a spawn message: one call per option key
    options = {**expected, "model": "sim-llama", "ladder": "1,2", "expect_workers": 8}
    custom = {k: v for k, v in options.items() if k not in argument_parser.default_args_dict()}

    assert len(calls) == 1
    assert custom == {"model": "sim-llama", "ladder": "1,2"}
    first = argument_parser.default_args_dict()
    assert first == expected
    first["users"] = -1  # each caller gets its own copy
    assert argument_parser.default_args_dict() == expected and len(calls) == 1
