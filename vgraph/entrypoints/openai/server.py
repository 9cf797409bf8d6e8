"""`vgraph serve`: the OpenAI-compatible HTTP server (FastAPI + uvicorn) in front of AsyncLLM.

Routes: GET /v1/models, POST /v1/completions, POST /v1/chat/completions (API key checked on /v1
when one is set), GET /health (503 once the engine is dead), GET /version, GET /metrics.
Every error is an OpenAI error body. Bodies are read here, with a size limit (413 past it), and
parsed strictly (400 for non-UTF-8, invalid JSON, or a field that fails validation). A client that
disconnects cancels its handler, which aborts its requests in the engine core.
Shutdown (SIGINT/SIGTERM): uvicorn stops accepting and lets in-flight requests finish for up to
--graceful-shutdown-timeout seconds (then cancels them), then the lifespan stops the engine core.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

import vgraph
from vgraph.engine.async_llm import AsyncLLM
from vgraph.entrypoints.openai.metrics import PrometheusStatLogger
from vgraph.entrypoints.openai.protocol import (
    APIError,
    ChatCompletionRequest,
    ChatMessage,
    CompletionRequest,
    StreamOptions,
    TextPart,
)
from vgraph.entrypoints.openai.serving_chat import OpenAIServingChat
from vgraph.entrypoints.openai.serving_completion import OpenAIServingCompletion

logger = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)
DRAIN_FACTOR = 64  # an oversized body is read (and dropped) up to this many limits, then cut


class ClosingStreamingResponse(StreamingResponse):
    """Closes its body iterator however the response ends, so the request is aborted at once."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]


