"""ASGI middleware of `vgraph serve`, outermost first: CORS, request ids, the API key.

- CORS (Starlette's CORSMiddleware) is outermost, so a browser's preflight (OPTIONS, which
  carries no credentials) is answered before the API key is asked for, and errors carry the
  CORS headers too. vgraph allows no cross-origin use unless --allowed-origins says so (vLLM
  allows "*"): a local server must not be driven by whatever page a browser has open.
- RequestIdMiddleware: an incoming X-Request-Id names the request (the response's `id` is
  "chatcmpl-<X-Request-Id>" or "cmpl-<...>"); with --enable-request-id-headers the response
  echoes it, or a fresh id that the handler also uses when the client sent none.
- APIKeyMiddleware: 401 for every /v1 path without one of the keys, before any routing (the path
  as the router sees it: under --root-path too).
Plain ASGI callables rather than BaseHTTPMiddleware, which would break the disconnect watching
of server.respond() and stream responses through an extra task.
"""

from __future__ import annotations

import hmac
import re
import uuid
from typing import TYPE_CHECKING

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from vgraph.entrypoints.openai.protocol import APIError, brief

if TYPE_CHECKING:
    from vgraph.entrypoints.cli_args import FrontendArgs

REQUEST_ID_HEADER = b"x-request-id"
MAX_REQUEST_ID = 128
_REQUEST_ID = re.compile(r"[\x21-\x7e]+")  # visible ASCII: it goes into ids, logs and headers


class APIKeyMiddleware:
    """401 for every /v1 path without `Authorization: Bearer <key>` (any of the keys), before
    any routing."""

    def __init__(self, app: ASGIApp, api_keys: list[str]) -> None:
        self.app = app
        self.expected = [f"Bearer {key}".encode() for key in api_keys]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = route_path(scope)
        if scope["type"] == "http" and (path == "/v1" or path.startswith("/v1/")):
            got = dict(scope["headers"]).get(b"authorization", b"")
            # every key is compared (constant time each), so timing tells nothing of which
            if not sum(hmac.compare_digest(got, key) for key in self.expected):
                err = APIError(
                    "missing or incorrect API key; send `Authorization: Bearer <key>`",
                    401,
                    code="invalid_api_key",
                )
                await JSONResponse(err.body(), status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def route_path(scope: Scope) -> str:
    """The path the router matches: without the root path (--root-path) when it starts with it,
    as Starlette's routing takes it, so that /ROOT/v1/... is guarded as /v1/... is."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    if root and path.startswith(root) and (len(path) == len(root) or path[len(root)] == "/"):
        return path[len(root) :]
    return path


class RequestIdMiddleware:
    """Gives every HTTP request an X-Request-Id (a fresh one if it came without) and echoes it
    on the response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = list(scope["headers"])
        request_id = dict(headers).get(REQUEST_ID_HEADER)
        if request_id is None:
            request_id = uuid.uuid4().hex.encode()
            scope = {**scope, "headers": [*headers, (REQUEST_ID_HEADER, request_id)]}
        valid = _valid_request_id(request_id.decode("latin-1"))  # else the handler says 400

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start" and valid:
                message = {
                    **message,
                    "headers": [*message.get("headers", []), (REQUEST_ID_HEADER, request_id)],
                }
            await send(message)

        await self.app(scope, receive, send_with_id)


def request_id_of(request: Request) -> str | None:
    """The client's X-Request-Id, checked: it becomes part of the response id."""
    value = request.headers.get("x-request-id")
    if value is None:
        return None
    if not _valid_request_id(value):
        raise APIError(
            f"X-Request-Id {brief(value, 40)!r} is not allowed; use 1 to {MAX_REQUEST_ID} "
            "visible ASCII characters",
            param="X-Request-Id",
        )
    return value


def _valid_request_id(value: str) -> bool:
    return len(value) <= MAX_REQUEST_ID and _REQUEST_ID.fullmatch(value) is not None


def add_middleware(app: FastAPI, args: FrontendArgs) -> None:
    """The last added runs first: API key, then request ids, then CORS outermost."""
    if args.api_key:
        app.add_middleware(APIKeyMiddleware, api_keys=args.api_key)
    if args.enable_request_id_headers:
        app.add_middleware(RequestIdMiddleware)
    app.add_middleware(
        CORSMiddleware,
        allow_origins=args.allowed_origins,
        allow_methods=args.allowed_methods,
        allow_headers=args.allowed_headers,
        allow_credentials=args.allow_credentials,
    )
