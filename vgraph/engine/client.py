"""Frontend side of the engine core: requests in, outputs out.

InprocClient runs the core in this process (debugging, unit tests). MPClient (sync, for LLM) and
AsyncMPClient (asyncio, for the server; async_client.py) start the core in its own process
(core_proc.py) through MPClientBase and talk to it over ZMQ with msgspec msgpack. Both watch the
process sentinel: if the core dies, every waiting caller gets EngineDeadError at once, never a hang.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import multiprocessing
import os
import shutil
import weakref
from abc import ABC, abstractmethod
from collections import deque
from typing import Any

import msgspec
import zmq

from vgraph.config import VGraphConfig
from vgraph.engine.core_proc import ENCODER, make_addresses, run_engine_core
from vgraph.engine.protocol import (
    EngineCoreFailure,
    EngineCoreOutputs,
    EngineCoreOutputType,
    EngineCoreReady,
    EngineCoreRequest,
    EngineCoreRequestType,
    UtilityOutput,
    UtilityRequest,
)

logger = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = float(os.environ.get("VGRAPH_ENGINE_STARTUP_TIMEOUT", "900"))
SHUTDOWN_TIMEOUT_S = 5.0
SEND_TIMEOUT_MS = 5000  # a send blocks only until the core's input pipe is attached
OUTPUTS_DECODER = msgspec.msgpack.Decoder(EngineCoreOutputs)
UTILITY_DECODER = msgspec.msgpack.Decoder(UtilityOutput)
READY_DECODER = msgspec.msgpack.Decoder(EngineCoreReady)
FAILURE_DECODER = msgspec.msgpack.Decoder(EngineCoreFailure)


class EngineDeadError(RuntimeError):
    """The engine core process died; no request in flight can complete."""


class EngineCoreClient(ABC):
    @abstractmethod
    def add_request(self, request: EngineCoreRequest) -> None: ...

    @abstractmethod
    def abort_requests(self, request_ids: list[str]) -> None: ...

    @abstractmethod
    def get_output(self) -> EngineCoreOutputs:
        """The next step's outputs (blocks until the core produces some)."""

    @abstractmethod
    def shutdown(self) -> None: ...


def make_client(config: VGraphConfig, multiprocess: bool | None = None) -> EngineCoreClient:
    """MPClient unless multiprocess=False or VGRAPH_ENABLE_MULTIPROCESSING=0."""
    if multiprocess is None:
        multiprocess = os.environ.get("VGRAPH_ENABLE_MULTIPROCESSING", "1") != "0"
    return MPClient(config) if multiprocess else InprocClient(config)


class InprocClient(EngineCoreClient):
    def __init__(self, config: VGraphConfig) -> None:
        from vgraph.engine.core import EngineCore

        self.core = EngineCore(config)

    def add_request(self, request: EngineCoreRequest) -> None:
        self.core.add_request(request)

    def abort_requests(self, request_ids: list[str]) -> None:
        self.core.abort_requests(request_ids)

    def get_output(self) -> EngineCoreOutputs:
        return self.core.step()

    def shutdown(self) -> None:
        self.core.shutdown()


class BackgroundResources:
    """What the core process holds open; released once, by shutdown() or by the finalizer."""

    def __init__(self) -> None:
        self.ctx = zmq.Context()
        self.sockets: list[zmq.Socket] = []
        self.proc: multiprocessing.process.BaseProcess | None = None
        self.ipc_dir: str | None = None
        self.done = False

    def __call__(self) -> None:
        if self.done:
            return
        proc = self.proc
        if proc is not None and proc.is_alive():
            try:
                self.sockets[1].send_multipart(
                    [bytes([EngineCoreRequestType.SHUTDOWN]), b""], flags=zmq.NOBLOCK
                )
            except zmq.ZMQError:
                pass
            proc.join(SHUTDOWN_TIMEOUT_S)
            for stop in (proc.terminate, proc.kill):
                if proc.is_alive():
                    stop()
                    proc.join(SHUTDOWN_TIMEOUT_S)
        # done only once the process is reaped: a call interrupted above (a second Ctrl-C) is
        # finished by the next one, so the frontend never exits before its engine core
        self.done = True
        for sock in self.sockets:
            with contextlib.suppress(Exception):  # an async socket whose loop is gone
                sock.close(linger=0)
        self.ctx.term()
        if self.ipc_dir is not None:
            shutil.rmtree(self.ipc_dir, ignore_errors=True)


