"""`vgraph serve`: the OpenAI-compatible HTTP server (FastAPI + uvicorn) in front of AsyncLLM.

Routes: GET /v1/models, GET /v1/models/{id}, POST /v1/completions, POST /v1/chat/completions,
POST /tokenize, POST /detokenize, GET /health and GET|POST /ping (503 once the engine is dead),
GET /version, GET /metrics. With API keys (--api-key, any of them works), every /v1 path, known
or not, answers 401 without one, so the routes are not revealed; CORS and X-Request-Id are
middleware.py's. run_server serves on the socket cli.py bound before the model loaded
(startup.py); the lifespan runs the periodic stats line (engine/stat_logging.py).
Every error is an OpenAI error body. POST bodies are read by request_body.py (415 unless JSON,
413 past the size limit, 400 for bad bytes, JSON or surrogates) and parsed here (400 naming the
field; unknown fields are ignored with one log line naming them). A client that disconnects
cancels its handler, which aborts its requests in the engine core. Shutdown (SIGINT/SIGTERM)
drains in-flight requests (drain.py), then the lifespan stops the engine core, and run_server
returns only once the core process has exited.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

import vgraph
from vgraph.engine.async_llm import AsyncLLM
from vgraph.engine.stat_logging import LoggingStatLogger, log_stats_interval
from vgraph.entrypoints.chat_utils import load_chat_template
from vgraph.entrypoints.generation_config import load_sampling_defaults
from vgraph.entrypoints.openai import protocol
from vgraph.entrypoints.openai.drain import ClosingStreamingResponse, Drain, DrainingServer
from vgraph.entrypoints.openai.metrics import PrometheusStatLogger
from vgraph.entrypoints.openai.middleware import add_middleware, request_id_of
from vgraph.entrypoints.openai.protocol import (
    APIError,
    ChatCompletionRequest,
    CompletionRequest,
    brief,
    ignored_fields,
)
from vgraph.entrypoints.openai.request_body import (
    LingeringCloseResponse,
    RequestTooLarge,
    read_json,
)
from vgraph.entrypoints.openai.serving_chat import OpenAIServingChat
from vgraph.entrypoints.openai.serving_completion import OpenAIServingCompletion
from vgraph.entrypoints.openai.serving_tokenization import (
    DetokenizeRequest,
    OpenAIServingTokenization,
    TokenizeRequest,
)
from vgraph.entrypoints.openai.startup import log_resolved_config
from vgraph.entrypoints.openai.tool_parsers import make_tool_parser

if TYPE_CHECKING:
    from vgraph.config import VGraphConfig
    from vgraph.entrypoints.cli_args import FrontendArgs

logger = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)


def build_app(engine: AsyncLLM, args: FrontendArgs, log_stats: bool = True) -> FastAPI:
    model_name = engine.config.model_config.name
    stats = PrometheusStatLogger(model_name, engine.config.model_config.max_model_len)
    engine.stat_loggers.append(stats)
    stats_line = LoggingStatLogger()
    if log_stats:
        engine.stat_loggers.append(stats_line)
    engine.log_requests = args.enable_log_requests and not args.disable_log_requests
    if args.chat_template is not None and engine.tokenizer is not None:
        engine.tokenizer.chat_template = load_chat_template(args.chat_template)
    mc = engine.config.model_config
    defaults = load_sampling_defaults(mc.model, mc.generation_config)
    completion = OpenAIServingCompletion(engine, model_name, args.max_seqs_per_request, defaults)
    chat = OpenAIServingChat(
        engine,
        model_name,
        args.max_seqs_per_request,
        defaults,
        tool_parser=make_tool_parser(args.tool_call_parser, mc.architecture),
        trust_request_chat_template=args.trust_request_chat_template,
    )
    tokenization = OpenAIServingTokenization(
        engine.tokenizer,
        mc.names,
        mc.max_model_len,
        mc.vocab_size,
        args.trust_request_chat_template,
    )
    limit = args.max_request_body_bytes
    drain = Drain(args.graceful_shutdown_timeout)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine.start_output_handler()  # watches the core from the start, not from a first request
        ticker = asyncio.create_task(_log_stats_every(stats_line)) if log_stats else None
        try:
            yield
        finally:
            if ticker is not None:
                ticker.cancel()
            logger.info("shutting down the engine core")
            engine.shutdown()

    app = FastAPI(
        title="vgraph",
        version=vgraph.__version__,
        lifespan=lifespan,
        root_path=args.root_path or "",
    )
    app.state.drain = drain
    add_middleware(app, args)
    v1 = APIRouter(prefix="/v1")

    def model_card(name: str) -> dict[str, Any]:
        return {
            "id": name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "vgraph",
            "root": mc.model,
            "parent": None,
            "max_model_len": mc.max_model_len,
        }

    @v1.get("/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card(name) for name in mc.names]}

    @v1.get("/models/{model_id:path}")
    async def model(model_id: str) -> dict[str, Any]:
        if model_id not in mc.names:
            raise APIError(
                f"The model `{brief(model_id)}` does not exist; this server serves `{model_name}`",
                404,
                "model",
                "model_not_found",
            )
        return model_card(model_id)

    @v1.post("/completions")
    async def completions(request: Request) -> Response:
        req = parse(CompletionRequest, await read_json(request, limit))
        work = completion.create_completion(req, request_id_of(request))
        return await respond(request, work, drain)

    @v1.post("/chat/completions")
    async def chat_completions(request: Request) -> Response:
        req = parse(ChatCompletionRequest, await read_json(request, limit))
        work = chat.create_chat_completion(req, request_id_of(request))
        return await respond(request, work, drain)

    app.include_router(v1)

    @app.post("/tokenize")
    async def tokenize(request: Request) -> dict[str, Any]:
        return tokenization.tokenize(parse(TokenizeRequest, await read_json(request, limit)))

    @app.post("/detokenize")
    async def detokenize(request: Request) -> dict[str, Any]:
        return tokenization.detokenize(parse(DetokenizeRequest, await read_json(request, limit)))

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=503 if engine.is_dead else 200)

    @app.api_route("/ping", methods=["GET", "POST"])
    async def ping() -> Response:  # SageMaker's health check, as vLLM serves it
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
        if isinstance(e, RequestTooLarge) and e.close:  # the rest of the body is not read
            return LingeringCloseResponse(e.body(), e.limit)
        return JSONResponse(e.body(), status_code=e.status)

    @app.exception_handler(ClientDisconnect)
    async def on_disconnect(request: Request, e: ClientDisconnect) -> Response:
        logger.info("client disconnected before sending the whole body of %s", request.url.path)
        return Response(status_code=499)  # nobody is listening

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        # the exception's headers stay (a 405's Allow, which RFC 9110 requires)
        return JSONResponse(
            APIError(str(e.detail), e.status_code).body(),
            status_code=e.status_code,
            headers=e.headers,
        )

    @app.exception_handler(Exception)
    async def on_error(request: Request, e: Exception) -> JSONResponse:
        logger.exception("internal error in %s", request.url.path)
        return JSONResponse(
            APIError(f"internal error: {type(e).__name__}", 500).body(), status_code=500
        )

    return app


def parse(model: type[M], body: Any) -> M:
    """Validate a JSON body; the first problem becomes a 400 naming the field."""
    try:
        req = model.model_validate(body)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        # drop the union-branch names pydantic puts in loc ("str", "list[int]", ...)
        field = ".".join(str(x) for x in err["loc"] if isinstance(x, int) or x in _FIELDS) or None
        msg = _UNION_HINTS.get(field or "", err["msg"]) if len(e.errors()) > 1 else err["msg"]
        got = repr(err.get("input"))
        got = f" (got {got})" if len(got) <= 80 and err["type"] != "missing" else ""
        raise APIError(f"{field or 'body'}: {msg}{got}", param=field) from None
    ignored = ignored_fields(req)
    if ignored:
        shown = ", ".join(brief(name, 40) for name in ignored[:MAX_LOGGED_FIELDS])
        more = len(ignored) - MAX_LOGGED_FIELDS
        more = f" and {more} more" if more > 0 else ""
        logger.warning("ignored unknown request fields: %s%s", shown, more)
    return req


MAX_LOGGED_FIELDS = 10


_UNION_HINTS = {  # fields whose several allowed forms make pydantic's first complaint misleading
    "prompt": "must be a string, a list of token ids, a list of strings or a list of token-id "
    "lists",
    "stop": "must be a string or a list of at most 16 strings",
    "tool_choice": 'must be "none", "auto", "required" or {"type": "function", "function": '
    '{"name": ...}}',
    "structured_outputs.json": "must be a JSON schema: an object, or its text",
    "guided_json": "must be a JSON schema: an object, or its text",
}


_FIELDS = {  # every field name of every request model, as the JSON spells it (schema, json)
    key
    for m in [
        *(m for m in vars(protocol).values() if isinstance(m, type) and issubclass(m, BaseModel)),
        TokenizeRequest,
        DetokenizeRequest,
    ]
    for name, info in m.model_fields.items()
    for key in (name, info.alias)
    if key
}


async def respond(
    request: Request, work: Awaitable[dict[str, Any] | AsyncIterator[str]], drain: Drain
) -> Response:
    """Run a handler until it answers, the client goes away or the shutdown drain ends (then
    cancel it: 499 for nobody, or 503)."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_wait_for_disconnect(request))
    expired = asyncio.ensure_future(drain.expired.wait())
    try:
        await asyncio.wait({task, watch, expired}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        expired.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        if drain.expired.is_set():
            return JSONResponse(drain.error().body(), status_code=503)
        return Response(status_code=499)  # nobody is listening
    result = task.result()
    if isinstance(result, dict):
        return JSONResponse(result)
    return ClosingStreamingResponse(result, drain)


async def _wait_for_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def run_server(
    args: FrontendArgs, config: VGraphConfig, sock: socket.socket, log_stats: bool = True
) -> int:
    """Start the engine core, then serve on the already bound sock until SIGINT/SIGTERM;
    returns the exit code."""
    import uvicorn

    engine = AsyncLLM(config)
    try:
        log_resolved_config(config, engine)
        app = build_app(engine, args, log_stats)
        server = DrainingServer(
            uvicorn.Config(
                app,
                host=args.host,
                port=args.port,
                log_level=args.uvicorn_log_level,
                access_log=not args.disable_uvicorn_access_log,
                ssl_keyfile=args.ssl_keyfile,
                ssl_certfile=args.ssl_certfile,
            ),
            app.state.drain,
        )
        scheme = "https" if args.ssl_certfile else "http"
        port = sock.getsockname()[1]  # the one bound: --port 0 picks a free port
        logger.info("serving %s on %s://%s:%d", config.model_config.name, scheme, args.host, port)
        asyncio.run(_serve(server, engine, args.engine_death_grace, sock))
        return 0 if server.started and not engine.is_dead else 1
    finally:
        engine.shutdown()


async def _log_stats_every(stats_line: LoggingStatLogger) -> None:
    interval = log_stats_interval()
    while True:
        await asyncio.sleep(interval)  # a timer, not a wait for an event: the line is periodic
        stats_line.log()


async def _serve(server: Any, engine: AsyncLLM, grace_s: float, sock: socket.socket) -> None:
    watcher = asyncio.create_task(_stop_after_engine_death(server, engine, grace_s))
    try:
        await server.serve(sockets=[sock])
    finally:
        watcher.cancel()


async def _stop_after_engine_death(server: Any, engine: AsyncLLM, grace_s: float) -> None:
    """A dead engine core ends the server: /health says 503 for grace_s, then exit status 1."""
    await engine.wait_dead()
    logger.error("engine core is dead; /health answers 503, the server exits in %.0f s", grace_s)
    await asyncio.sleep(grace_s)
    server.should_exit = True
