"""The worker ranks of one engine, seen from rank 0 (the engine core): start, feed, watch, stop.

1. a private folder (0700): the rendezvous file and one IPC socket per worker;
2. ranks 1..tp-1 spawned (vgraph/distributed/worker_proc.py); they die with the engine core;
3. `broadcast(TPStep)`: the same msgpack bytes pushed to every worker, before rank 0's forward;
4. a watchdog thread waits on the workers' process sentinels: a worker that exits while the
   engine runs kills the others (no collective can finish without it) and calls on_death,
   which the engine process uses to report the engine dead and exit at once, even while its
   main thread waits in a collective that will never complete;
5. `shutdown()`: stop the watchdog, TPShutdown to every worker, join (terminate, kill), remove
   the folder.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import shutil
import tempfile
import threading
from collections.abc import Callable

import zmq

from vgraph.config import VGraphConfig
from vgraph.distributed.messages import ENCODER, TPShutdown, TPStep
from vgraph.distributed.worker_proc import run_worker

logger = logging.getLogger(__name__)
JOIN_TIMEOUT_S = 5.0


def allow_children() -> None:
    """The engine core runs as a daemonic process (it dies with the frontend), and multiprocessing
    refuses children to daemonic processes. The flag only matters to this process's own view of
    itself (the frontend still treats the core as daemonic); the workers are reaped by shutdown()
    and by PR_SET_PDEATHSIG, not by multiprocessing's exit hook."""
    me = multiprocessing.current_process()
    if me.daemon:
        me.daemon = False


class TPWorkers:
    def __init__(self, config: VGraphConfig, on_death: Callable[[str], None] | None = None) -> None:
        self.on_death = on_death
        self.folder = tempfile.mkdtemp(prefix="vgraph-tp-")
        self.rendezvous_file = os.path.join(self.folder, "rendezvous")
        self.dead_reason: str | None = None
        self.died = threading.Event()  # set with dead_reason
        self.stopping = False
        tp = config.parallel_config.tensor_parallel_size
        self.ctx = zmq.Context()
        self.sockets: list[zmq.Socket] = []
        for rank in range(1, tp):
            sock = self.ctx.socket(zmq.PUSH)
            sock.setsockopt(zmq.SNDHWM, 0)
            sock.setsockopt(zmq.LINGER, 0)
            sock.bind(f"ipc://{self.folder}/rank{rank}.sock")
            self.sockets.append(sock)
        allow_children()
        spawn = multiprocessing.get_context("spawn")
        self.procs = [
            spawn.Process(
                target=run_worker,
                args=(config, rank, self.folder, os.getpid()),
                name=f"VGraphTPWorker-{rank}",
                daemon=True,
            )
            for rank in range(1, tp)
        ]
        for proc in self.procs:
            proc.start()
        logger.info(
            "started %d tensor parallel worker(s): pids %s",
            len(self.procs),
            [p.pid for p in self.procs],
        )
        self._stop_r, self._stop_w = os.pipe()
        self.watchdog = threading.Thread(target=self._watch, name="tp-watchdog", daemon=True)
        self.watchdog.start()

    def broadcast(self, step: TPStep) -> None:
        data = ENCODER.encode(step)
        for sock in self.sockets:
            sock.send(data)

    def check_alive(self, wait_s: float = 0.0) -> None:
        """Raise RuntimeError naming the dead rank if one died (waiting up to wait_s for the
        watchdog to notice: a failed collective usually reports before the sentinel does)."""
        if wait_s:
            self.died.wait(wait_s)
        if self.dead_reason is not None:
            raise RuntimeError(self.dead_reason)

    def _watch(self) -> None:
        by_sentinel = {p.sentinel: (rank, p) for rank, p in enumerate(self.procs, start=1)}
        ready = multiprocessing.connection.wait([*by_sentinel, self._stop_r])
        if self._stop_r in ready or self.stopping:
            return
        rank, proc = by_sentinel[ready[0]]
        proc.join(JOIN_TIMEOUT_S)
        self.dead_reason = (
            f"tensor parallel worker rank {rank} (pid {proc.pid}) died with exit code "
            f"{proc.exitcode}"
        )
        self.died.set()
        logger.error("%s; stopping the other ranks", self.dead_reason)
        self.kill()
        if self.on_death is not None:
            self.on_death(self.dead_reason)

    def kill(self) -> None:
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
            proc.join(JOIN_TIMEOUT_S)

    def shutdown(self) -> None:
        self.stopping = True
        os.write(self._stop_w, b"x")
        if self.watchdog is not threading.current_thread():
            self.watchdog.join(JOIN_TIMEOUT_S)
        for sock in self.sockets:
            with contextlib.suppress(zmq.ZMQError):
                sock.send(ENCODER.encode(TPShutdown()), zmq.NOBLOCK)
        for proc in self.procs:
            proc.join(JOIN_TIMEOUT_S)
            for stop in (proc.terminate, proc.kill):
                if proc.is_alive():
                    stop()
                    proc.join(JOIN_TIMEOUT_S)
        for sock in self.sockets:
            sock.close(linger=0)
        self.ctx.term()
        for fd in (self._stop_r, self._stop_w):
            os.close(fd)
        shutil.rmtree(self.folder, ignore_errors=True)
