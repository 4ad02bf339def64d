"""The embedded server's ``--api-key`` (vLLM's ``AuthenticationMiddleware``): ``/v1`` needs the
bearer key, ``/health`` and ``/metrics`` stay open, and the key is never in the startup log line
or the config's repr."""

from __future__ import annotations

import argparse
import asyncio

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from llm_locust.simserver.app import SimServerApp
from llm_locust.simserver.config import SimConfig, add_arguments, config_from_args, non_default_args

KEY = "sk-sim-auth-0b7e2c"


def statuses(config: SimConfig, requests: list[tuple[str, dict]]) -> list[tuple[int, str]]:
    """(status, body) of each ``GET path`` with ``headers`` against the app on a loopback port."""

    async def main():
        app = SimServerApp(config=config, driver=None, registry=CollectorRegistry(), started_s=0.0).build()
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            out = []
            for path, headers in requests:
                response = await client.get(path, headers=headers)
                out.append((response.status, await response.text()))
            return out

    return asyncio.run(main())


def test_v1_needs_the_bearer_key_and_health_and_metrics_stay_open():
    result = statuses(
        SimConfig(api_key=KEY),
        [("/v1/models", {}), ("/v1/models", {"Authorization": "Bearer wrong"}),
         ("/v1/models", {"Authorization": KEY}), ("/v1/models", {"Authorization": f"Bearer {KEY}"}),
         ("/health", {}), ("/metrics", {})],
    )  # fmt: skip
    assert [status for status, _ in result] == [401, 401, 401, 200, 200, 200]
    assert result[0][1] == '{"error": "Unauthorized"}'
    assert KEY not in "".join(body for _, body in result)


def test_without_a_key_nothing_is_asked():
    assert [s for s, _ in statuses(SimConfig(), [("/v1/models", {})])] == [200]


def test_the_key_comes_from_the_flag_or_vllm_api_key_and_is_never_shown(monkeypatch):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    from_env = config_from_args(parser.parse_args([]))
    from_flag = config_from_args(parser.parse_args(["--api-key", "sk-flag"]))
    monkeypatch.delenv("VLLM_API_KEY")
    none = config_from_args(parser.parse_args([]))

    assert (from_env.api_key, from_flag.api_key, none.api_key) == (KEY, "sk-flag", "")
    assert KEY not in repr(from_env) and KEY not in str(non_default_args(from_env))