def build_app(engine: AsyncLLM, args: argparse.Namespace) -> FastAPI:
    model_name = engine.config.model_config.name
    stats = PrometheusStatLogger(model_name)
    engine.stat_loggers.append(stats)
    completion = OpenAIServingCompletion(engine, model_name, args.max_seqs_per_request)
    chat = OpenAIServingChat(engine, model_name, args.max_seqs_per_request)
    limit = args.max_request_body_bytes
    expected_auth = None if not args.api_key else f"Bearer {args.api_key}".encode()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine.start_output_handler()  # watches the core from the start, not from a first request
        try:
            yield
        finally:
            logger.info("shutting down the engine core")
            engine.shutdown()

    async def check_api_key(request: Request) -> None:
        if expected_auth is None:
            return
        got = request.headers.get("authorization", "").encode()
        if not hmac.compare_digest(got, expected_auth):
            raise APIError(
                "missing or incorrect API key; send `Authorization: Bearer <key>`",
                401,
                code="invalid_api_key",
            )

    app = FastAPI(title="vgraph", version=vgraph.__version__, lifespan=lifespan)
    v1 = APIRouter(prefix="/v1", dependencies=[Depends(check_api_key)])

    @v1.get("/models")
    async def models() -> dict[str, Any]:
        mc = engine.config.model_config
        return {
            "object": "list",
            "data": [
                {
                    "id": model_name,
                    "object": "model",
                    "created": int(time.time()),
                    "owned_by": "vgraph",
                    "root": mc.model,
                    "parent": None,
                    "max_model_len": mc.max_model_len,
                }
            ],
        }

    @v1.post("/completions")
    async def completions(request: Request) -> Response:
        req = parse(CompletionRequest, await read_json(request, limit))
        return await respond(request, completion.create_completion(req))

    @v1.post("/chat/completions")
    async def chat_completions(request: Request) -> Response:
        req = parse(ChatCompletionRequest, await read_json(request, limit))
        return await respond(request, chat.create_chat_completion(req))

    app.include_router(v1)

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=503 if engine.is_dead else 200)

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"version": vgraph.__version__}

    @app.get("/metrics")
    async def metrics() -> Response:
        stats.engine_dead = engine.is_dead
        return Response(stats.render(), media_type=CONTENT_TYPE_LATEST)

    @app.exception_handler(APIError)
    async def on_api_error(request: Request, e: APIError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(
            APIError(str(e.detail), e.status_code).body(), status_code=e.status_code
        )

    @app.exception_handler(Exception)
    async def on_error(request: Request, e: Exception) -> JSONResponse:
        logger.exception("internal error in %s", request.url.path)
        return JSONResponse(
            APIError(f"internal error: {type(e).__name__}", 500).body(), status_code=500
        )

    return app


async def read_json(request: Request, limit: int) -> Any:
    """The request body as JSON; 413 past `limit` bytes, 400 if not UTF-8 JSON."""
    declared = request.headers.get("content-length", "")
    too_large = declared.isdigit() and int(declared) > limit
    chunks, total = [], 0
    async for chunk in request.stream():
        total += len(chunk)
        too_large = too_large or total > limit
        if not too_large:
            chunks.append(chunk)
        elif total > DRAIN_FACTOR * limit:  # stop reading; the connection will be dropped
            break
    if too_large:
        raise APIError(
            f"request body is larger than the limit of {limit} bytes (--max-request-body-bytes)",
            413,
            code="request_too_large",
        )
    try:
        text = b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as e:
        raise APIError(f"request body is not valid UTF-8: {e}") from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        raise APIError(f"request body is not valid JSON: {e}") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse(model: type[M], body: Any) -> M:
    """Validate a JSON body; the first problem becomes a 400 naming the field."""
    try:
        return model.model_validate(body)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        if err["type"] == "extra_forbidden":
            field = ".".join(str(x) for x in err["loc"])
            raise APIError(
                f"Unrecognized request argument supplied: {field}", param=field
            ) from None
        # drop the union-branch names pydantic puts in loc ("str", "list[int]", ...)
        field = ".".join(str(x) for x in err["loc"] if isinstance(x, int) or x in _FIELDS) or None
        msg = _UNION_HINTS.get(field or "", err["msg"]) if len(e.errors()) > 1 else err["msg"]
        got = repr(err.get("input"))
        got = f" (got {got})" if len(got) <= 80 and err["type"] != "missing" else ""
        raise APIError(f"{field or 'body'}: {msg}{got}", param=field) from None


_UNION_HINTS = {  # fields whose several allowed forms make pydantic's first complaint misleading
    "prompt": "must be a string, a list of token ids, a list of strings or a list of token-id "
    "lists",
    "stop": "must be a string or a list of at most 16 strings",
}


_FIELDS = set().union(
    *(
        m.model_fields
        for m in (CompletionRequest, ChatCompletionRequest, ChatMessage, StreamOptions, TextPart)
    )
)


async def respond(
    request: Request, work: Awaitable[dict[str, Any] | AsyncIterator[str]]
) -> Response:
    """Run a handler until it answers or the client goes away (then cancel it)."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_wait_for_disconnect(request))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        return Response(status_code=499)  # nobody is listening
    result = task.result()
    if isinstance(result, dict):
        return JSONResponse(result)
    return ClosingStreamingResponse(result, media_type="text/event-stream")


async def _wait_for_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def run_server(args: argparse.Namespace, config: Any) -> int:
    """Start the engine core, then serve until SIGINT/SIGTERM; returns the exit code."""
    import uvicorn

    engine = AsyncLLM(config)
    try:
        app = build_app(engine, args)
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                host=args.host,
                port=args.port,
                log_level=args.uvicorn_log_level,
                access_log=not args.disable_access_log,
                timeout_graceful_shutdown=args.graceful_shutdown_timeout,
            )
        )
        logger.info("serving %s on http://%s:%d", config.model_config.name, args.host, args.port)
        asyncio.run(_serve(server, engine, args.engine_death_grace))
        return 0 if server.started and not engine.is_dead else 1
    finally:
        engine.shutdown()


async def _serve(server: Any, engine: AsyncLLM, grace_s: float) -> None:
    watcher = asyncio.create_task(_stop_after_engine_death(server, engine, grace_s))
    try:
        await server.serve()
    finally:
        watcher.cancel()


async def _stop_after_engine_death(server: Any, engine: AsyncLLM, grace_s: float) -> None:
    """A dead engine core ends the server: /health says 503 for grace_s, then exit status 1."""
    await engine.wait_dead()
    logger.error("engine core is dead; /health answers 503, the server exits in %.0f s", grace_s)
    await asyncio.sleep(grace_s)
    server.should_exit = True
