"""AsyncMPClient: the engine core process seen from asyncio (the server's AsyncLLM).

A reader task decodes the output socket into a queue (step outputs) and into futures (utility
replies); the process sentinel is watched with loop.add_reader, so a core that dies without a
word still ends every waiter with EngineDeadError within a fraction of a second. Sending stays
synchronous (a PUSH socket without a high-water mark never blocks once the core is connected).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import zmq.asyncio

from vgraph.config import VGraphConfig
from vgraph.engine.client import (
    OUTPUTS_DECODER,
    UTILITY_DECODER,
    EngineDeadError,
    MPClientBase,
)
from vgraph.engine.protocol import (
    EngineCoreOutputs,
    EngineCoreOutputType,
    EngineCoreRequestType,
    UtilityRequest,
)

logger = logging.getLogger(__name__)


class AsyncMPClient(MPClientBase):
    """asyncio: a reader task fills a queue; the sentinel is watched with loop.add_reader."""

    output_socket_cls = zmq.asyncio.Socket

    def __init__(self, config: VGraphConfig, transport: str | None = None) -> None:
        super().__init__(config, transport)
        self.queue: asyncio.Queue[EngineCoreOutputs | EngineDeadError] | None = None
        self.utility_futures: dict[int, asyncio.Future[Any]] = {}
        self.reader: asyncio.Task[None] | None = None
        self.dead_signalled = False

    def _start(self) -> None:
        """First use inside the running loop: start the reader, watch the sentinel."""
        loop = asyncio.get_running_loop()
        self.queue = asyncio.Queue()
        self.reader = loop.create_task(self._read_outputs())
        loop.add_reader(self.proc.sentinel, self._on_sentinel, loop)

    async def get_output_async(self) -> EngineCoreOutputs:
        if self.queue is None:
            self._start()
        item = await self.queue.get()
        if isinstance(item, EngineDeadError):
            self.queue.put_nowait(item)  # every later caller gets it too
            raise item
        return item

    async def call_utility_async(self, method: str, *args: Any) -> Any:
        if self.queue is None:
            self._start()
        call_id = next(self.call_ids)
        fut = self.utility_futures[call_id] = asyncio.get_running_loop().create_future()
        self.send(EngineCoreRequestType.UTILITY, UtilityRequest(call_id, method, list(args)))
        return await fut

    async def _read_outputs(self) -> None:
        try:
            while True:
                kind, payload = await self.output_socket.recv_multipart()
                if kind[0] == EngineCoreOutputType.OUTPUTS:
                    self.queue.put_nowait(OUTPUTS_DECODER.decode(payload))
                elif kind[0] == EngineCoreOutputType.UTILITY:
                    out = UTILITY_DECODER.decode(payload)
                    fut = self.utility_futures.pop(out.call_id, None)
                    if fut is not None and not fut.done():
                        if out.error is not None:
                            fut.set_exception(RuntimeError(out.error))
                        else:
                            fut.set_result(out.result)
                elif kind[0] == EngineCoreOutputType.DEAD:
                    self._set_dead(self.death_error(payload))
                    return
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a broken socket means a lost engine
            self._set_dead(EngineDeadError(f"engine core output stream failed: {e}"))

    def _on_sentinel(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.remove_reader(self.proc.sentinel)
        # a DEAD message (with the reason) may still be in flight: give the reader a moment
        loop.call_later(0.2, lambda: self._set_dead(self.death_error()))

    def _set_dead(self, err: EngineDeadError) -> None:
        if not self.dead_signalled:
            self.dead_signalled = True
            self.queue.put_nowait(err)
        for fut in self.utility_futures.values():
            if not fut.done():
                fut.set_exception(err)
        self.utility_futures.clear()

    def shutdown(self) -> None:
        if self.reader is not None:
            self.reader.cancel()
            try:
                asyncio.get_running_loop().remove_reader(self.proc.sentinel)
            except RuntimeError:  # no running loop: it is gone already
                pass
        super().shutdown()
