"""Reading a POST body for `vgraph serve`: media type, size, bytes -> JSON, in that order.

1. Content-Type must be application/json (parameters such as charset allowed), else 415: a
   browser sends text/plain or form bodies cross-origin without a preflight, so accepting them
   would let any web page drive a local server.
2. A declared Content-Length past the limit is answered 413 at once, from the header alone, and
   the connection is closed once the client stopped sending (LingeringCloseResponse); a body
   that grows past the limit while streaming (chunked) is read and dropped up to DRAIN_FACTOR
   limits, so the client sees the 413 rather than a reset.
3. The bytes must be UTF-8 JSON without NaN/Infinity, and no string (key or value) may hold a
   lone UTF-16 surrogate (`"\\ud800"` escapes): such text cannot be encoded, tokenized or echoed.
A client that goes away mid-body raises starlette's ClientDisconnect (the server ends that
request quietly). Errors quote at most a short prefix of what the client sent.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from vgraph.entrypoints.openai.protocol import APIError, brief

DRAIN_FACTOR = 64  # an oversized body is read (and dropped) up to this many limits, then cut
LINGER_S = 10.0  # after an early 413, how long the rest of the body is read before closing
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # only a \u escape can make one in JSON


async def read_json(request: Request, limit: int) -> Any:
    """The request body as JSON; 415 if not sent as JSON, 413 past `limit` bytes, else 400."""
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise APIError(
            f"Content-Type must be application/json, got {brief(media_type, 40) or 'none'!r}",
            415,
            code="unsupported_media_type",
        )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit, close=True)
    chunks, total = [], 0
    async for chunk in request.stream():
        total += len(chunk)
        if total <= limit:
            chunks.append(chunk)
        elif total > DRAIN_FACTOR * limit:  # stop reading; the connection will be dropped
            raise _too_large(limit, close=True)
    if total > limit:
        raise _too_large(limit, close=False)
    try:
        text = b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as e:
        raise APIError(f"request body is not valid UTF-8: {e}") from None
    try:
        body = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        raise APIError(f"request body is not valid JSON: {brief(str(e), 200)}") from None
    if _SURROGATE_ESCAPE.search(text):
        where = find_lone_surrogate(body)
        if where is not None:
            raise APIError(
                f"{where}: contains a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff "
                f"escape), which is not valid Unicode text",
                param=where,
            )
    return body


class RequestTooLarge(APIError):
    """413; `close`: answer before reading the rest of the body, then drop the connection."""

    def __init__(self, message: str, close: bool, limit: int = 0) -> None:
        super().__init__(message, 413, code="request_too_large")
        self.close = close
        self.limit = limit


class LingeringCloseResponse(JSONResponse):
    """The 413 sent at once, then the connection closed only after the client stopped sending.

    Closing a socket whose receive buffer still holds the client's body makes the kernel send a
    reset, which can destroy the 413 before the client has read it (a race that uvicorn's
    httptools protocol loses more often than h11). So: headers and the whole JSON body first
    (Content-Length set: the answer is complete), then read and drop what the client still
    sends, up to DRAIN_FACTOR limits or LINGER_S seconds, then end the response (Connection:
    close). nginx calls this a lingering close.
    """

    def __init__(self, content: Any, limit: int) -> None:
        super().__init__(content, status_code=413, headers={"Connection": "close"})
        self.drain_bytes = DRAIN_FACTOR * limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 413, "headers": self.raw_headers})
        await send({"type": "http.response.body", "body": self.body, "more_body": True})
        deadline = asyncio.get_running_loop().time() + LINGER_S
        read = 0
        while read <= self.drain_bytes:
            left = deadline - asyncio.get_running_loop().time()
            try:
                message = await asyncio.wait_for(receive(), max(left, 0.0))
            except asyncio.TimeoutError:
                break
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
            read += len(message.get("body", b""))
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _too_large(limit: int, close: bool) -> RequestTooLarge:
    return RequestTooLarge(
        f"request body is larger than the limit of {limit} bytes (--max-request-body-bytes)",
        close,
        limit,
    )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def find_lone_surrogate(value: Any) -> str | None:
    """Dotted path (shortened) of the first string, key or value, that holds a lone surrogate."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return path or "body"
        elif isinstance(item, dict):
            for key, child in item.items():
                if _SURROGATE.search(key):
                    return path or "body"
                stack.append((child, f"{path}.{brief(key, 40)}" if path else brief(key, 40)))
        elif isinstance(item, list):
            stack.extend((child, f"{path}.{i}") for i, child in enumerate(item))
    return None