class MPClientBase:
    """Start the core process, wait for READY, and send to it. Subclasses read its outputs."""

    output_socket_cls: type[zmq.Socket] = zmq.Socket

    def __init__(self, config: VGraphConfig, transport: str | None = None) -> None:
        transport = transport or os.environ.get("VGRAPH_ENGINE_TRANSPORT", "ipc")
        res = self.resources = BackgroundResources()
        self._finalizer = weakref.finalize(self, res)
        addresses, res.ipc_dir = make_addresses(transport)
        handshake = res.ctx.socket(zmq.PULL)
        self.input_socket = res.ctx.socket(zmq.PUSH)
        self.output_socket = self.output_socket_cls(res.ctx, zmq.PULL)
        res.sockets = [handshake, self.input_socket, self.output_socket]
        self.input_socket.setsockopt(zmq.SNDHWM, 0)
        self.input_socket.setsockopt(zmq.SNDTIMEO, SEND_TIMEOUT_MS)
        self.output_socket.setsockopt(zmq.RCVHWM, 0)
        bound = []
        for sock, addr in zip(res.sockets, addresses):
            sock.bind(addr)
            bound.append(sock.getsockopt_string(zmq.LAST_ENDPOINT))
        spawn = multiprocessing.get_context("spawn")
        res.proc = self.proc = spawn.Process(
            target=run_engine_core,
            args=(config, bound, os.getpid()),
            name="VGraphEngineCore",
            daemon=True,
        )
        self.dead_error: EngineDeadError | None = None
        self.call_ids = itertools.count()
        logger.info("starting the engine core process (%s transport)", transport)
        try:
            self.proc.start()
            self.ready = self._wait_for_ready(handshake)
        except BaseException:
            self._finalizer()  # the subclass is not built yet: release the base's resources
            raise
        logger.info(
            "engine core pid %d ready: %d KV blocks of %d tokens",
            self.proc.pid,
            self.ready.num_kv_blocks,
            self.ready.block_size,
        )

    def _wait_for_ready(self, handshake: zmq.Socket) -> EngineCoreReady:
        poller = zmq.Poller()
        poller.register(handshake, zmq.POLLIN)
        poller.register(self.proc.sentinel, zmq.POLLIN)
        if not poller.poll(STARTUP_TIMEOUT_S * 1000):
            raise TimeoutError(
                f"engine core did not start in {STARTUP_TIMEOUT_S:.0f} s "
                f"(VGRAPH_ENGINE_STARTUP_TIMEOUT)"
            )
        if not handshake.poll(100):  # the process ended without a word
            self.proc.join(1.0)
            raise RuntimeError(
                f"engine core process exited with code {self.proc.exitcode} during start-up; "
                f"its log is above. The core is started with multiprocessing 'spawn', which "
                f"re-imports the main script: guard a script's top level with "
                f"`if __name__ == '__main__':`, or pass multiprocess=False"
            )
        kind, payload = handshake.recv_multipart()
        if kind[0] == EngineCoreOutputType.READY:
            return READY_DECODER.decode(payload)
        fail = FAILURE_DECODER.decode(payload)
        if fail.user_error:  # a user's mistake (a bad flag or model): keep its type and words
            raise ValueError(fail.message)
        raise RuntimeError(f"engine core failed to start: {fail.error_type}: {fail.message}")

    def send(self, kind: EngineCoreRequestType, message: Any) -> None:
        if self.dead_error is not None:
            raise self.dead_error
        if not self.proc.is_alive():  # a cheap waitpid: fail now, not after SEND_TIMEOUT_MS
            raise self.death_error()
        try:
            self.input_socket.send_multipart([bytes([kind]), ENCODER.encode(message)])
        except zmq.Again:
            raise EngineDeadError("engine core is not receiving requests") from None

    def add_request(self, request: EngineCoreRequest) -> None:
        self.send(EngineCoreRequestType.ADD, request)

    def abort_requests(self, request_ids: list[str]) -> None:
        # a dead core has nothing left to abort (and raising here would hide the first error)
        if request_ids and self.dead_error is None and self.proc.is_alive():
            self.send(EngineCoreRequestType.ABORT, request_ids)

    def death_error(self, payload: bytes | None = None) -> EngineDeadError:
        if payload is not None:
            fail = FAILURE_DECODER.decode(payload)
            msg = f"engine core died: {fail.error_type}: {fail.message}"
        else:
            msg = f"engine core process died (exit code {self.proc.exitcode})"
        self.dead_error = self.dead_error or EngineDeadError(msg)
        return self.dead_error

    def decode_output(self, frames: list[bytes]) -> EngineCoreOutputs | UtilityOutput | None:
        """One message from the output socket: a step's outputs or a utility reply (None for a
        type this frontend does not know). A DEAD message raises EngineDeadError with its reason."""
        kind, payload = frames
        if kind[0] == EngineCoreOutputType.OUTPUTS:
            return OUTPUTS_DECODER.decode(payload)
        if kind[0] == EngineCoreOutputType.UTILITY:
            return UTILITY_DECODER.decode(payload)
        if kind[0] == EngineCoreOutputType.DEAD:
            raise self.death_error(payload)
        return None

    def shutdown(self) -> None:
        # a request after this is told why nothing serves it (not that the core "died")
        self.dead_error = self.dead_error or EngineDeadError("the engine was shut down")
        self.resources()  # not the finalizer: that runs once even if interrupted; this retries


class MPClient(MPClientBase, EngineCoreClient):
    """Synchronous: get_output() blocks on the output socket and the process sentinel together."""

    def __init__(self, config: VGraphConfig, transport: str | None = None) -> None:
        super().__init__(config, transport)
        self.pending: deque[EngineCoreOutputs] = deque()  # outputs read while awaiting a utility
        self.poller = zmq.Poller()
        self.poller.register(self.output_socket, zmq.POLLIN)
        self.poller.register(self.proc.sentinel, zmq.POLLIN)

    def get_output(self) -> EngineCoreOutputs:
        while not self.pending:
            self._receive()
        return self.pending.popleft()

    def call_utility(self, method: str, *args: Any) -> Any:
        call_id = next(self.call_ids)
        self.send(EngineCoreRequestType.UTILITY, UtilityRequest(call_id, method, list(args)))
        while True:
            out = self._receive()
            if out is not None and out.call_id == call_id:
                if out.error is not None:
                    raise RuntimeError(out.error)
                return out.result

    def _receive(self) -> UtilityOutput | None:
        if self.dead_error is not None:
            raise self.dead_error
        events = dict(self.poller.poll())
        # only the sentinel: the process is gone (unless its last words are still in flight)
        if self.output_socket not in events and not self.output_socket.poll(100):
            raise self.death_error()
        message = self.decode_output(self.output_socket.recv_multipart())
        if isinstance(message, EngineCoreOutputs):
            self.pending.append(message)
            return None
        return message
