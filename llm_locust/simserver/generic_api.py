"""The generic flavour's own API ("DeepInfer" ``POST /generate``): a JSON endpoint that is not
OpenAI-compatible, for ``--protocol generic`` to load end to end.

Request body: ``{"prompt": str, "max_new_tokens": int (default 64), "stream": bool (default
false), "ignore_eos": bool (default false)}``; prompt tokens = its whitespace-separated words + 1.

- ``stream: true``: ``application/jsonl``, one line per token ``{"token": "…", "index": i}``;
  the last line adds ``"finished"`` (``length`` or ``stop``), ``"generated_tokens"``,
  ``"prompt_tokens"`` and ``"timings"``.
- ``stream: false``: one body ``{"text": "…", "finished", "generated_tokens", "prompt_tokens",
  "timings"}``.
- Errors: HTTP 400 ``{"error": "…"}`` for a bad body; 503 ``{"error": "queue full"}`` when the
  waiting queue is full; 504 ``{"error": "timed out in queue"}`` when the request waited
  ``queue_timeout_ms`` without being admitted (the status is sent with the first token, so a
  streamed answer is 200 only once the request runs).

``timings`` (the flavour's ``final_fields``, :mod:`llm_locust.simserver.flavors.generic`):
``queue_ms`` (arrival -> admission into the batch), ``prefill_ms`` (admission -> first token),
``decode_ms`` (first token -> last).

:data:`PROTOCOL_TOML` is the ``--protocol-format`` file that reads it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from llm_locust.simserver.engine import QueueFullError
from llm_locust.simserver.openai_request import completion_prompt
from llm_locust.simserver.text import TokenTextGenerator

if TYPE_CHECKING:
    from llm_locust.simserver.app import SimServerApp

PROTOCOL_TOML = """# --protocol-format for the embedded server's generic flavour ("DeepInfer" POST /generate)
[request]
path = "/generate"

[request.body]
prompt = "{prompt}"
max_new_tokens = "{max_tokens}"
stream = "{stream}"
ignore_eos = "{ignore_eos}"

[response]
framing = "jsonl"
text = "token"
finish_reason = "finished"
tokens = "generated_tokens"
prompt_tokens = "prompt_tokens"
error = "error"

[response.timings]
server_queue_ms = "timings.queue_ms"
server_prompt_ms = "timings.prefill_ms"
server_decode_ms = "timings.decode_ms"
"""
"""A format file that reads the streamed (JSON lines) form; with ``framing = "json"`` and
``text = "text"`` it reads the one-body form."""

JSONL_CONTENT_TYPE = "application/jsonl"


def _line(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode() + b"\n"


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


class GenericApi:
    """``POST /generate`` on one :class:`~llm_locust.simserver.app.SimServerApp`."""

    def __init__(self, app: SimServerApp) -> None:
        self.app = app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Parse, submit, then stream JSON lines or answer with one body (module docstring)."""
        try:
            body = json.loads(await request.read())
        except ValueError:
            return _error(400, "body is not JSON")
        if not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
            return _error(400, "prompt must be a string")
        max_new = body.get("max_new_tokens", 64)
        if not isinstance(max_new, int) or isinstance(max_new, bool) or max_new < 1:
            return _error(400, "max_new_tokens must be a whole number >= 1")
        prompt = completion_prompt(body["prompt"])
        prompt_tokens = len(prompt)
        try:
            number, sim_request, queue = self.app.submit(
                prompt_tokens=prompt_tokens,
                max_tokens=max_new,
                ignore_eos=bool(body.get("ignore_eos", False)),
                prompt=prompt,
            )
        except QueueFullError:
            return _error(503, "queue full")
        except ValueError as exc:
            return _error(400, str(exc))
        texts = TokenTextGenerator(seed=self.app.config.seed, request_number=number)
        request_id = sim_request.request_id
        try:
            first = await queue.get()
            if first.token_index < 0:
                return _error(504, "timed out in queue")
            if body.get("stream"):
                return await self._stream(request, queue, texts, prompt_tokens, first)
            pieces: list[str] = []
            output = first
            while True:
                if pieces:
                    output = await queue.get()
                pieces.append(texts.next_token())
                if output.finish_reason is not None:
                    break
            final = self._final(output, prompt_tokens)
            return web.json_response({"text": "".join(pieces), **final})
        finally:
            self.app.driver.abort(request_id)
            self.app.final_fields(request_id)

    def _final(self, output, prompt_tokens: int) -> dict[str, Any]:
        return {
            "finished": output.finish_reason.value,
            "generated_tokens": output.token_index + 1,
            "prompt_tokens": prompt_tokens,
            **self.app.final_fields(output.request_id),
        }

    async def _stream(self, request: web.Request, queue, texts: TokenTextGenerator, prompt_tokens: int, first):
        response = web.StreamResponse(status=200, headers={"Content-Type": JSONL_CONTENT_TYPE})
        try:
            await response.prepare(request)
            output = first
            while True:
                if output is None:
                    output = await queue.get()
                line: dict[str, Any] = {"token": texts.next_token(), "index": output.token_index}
                if output.finish_reason is not None:
                    line.update(self._final(output, prompt_tokens))
                await response.write(_line(line))
                if output.finish_reason is not None:
                    break
                output = None
            await response.write_eof()
        except ConnectionResetError:
            pass  # client gone: the caller aborts the request
        return response
