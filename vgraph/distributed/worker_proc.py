"""A tensor-parallel worker process: ranks 1..tp-1 of the model, driven by rank 0's broadcast.

Lifecycle (started by TPWorkers in the engine core, multiprocessing spawn):
  1. die with the engine core (PR_SET_PDEATHSIG), ignore Ctrl-C (the frontend decides);
  2. join the group, then the same start-up as rank 0, in the same order, because every
     collective must meet its peer: load the model (its shards), size the KV cache (the
     smallest of all ranks), capture the same graph keys;
  3. loop: receive a TPStep (msgspec over a ZMQ PULL socket) and run its forward with rank 0's
     dispatch decision; the logits are dropped (rank 0 samples);
  4. TPShutdown, SIGTERM or a vanished engine core: exit 0; any exception: log it and exit 1
     (the engine core's watchdog sees the exit and takes the engine down).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys

import zmq

from vgraph.config import VGraphConfig
from vgraph.distributed.messages import DECODER, TPShutdown
from vgraph.utils import thread_lock_for_progress_bars

logger = logging.getLogger(__name__)

IDLE_POLL_MS = 2000  # idle wake-up period: only to notice an engine core that died
PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Linux: the kernel sends SIGKILL when the engine core ends, however it ends."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _raise_system_exit(signum: int, frame: object) -> None:
    raise SystemExit(0)


def run_worker(config: VGraphConfig, rank: int, folder: str, parent_pid: int) -> None:
    """Entry point of the spawned worker. folder: the engine's private folder (rendezvous file
    and step sockets)."""
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _raise_system_exit)
    logging.basicConfig(
        level=logging.INFO,
        format=f"(TPWorker rank={rank} pid=%(process)d) %(levelname)s %(asctime)s %(name)s: "
        "%(message)s",
    )
    thread_lock_for_progress_bars()
    code = 1
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        from vgraph.distributed.parallel_state import init_tensor_parallel
        from vgraph.worker.model_runner import ModelRunner

        tp = config.parallel_config.tensor_parallel_size
        init_tensor_parallel(rank, tp, config.device, os.path.join(folder, "rendezvous"))
        sock.connect(f"ipc://{folder}/rank{rank}.sock")
        runner = ModelRunner(config)
        runner.load_model()
        runner.initialize_kv_cache()
        runner.capture_model()
        while True:
            if not sock.poll(IDLE_POLL_MS):
                if os.getppid() != parent_pid:
                    logger.warning("the engine core is gone; worker exiting")
                    break
                continue
            msg = DECODER.decode(sock.recv())
            if isinstance(msg, TPShutdown):
                break
            runner.execute_broadcast_step(msg)
        code = 0
    except SystemExit:
        code = 0
    except BaseException:
        logger.exception("tensor parallel worker rank %d failed", rank)
    finally:
        sock.close()
        ctx.term()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # skip tearing down torch (and a process group whose peers may be gone)
