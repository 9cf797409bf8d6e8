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
from vgraph.engine.client import EngineDeadError, MPClientBase
from vgraph.engine.protocol import (
    EngineCoreOutputs,
    EngineCoreRequestType,
    UtilityOutput,
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
                message = self.decode_output(await self.output_socket.recv_multipart())
                if isinstance(message, EngineCoreOutputs):
                    self.queue.put_nowait(message)
                elif isinstance(message, UtilityOutput):
                    fut = self.utility_futures.pop(message.call_id, None)
                    if fut is not None and not fut.done():
                        if message.error is not None:
                            fut.set_exception(RuntimeError(message.error))
                        else:
                            fut.set_result(message.result)
        except asyncio.CancelledError:
            raise
        except EngineDeadError as e:  # a DEAD message, with the core's reason
            self._set_dead(e)
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
