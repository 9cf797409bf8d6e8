"""Graceful shutdown of `vgraph serve`: the drain window, and how requests still open at its end
are answered.

1. SIGINT/SIGTERM: uvicorn stops accepting connections; DrainingServer.shutdown() starts the
   drain timer (--graceful-shutdown-timeout seconds) while uvicorn waits for open requests.
2. Requests that finish in the window are answered normally.
3. When the timer fires, Drain.expired is set and every request still open ends itself: its
   handler is cancelled (which aborts its engine requests) and the client gets an OpenAI error,
   a 503 body (respond() in server.py) or, mid-stream, an error event and `data: [DONE]`
   (ClosingStreamingResponse).
4. uvicorn's own deadline is DRAIN_MARGIN_S later, so it never has to cancel an ASGI task (that
   would log a traceback and send a plain-text 500). Then the lifespan stops the engine core.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import uvicorn
from fastapi.responses import StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from vgraph.entrypoints.openai.protocol import APIError
from vgraph.entrypoints.openai.serving_engine import SSE_DONE, sse

DRAIN_MARGIN_S = 5.0  # after the drain: time for cancelled handlers to send their errors


class Drain:
    """The end of the graceful-shutdown window, as an event that request handlers watch."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.expired = asyncio.Event()

    def start(self) -> None:
        asyncio.get_running_loop().call_later(max(self.timeout_s, 0.0), self.expired.set)

    @staticmethod
    def error() -> APIError:
        return APIError(
            "the server is shutting down; this request did not finish within "
            "--graceful-shutdown-timeout and was cancelled",
            503,
            code="server_shutting_down",
        )


class DrainingServer(uvicorn.Server):
    """uvicorn.Server that starts the drain when its shutdown starts."""

    def __init__(self, config: uvicorn.Config, drain: Drain) -> None:
        config.timeout_graceful_shutdown = drain.timeout_s + DRAIN_MARGIN_S  # type: ignore[assignment]
        super().__init__(config)
        self.drain = drain

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.drain.start()
        await super().shutdown(sockets)


class ClosingStreamingResponse(StreamingResponse):
    """An SSE response that closes its body iterator however it ends (so its requests are
    aborted at once) and, when the drain expires mid-stream, ends with an error event and
    `data: [DONE]` instead of a cut connection."""

    def __init__(self, content: Any, drain: Drain) -> None:
        super().__init__(content, media_type="text/event-stream")
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sent = {"start": False, "end": False}

        async def tracked(message: Message) -> None:
            if message["type"] == "http.response.start":
                sent["start"] = True
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                sent["end"] = True

        serve = asyncio.ensure_future(super().__call__(scope, receive, tracked))
        expired = asyncio.ensure_future(self.drain.expired.wait())
        try:
            await asyncio.wait({serve, expired}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            expired.cancel()
            if not serve.done():
                serve.cancel()
                await asyncio.gather(serve, return_exceptions=True)
            await self.body_iterator.aclose()  # type: ignore[attr-defined]
        if not serve.cancelled():
            serve.result()  # re-raise what the stream raised
            return
        if sent["end"]:
            return
        if not sent["start"]:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        for event in (sse(self.drain.error().body()), SSE_DONE):
            await send({"type": "http.response.body", "body": event.encode(), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
