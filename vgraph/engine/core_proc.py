"""The engine core process: ZMQ sockets around EngineCore, a busy loop, clean exit, death notice.

Started by the frontend (multiprocessing, spawn) through `run_engine_core`. Lifecycle:
  1. connect the handshake, input and output sockets (the frontend bound them);
  2. build the EngineCore; send READY (EngineCoreReady) or STARTUP_ERROR and exit 1;
  3. busy loop: drain the input socket (ADD, ABORT, UTILITY, SHUTDOWN), step while there is work,
     block on the socket while idle (never spin); every step's EngineCoreOutputs go out;
  4. SHUTDOWN, SIGTERM or a vanished frontend: leave the loop and exit 0;
     any exception in the loop: send DEAD (EngineCoreFailure) and exit 1;
     a tensor-parallel worker that dies: its watchdog sends DEAD (STARTUP_ERROR before READY)
     from a socket of its own and exits 1 at once (`report_worker_death`): the main thread may
     be waiting in a collective the dead rank will never join.
A bad ADD ends only that request: an EngineCoreOutput with finish_reason "error". Every message is
a msgspec Struct in msgpack behind a one-byte type frame; nothing is pickled on a socket (the
frozen VGraphConfig reaches the child once, as a spawn argument, through multiprocessing). This file
must not know about HTTP, tokenizers or the frontend's request bookkeeping.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
import zmq

if TYPE_CHECKING:
    from vgraph.config import VGraphConfig
    from vgraph.engine.core import EngineCore

from vgraph.engine.protocol import (
    EngineCoreFailure,
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreOutputType,
    EngineCoreReady,
    EngineCoreRequest,
    EngineCoreRequestType,
    UtilityOutput,
    UtilityRequest,
)
from vgraph.utils import thread_lock_for_progress_bars

logger = logging.getLogger(__name__)

IDLE_POLL_MS = 2000  # idle wake-up period: only to notice a frontend that died without a word
ENCODER = msgspec.msgpack.Encoder()
ADD_DECODER = msgspec.msgpack.Decoder(EngineCoreRequest)
ABORT_DECODER = msgspec.msgpack.Decoder(list[str])
UTILITY_DECODER = msgspec.msgpack.Decoder(UtilityRequest)


def make_addresses(transport: str) -> tuple[list[str], str | None]:
    """Bind addresses for (handshake, input, output) and the private IPC folder (or None).

    ipc: socket files in a fresh folder of mode 0700 (mkdtemp), removed by the frontend at exit.
    tcp: 127.0.0.1 with ports chosen at bind time (the frontend reads them back).
    """
    if transport == "ipc":
        folder = tempfile.mkdtemp(prefix="vgraph-")
        return [f"ipc://{folder}/{n}.sock" for n in ("handshake", "input", "output")], folder
    if transport == "tcp":
        return ["tcp://127.0.0.1:*"] * 3, None
    raise ValueError(f"engine transport={transport!r} is not allowed; use 'ipc' or 'tcp'")


class EngineCoreProc:
    """The busy loop over an EngineCore-like object (step/add_request/abort_requests/stats)."""

    def __init__(
        self,
        core: EngineCore,
        input_socket: zmq.Socket,
        output_socket: zmq.Socket,
        parent_pid: int | None = None,
    ) -> None:
        self.core = core
        self.input = input_socket
        self.output = output_socket
        self.parent_pid = parent_pid
        self.shutdown_requested = False
        self.parent_gone = False
        self.utilities: dict[str, Callable[..., Any]] = {
            "ping": lambda: "pong",
            "get_stats": lambda: msgspec.to_builtins(msgspec.structs.asdict(core.stats())),
        }

    def run(self) -> int:
        """Serve until shutdown; returns the process exit code (DEAD is sent on a failure)."""
        try:
            self.run_busy_loop()
            return 0
        except SystemExit:  # SIGTERM
            return 0
        except BaseException as e:  # whatever broke the loop is fatal
            logger.exception("engine core died")
            self.send(EngineCoreOutputType.DEAD, failure(e))
            return 1

    def run_busy_loop(self) -> None:
        while not self.shutdown_requested:
            self.process_input(block=not self.core.has_unfinished_requests())
            if self.shutdown_requested:
                break
            if self.core.has_unfinished_requests():
                self.send(EngineCoreOutputType.OUTPUTS, self.core.step())

    def process_input(self, block: bool) -> None:
        """Handle every waiting message; if block, first wait for one (at most IDLE_POLL_MS)."""
        timeout, aborted = (IDLE_POLL_MS if block else 0), False
        while self.input.poll(timeout):
            timeout = 0
            aborted |= self.handle(self.input.recv_multipart())
            if self.shutdown_requested:
                return
        if aborted and not self.core.has_unfinished_requests():
            # no step will follow to report the freed blocks: send the stats alone
            self.send(
                EngineCoreOutputType.OUTPUTS, EngineCoreOutputs(scheduler_stats=self.core.stats())
            )
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            logger.warning("the frontend process is gone; engine core exiting")
            self.shutdown_requested = self.parent_gone = True

    def handle(self, frames: list[bytes]) -> bool:
        """One message; returns True if it aborted requests."""
        if len(frames) != 2 or len(frames[0]) != 1:
            logger.warning("dropped a malformed message of %d frames", len(frames))
            return False
        kind, payload = frames[0][0], frames[1]
        if kind == EngineCoreRequestType.ADD:
            self.add_request(payload)
        elif kind == EngineCoreRequestType.ABORT:
            try:
                self.core.abort_requests(ABORT_DECODER.decode(payload))
                return True
            except msgspec.MsgspecError as e:
                logger.warning("dropped a malformed ABORT: %s", e)
        elif kind == EngineCoreRequestType.UTILITY:
            self.call_utility(payload)
        elif kind == EngineCoreRequestType.SHUTDOWN:
            self.shutdown_requested = True
        else:
            logger.warning("dropped a message of unknown type %d", kind)
        return False

    def add_request(self, payload: bytes) -> None:
        try:
            request = ADD_DECODER.decode(payload)
        except msgspec.MsgspecError as e:
            request_id = request_id_of(payload)
            if request_id is None:
                logger.warning("dropped an ADD without a request id: %s", e)
            else:
                self.send_error(request_id, f"invalid request: {e}")
            return
        try:
            self.core.add_request(request)
        except Exception as e:  # noqa: BLE001 - admission errors end this request only
            self.send_error(request.request_id, str(e))

    def send_error(self, request_id: str, message: str) -> None:
        out = EngineCoreOutput(request_id, [], finish_reason="error", error=message)
        self.send(EngineCoreOutputType.OUTPUTS, EngineCoreOutputs([out], self.core.stats()))

    def call_utility(self, payload: bytes) -> None:
        try:
            call = UTILITY_DECODER.decode(payload)
        except msgspec.MsgspecError as e:
            logger.warning("dropped a malformed UTILITY call: %s", e)
            return
        fn = self.utilities.get(call.method)
        if fn is None:
            out = UtilityOutput(
                call.call_id,
                error=f"unknown utility method {call.method!r}; allowed: {sorted(self.utilities)}",
            )
        else:
            try:
                out = UtilityOutput(call.call_id, result=fn(*call.args))
            except Exception as e:  # noqa: BLE001 - a failed call is reported, not fatal
                out = UtilityOutput(call.call_id, error=f"{type(e).__name__}: {e}")
        self.send(EngineCoreOutputType.UTILITY, out)

    def send(self, kind: EngineCoreOutputType, message: msgspec.Struct) -> None:
        self.output.send_multipart([bytes([kind]), ENCODER.encode(message)])


def request_id_of(payload: bytes) -> str | None:
    """The request id of an EngineCoreRequest that failed typed decoding, if it has one."""
    try:
        raw = msgspec.msgpack.decode(payload)
    except msgspec.MsgspecError:
        return None
    return raw[0] if isinstance(raw, list) and raw and isinstance(raw[0], str) else None


def failure(e: BaseException) -> EngineCoreFailure:
    """A user's mistake is a ValueError (a bad flag or model); anything else is the engine's."""
    user_error = isinstance(e, ValueError)
    return EngineCoreFailure(type(e).__name__, str(e), traceback.format_exc(), user_error)


def _raise_system_exit(signum: int, frame: object) -> None:
    raise SystemExit(0)


def report_worker_death(address: str, kind: EngineCoreOutputType, reason: str) -> None:
    """On the TP watchdog thread: tell the frontend (a fresh context, so the main thread's
    sockets are not touched from here), then end the process (the watchdog has killed the other
    workers already)."""
    logger.error("engine core exiting: %s", reason)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 2000)
    sock.connect(address)
    sock.send_multipart(
        [bytes([kind]), ENCODER.encode(EngineCoreFailure("TPWorkerDied", reason, "", False))]
    )
    sock.close()
    ctx.term()
    logging.shutdown()
    os._exit(1)


def run_engine_core(config: VGraphConfig, addresses: list[str], parent_pid: int) -> None:
    """Entry point of the spawned process. config: VGraphConfig; addresses: handshake/in/out."""
    # Ctrl-C reaches the whole process group: the frontend decides when the core stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _raise_system_exit)
    logging.basicConfig(
        level=logging.INFO,
        format="(EngineCore pid=%(process)d) %(levelname)s %(asctime)s %(name)s: %(message)s",
    )
    thread_lock_for_progress_bars()
    ctx = zmq.Context()
    handshake, inp, out = (ctx.socket(t) for t in (zmq.PUSH, zmq.PULL, zmq.PUSH))
    for sock, addr in zip((handshake, inp, out), addresses):
        sock.setsockopt(zmq.LINGER, 2000)  # flush a last DEAD / STARTUP_ERROR, but never hang
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.connect(addr)
    code = 1
    ready_sent = threading.Event()

    def on_worker_death(reason: str) -> None:
        if ready_sent.is_set():
            report_worker_death(addresses[2], EngineCoreOutputType.DEAD, reason)
        report_worker_death(addresses[0], EngineCoreOutputType.STARTUP_ERROR, reason)

    try:
        try:
            from vgraph.engine.core import EngineCore

            core = EngineCore(config, on_worker_death)
        except BaseException as e:  # reported to the frontend, which raises it
            logger.exception("engine core failed to start")
            handshake.send_multipart(
                [bytes([EngineCoreOutputType.STARTUP_ERROR]), ENCODER.encode(failure(e))]
            )
            return
        mc = config.model_config
        ready = EngineCoreReady(
            core.scheduler.kv.num_blocks,
            config.cache_config.block_size,
            mc.max_model_len,
            mc.vocab_size,
        )
        handshake.send_multipart([bytes([EngineCoreOutputType.READY]), ENCODER.encode(ready)])
        ready_sent.set()
        proc = EngineCoreProc(core, inp, out, parent_pid)
        code = proc.run()
        core.shutdown()
        if proc.parent_gone and addresses[0].startswith("ipc://"):  # nobody else will clean up
            shutil.rmtree(os.path.dirname(addresses[0][len("ipc://") :]), ignore_errors=True)
    finally:
        for sock in (handshake, inp, out):
            sock.close()
        ctx.term()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        # Everything is released; skip tearing down torch's modules (seconds on a busy machine).
        os._exit(code)
