"""aiohttp routes of the simulated server: OpenAI-compatible generation, models, health, metrics.

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions``, ``GET /v1/models``,
``GET /health`` (200, empty body), ``GET /metrics`` (Prometheus text; 404 with ``metrics`` off); with the generic flavour
also its own ``POST /generate`` (:mod:`llm_locust.simserver.generic_api`). With ``api_key`` set, the
``/v1`` routes answer 401 without ``Authorization: Bearer <api_key>`` (as vLLM's
``AuthenticationMiddleware``: ``OPTIONS`` and other paths pass).

A generation request is parsed (HTTP 400/404 on bad input, vLLM error body), numbered in arrival
order (the number seeds its text, see ``text.py``) and submitted to the engine (``reject_status``,
429 or 503, when the waiting queue is full). Streaming responses send their headers at once, then
each SSE event is written (and flushed) as soon as the engine step that produced it ends. As in
vLLM, the chat role-only chunk goes out when the first output arrives - at the end of the step that prefilled
the request, immediately before the first content chunk - not at admission. When the client
disconnects (the handler is cancelled, or a write fails) the request is aborted in the engine and
its KV freed.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import json
import time
from collections.abc import Callable, Sequence
from functools import partial

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry

from llm_locust.simserver.config import SimConfig
from llm_locust.simserver.driver import EngineDriver
from llm_locust.simserver.engine import QueueFullError, SimRequest, TokenOutput
from llm_locust.simserver.metrics import render_metrics
from llm_locust.simserver.openai_request import ApiError, ApiKind, ParsedRequest, parse_request
from llm_locust.simserver.openai_response import (
    DONE_EVENT,
    ChunkBuilder,
    full_response,
    models_response,
    usage_fields,
)
from llm_locust.simserver.prefixcache import block_hashes
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
    final_fields : callable(request_id) -> dict, optional
        Extra top-level fields of a finished request's last chunk or body, from the flavour
        (llama.cpp's ``timings``); none when absent.
    """

    def __init__(
        self,
        *,
        config: SimConfig,
        driver: EngineDriver,
        registry: CollectorRegistry,
        started_s: float,
        extra_routes=(),
        final_fields: Callable[[str], dict] | None = None,
    ) -> None:
        self.final_fields: Callable[[str], dict] = final_fields or (lambda request_id: {})
        self._config = config
        self._driver = driver
        self._registry = registry
        self._started_s = started_s
        self._extra_routes = tuple(extra_routes)
        self._request_numbers = itertools.count(1)

    @property
    def config(self) -> SimConfig:
        """The server's settings."""
        return self._config

    @property
    def driver(self) -> EngineDriver:
        """The running engine driver."""
        return self._driver

    def build(self) -> web.Application:
        """The aiohttp application with all routes."""
        middlewares = [self._authenticate] if self._config.api_key else []
        app = web.Application(client_max_size=CLIENT_MAX_SIZE_BYTES, middlewares=middlewares)
        app.router.add_post("/v1/chat/completions", partial(self._generate, kind=ApiKind.CHAT))
        app.router.add_post("/v1/completions", partial(self._generate, kind=ApiKind.COMPLETIONS))
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        if self._config.metrics:
            app.router.add_get("/metrics", self._metrics)
        if self._config.flavor == "generic":
            from llm_locust.simserver.generic_api import GenericApi

            app.router.add_post("/generate", GenericApi(self).handle)
        for method, path, handler in self._extra_routes:
            app.router.add_route(method, path, handler)
        return app

    @web.middleware
    async def _authenticate(self, request: web.Request, handler) -> web.StreamResponse:
        if request.method == "OPTIONS" or not request.path.startswith("/v1"):
            return await handler(request)
        expected = f"Bearer {self._config.api_key}".encode()
        if not hmac.compare_digest(request.headers.get("Authorization", "").encode(), expected):
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _models(self, request: web.Request) -> web.Response:
        body = models_response(
            model=self._config.model_name, created=int(self._started_s), max_model_len=self._config.max_model_len
        )
        return web.json_response(body, dumps=_compact_dumps)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=render_metrics(self._registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _generate(self, request: web.Request, *, kind: ApiKind) -> web.StreamResponse:
        config = self._config
        try:
            parsed = parse_request(
                kind=kind,
                raw_body=await request.read(),
                model_name=config.model_name,
                max_model_len=config.max_model_len,
            )
        except ApiError as error:
            return _error_response(error)
        try:
            number, sim_request, queue = self.submit(
                prompt_tokens=parsed.prompt_tokens,
                max_tokens=parsed.max_tokens,
                ignore_eos=parsed.ignore_eos,
                prompt=parsed.prompt,
            )
        except QueueFullError as exc:
            if config.flavor == "tgi":  # router/src/infer: InferError::Overloaded
                return web.json_response(
                    {"error": "Model is overloaded", "error_type": "overloaded"},
                    status=config.reject_status,
                    dumps=_compact_dumps,
                )
            return _error_response(
                ApiError(
                    status=config.reject_status,
                    error_type="RateLimitError" if config.reject_status == 429 else "ServiceUnavailable",
                    message=f"The server is overloaded: {exc}. Retry later.",
                )
            )
        except ValueError as exc:
            return _error_response(ApiError(status=400, message=str(exc)))
        prefix = "chatcmpl" if kind is ApiKind.CHAT else "cmpl"
        builder_args = dict(
            kind=kind,
            response_id=response_id(prefix=prefix, seed=config.seed, request_number=number),
            created=int(time.time()),
            model=config.model_name,
        )
        texts = TokenTextGenerator(seed=config.seed, request_number=number)
        try:
            if parsed.stream:
                return await self._stream(request, parsed, queue, texts, builder_args)
            return await self._collect(parsed, queue, texts, builder_args, sim_request.request_id)
        finally:
            self._driver.abort(sim_request.request_id)  # no-op when it finished
            self.final_fields(sim_request.request_id)  # dropped when the handler did not take them

    def submit(
        self, *, prompt_tokens: int, max_tokens: int, ignore_eos: bool, prompt: Sequence[str] = ()
    ) -> tuple[int, SimRequest, asyncio.Queue[TokenOutput]]:
        """Number a generation request and submit it to the engine.

        ``prompt`` is the prompt's tokens (:mod:`llm_locust.simserver.openai_request`), hashed
        into KV blocks when prefix caching is on (none given: nothing cached for it).

        Returns
        -------
        (number, request, queue)
            Its arrival number (which seeds its text), the engine request, and the queue its
            token outputs arrive on.

        Raises
        ------
        QueueFullError
            The waiting queue is full.
        ValueError
            The engine refuses the request (longer than the model's context).
        """
        config = self._config
        number = next(self._request_numbers)
        hashes = block_hashes(prompt, config.block_size) if config.enable_prefix_caching else ()
        sim_request = SimRequest(
            block_hashes=hashes,
            request_id=f"req-{number}",
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            stop_after_tokens=stop_length(
                seed=config.seed, request_number=number, max_tokens=max_tokens, ignore_eos=ignore_eos
            ),
        )
        return number, sim_request, self._driver.submit(sim_request)

    async def _stream(
        self,
        request: web.Request,
        parsed: ParsedRequest,
        queue: asyncio.Queue[TokenOutput],
        texts: TokenTextGenerator,
        builder_args: dict,
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"Content-Type": SSE_CONTENT_TYPE})
        builder = ChunkBuilder(**builder_args)
        try:
            await response.prepare(request)
            per_chunk = self._config.tokens_per_chunk
            pending: list[str] = []
            produced = 0
            while True:
                output = await queue.get()
                produced = output.token_index + 1
                if output.token_index == 0 and parsed.kind is ApiKind.CHAT:
                    await response.write(builder.role_chunk(self._running_usage(parsed, 0)))
                pending.append(texts.next_token())
                reason = None if output.finish_reason is None else output.finish_reason.value
                if reason is None and len(pending) < per_chunk:
                    continue  # held until the chunk is full (--tokens-per-chunk)
                extra = self.final_fields(output.request_id) if reason is not None else None
                fields = None if parsed.include_usage else extra
                usage = self._running_usage(parsed, produced)
                if usage is not None:
                    fields = {**(fields or {}), "usage": usage}
                await response.write(builder.token_chunk("".join(pending), reason, fields))
                pending.clear()
                if reason is not None:
                    break
            if parsed.include_usage:
                await response.write(
                    builder.usage_chunk(
                        prompt_tokens=parsed.prompt_tokens,
                        completion_tokens=produced,
                        extra=extra,
                    )
                )
            await response.write(DONE_EVENT)
            await response.write_eof()
        except ConnectionResetError:
            pass  # client gone: the caller aborts the request
        return response

    @staticmethod
    def _running_usage(parsed: ParsedRequest, completion_tokens: int) -> dict | None:
        """A chunk's ``usage`` under ``continuous_usage_stats`` (the running totals), else None."""
        if not parsed.continuous_usage:
            return None
        return usage_fields(parsed.prompt_tokens, completion_tokens)

    async def _collect(
        self,
        parsed: ParsedRequest,
        queue: asyncio.Queue[TokenOutput],
        texts: TokenTextGenerator,
        builder_args: dict,
        request_id: str,
    ) -> web.Response:
        pieces: list[str] = []
        while True:
            output = await queue.get()
            pieces.append(texts.next_token())
            if output.finish_reason is not None:
                break
        body = full_response(
            **builder_args,
            text="".join(pieces),
            finish_reason=output.finish_reason.value,
            prompt_tokens=parsed.prompt_tokens,
            completion_tokens=len(pieces),
        )
        body.update(self.final_fields(request_id))
        return web.json_response(body, dumps=_compact_dumps)
