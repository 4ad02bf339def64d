"""aiohttp routes of the simulated server: OpenAI-compatible generation, models, health, metrics.

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions``, ``GET /v1/models``,
``GET /health`` (200, empty body), ``GET /metrics`` (Prometheus text).

A generation request is parsed (HTTP 400/404 on bad input, vLLM error body), numbered in arrival
order (the number seeds its text, see ``text.py``) and submitted to the engine (HTTP 429 when the
waiting queue is full). Streaming responses send their headers at once, then each SSE event is
written (and flushed) as soon as the engine step that produced it ends. As in vLLM, the chat
role-only chunk goes out when the first output arrives - at the end of the step that prefilled
the request, immediately before the first content chunk - not at admission. When the client
disconnects (the handler is cancelled, or a write fails) the request is aborted in the engine and
its KV freed.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from functools import partial

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry

from llm_locust.simserver.config import SimConfig
from llm_locust.simserver.driver import EngineDriver
from llm_locust.simserver.engine import QueueFullError, SimRequest, TokenOutput
from llm_locust.simserver.metrics import render_metrics
from llm_locust.simserver.openai_request import ApiError, ApiKind, ParsedRequest, parse_request
from llm_locust.simserver.openai_response import (
    DONE_EVENT, ChunkBuilder, full_response, models_response,
)
from llm_locust.simserver.text import TokenTextGenerator, response_id, stop_length

SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"
CLIENT_MAX_SIZE_BYTES = 64 * 1024 * 1024
"""Largest request body accepted, bytes (aiohttp's default of 1 MiB is too small for long prompts)."""
_compact_dumps = partial(json.dumps, separators=(",", ":"), ensure_ascii=False)


def _error_response(error: ApiError) -> web.Response:
    return web.json_response(error.body(), status=error.status, dumps=_compact_dumps)


class SimServerApp:
    """Request handlers bound to one engine driver.

    Parameters
    ----------
    config : SimConfig
        Server settings.
    driver : EngineDriver
        Running engine driver.
    registry : CollectorRegistry
        Registry rendered at ``/metrics``.
    started_s : float
        Wall clock of the server start, Unix seconds (``created`` of ``/v1/models``).
    extra_routes : sequence of (method, path, handler), optional
        Routes of the engine flavour (``/props``, ``/info``).
    """

    def __init__(
        self, *, config: SimConfig, driver: EngineDriver, registry: CollectorRegistry,
        started_s: float, extra_routes=(),
    ) -> None:
        self._config = config
        self._driver = driver
        self._registry = registry
        self._started_s = started_s
        self._extra_routes = tuple(extra_routes)
        self._request_numbers = itertools.count(1)

    def build(self) -> web.Application:
        """The aiohttp application with all routes."""
        app = web.Application(client_max_size=CLIENT_MAX_SIZE_BYTES)
        app.router.add_post("/v1/chat/completions", partial(self._generate, kind=ApiKind.CHAT))
        app.router.add_post("/v1/completions", partial(self._generate, kind=ApiKind.COMPLETIONS))
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        for method, path, handler in self._extra_routes:
            app.router.add_route(method, path, handler)
        return app

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _models(self, request: web.Request) -> web.Response:
        body = models_response(model=self._config.model_name, created=int(self._started_s),
                               max_model_len=self._config.max_model_len)
        return web.json_response(body, dumps=_compact_dumps)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=render_metrics(self._registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _generate(self, request: web.Request, *, kind: ApiKind) -> web.StreamResponse:
        config = self._config
        try:
            parsed = parse_request(kind=kind, raw_body=await request.read(),
                                   model_name=config.model_name, max_model_len=config.max_model_len)
        except ApiError as error:
            return _error_response(error)
        number = next(self._request_numbers)
        sim_request = SimRequest(
            request_id=f"req-{number}", prompt_tokens=parsed.prompt_tokens,
            max_tokens=parsed.max_tokens,
            stop_after_tokens=stop_length(seed=config.seed, request_number=number,
                                          max_tokens=parsed.max_tokens,
                                          ignore_eos=parsed.ignore_eos),
        )
        try:
            queue = self._driver.submit(sim_request)
        except QueueFullError as exc:
            return _error_response(ApiError(
                status=429, error_type="RateLimitError",
                message=f"The server is overloaded: {exc}. Retry later.",
            ))
        except ValueError as exc:
            return _error_response(ApiError(status=400, message=str(exc)))
        prefix = "chatcmpl" if kind is ApiKind.CHAT else "cmpl"
        builder_args = dict(
            kind=kind, response_id=response_id(prefix=prefix, seed=config.seed,
                                               request_number=number),
            created=int(time.time()), model=config.model_name,
        )
        texts = TokenTextGenerator(seed=config.seed, request_number=number)
        try:
            if parsed.stream:
                return await self._stream(request, parsed, queue, texts, builder_args)
            return await self._collect(parsed, queue, texts, builder_args)
        finally:
            self._driver.abort(sim_request.request_id)  # no-op when it finished

    async def _stream(
        self, request: web.Request, parsed: ParsedRequest, queue: asyncio.Queue[TokenOutput],
        texts: TokenTextGenerator, builder_args: dict,
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"Content-Type": SSE_CONTENT_TYPE})
        builder = ChunkBuilder(**builder_args)
        try:
            await response.prepare(request)
            while True:
                output = await queue.get()
                if output.token_index == 0 and parsed.kind is ApiKind.CHAT:
                    await response.write(builder.role_chunk())
                reason = None if output.finish_reason is None else output.finish_reason.value
                await response.write(builder.token_chunk(texts.next_token(), reason))
                if reason is not None:
                    break
            if parsed.include_usage:
                await response.write(builder.usage_chunk(
                    prompt_tokens=parsed.prompt_tokens, completion_tokens=output.token_index + 1,
                ))
            await response.write(DONE_EVENT)
            await response.write_eof()
        except ConnectionResetError:
            pass  # client gone: the caller aborts the request
        return response

    async def _collect(
        self, parsed: ParsedRequest, queue: asyncio.Queue[TokenOutput],
        texts: TokenTextGenerator, builder_args: dict,
    ) -> web.Response:
        pieces: list[str] = []
        while True:
            output = await queue.get()
            pieces.append(texts.next_token())
            if output.finish_reason is not None:
                break
        body = full_response(
            **builder_args, text="".join(pieces), finish_reason=output.finish_reason.value,
            prompt_tokens=parsed.prompt_tokens, completion_tokens=len(pieces),
        )
        return web.json_response(body, dumps=_compact_dumps)
