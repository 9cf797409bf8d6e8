"""Start a real `vgraph serve` subprocess for tests, and poll it; no fixed sleeps anywhere.

ServerProcess runs `python -m vgraph.entrypoints.cli serve MODEL` on 127.0.0.1 and a free port,
with its log in a file and TMPDIR pointed at a test folder (so the engine's private IPC folder can
be checked for removal). wait_until() polls a condition with a deadline.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")

# Small and fast: a short context, a small KV pool, no per-request log lines.
SERVE_ARGS = [
    "--max-model-len",
    "256",
    "--num-gpu-blocks-override",
    "2048",
    "--disable-access-log",
    "--uvicorn-log-level",
    "warning",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(fn: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """fn() until it returns something truthy, or fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def children_of(pid: int) -> list[int]:
    """Live direct children of pid (from /proc)."""
    kids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            kids.append(int(entry.name))
    return kids


def cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def pid_alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class ServerProcess:
    def __init__(
        self, model: Path | str, workdir: Path, *args: str, env: dict[str, str] | None = None
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tmpdir = workdir / "tmp"
        self.tmpdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "server.log"
        named = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--served-model-name"]
        self.model_name = named[-1] if named else Path(model).name
        # one intra-op thread: on a busy 2-core machine a second torch thread that is not
        # scheduled makes each small op wait milliseconds
        full_env = {
            **os.environ,
            "TMPDIR": str(self.tmpdir),
            "PYTHONPATH": str(REPO),
            "OMP_NUM_THREADS": "1",
        }
        full_env.pop("VGRAPH_API_KEY", None)
        full_env.update(env or {})
        cmd = [
            sys.executable,
            "-m",
            "vgraph.entrypoints.cli",
            "serve",
            str(model),
            "--port",
            str(self.port),
            *SERVE_ARGS,
            *args,
        ]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env, cwd=workdir
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def health(self) -> int | None:
        try:
            return httpx.get(f"{self.url}/health", timeout=5).status_code
        except httpx.HTTPError:
            return None

    def wait_healthy(self, timeout: float = 180) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            return self.health() == 200

        wait_until(ready, timeout, "the server's /health", interval=0.2)

    def engine_pid(self) -> int:
        pids = [p for p in children_of(self.proc.pid) if "spawn_main" in cmdline(p)]
        assert len(pids) == 1, [cmdline(p) for p in children_of(self.proc.pid)]
        return pids[0]

    def stop(self, timeout: float = 60, sig: signal.Signals = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode
