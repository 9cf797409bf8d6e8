"""What the in-process benchmarks share: hand-built decode steps over a really prefilled KV cache,
timing of several engines in turns, the compile statistics of an engine, and the machine's
description for the JSON. Used by `vgraph bench step`, `vgraph bench sweep` and tools/; it
starts no engine itself.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

import torch

from vgraph.attention.selector import backend_names
from vgraph.config import VGraphConfig
from vgraph.core.scheduler import SchedulerOutput
from vgraph.engine.arg_utils import create_engine_config
from vgraph.engine.core import EngineCore
from vgraph.request import Request
from vgraph.sampling_params import SamplingParams

BLOCK_SIZE = 16  # KV block size of every benchmark engine


def add_engine_args(p: argparse.ArgumentParser) -> None:
    """The model and how to load it, common to the in-process benchmarks."""
    p.add_argument("--model", default="SmolLM2-135M", help="folder or shipped config name")
    p.add_argument("--load-format", default="dummy", choices=["auto", "safetensors", "dummy"])
    p.add_argument("--dtype", default="auto")
    p.add_argument(
        "--attention-backend", default="auto", help=f"auto or one of {', '.join(backend_names())}"
    )


def engine_config(args: argparse.Namespace, **kwargs: Any) -> VGraphConfig:
    """The config of one benchmark engine: add_engine_args' values, BLOCK_SIZE, and kwargs.
    Synchronous scheduling unless kwargs say otherwise: these benchmarks time steps one by one
    (ModelRunner.execute_model), the path of a step that does not overlap the next."""
    kwargs.setdefault("async_scheduling", False)
    return create_engine_config(
        args.model,
        load_format=args.load_format,
        dtype=args.dtype,
        attention_backend=args.attention_backend,
        block_size=BLOCK_SIZE,
        **kwargs,
    )


class StepBuilder:
    """Fake requests with real KV blocks, prefilled once, then stepped without advancing."""

    def __init__(self, core: EngineCore, seed: int = 0) -> None:
        self.core = core
        self.gen = torch.Generator().manual_seed(seed)
        self.vocab = core.config.model_config.vocab_size
        self.next_id = 0

    def request(self, num_tokens: int) -> Request:
        ids = torch.randint(0, self.vocab, (num_tokens,), generator=self.gen).tolist()
        req = Request(f"bench-{self.next_id}", ids, SamplingParams(temperature=0), frozenset())
        self.next_id += 1
        assert self.core.scheduler.kv.allocate_slots(req, num_tokens) is not None, "KV too small"
        return req

    def step(self, reqs: list[Request], num_scheduled: list[int]) -> SchedulerOutput:
        kv = self.core.scheduler.kv
        return SchedulerOutput(
            requests=reqs,
            num_scheduled_tokens=num_scheduled,
            block_ids=[kv.get_block_ids(r.request_id) for r in reqs],
        )

    def prefilled(self, batch: int, context_len: int) -> list[Request]:
        """batch requests whose first context_len tokens are in the KV cache."""
        reqs = [self.request(context_len + 1) for _ in range(batch)]
        per_step = max(1, self.core.config.scheduler_config.max_num_batched_tokens // context_len)
        for i in range(0, batch, per_step):
            chunk = reqs[i : i + per_step]
            self.core.runner.execute_model(self.step(chunk, [context_len] * len(chunk)))
        for r in reqs:
            r.num_computed_tokens = context_len
        return reqs


def time_in_turns(
    calls: Sequence[Callable[[], object]],
    num_iters: int,
    num_warmup: int,
    block: int = 10,
    setups: Sequence[Callable[[], object]] | None = None,
    rng: random.Random | None = None,
) -> list[list[float]]:
    """ms of every timed call, per callable: warm-up, then blocks of `block` calls, the callables
    in turn, so that a slow spell of the host falls on all of them alike. setups[i] runs, untimed,
    before each call of calls[i] (e.g. a shared engine switched to that caller's state); with rng
    the order of the callables is shuffled every turn, so that none always follows the same one."""
    setups = setups or [_nothing] * len(calls)
    for call, setup in zip(calls, setups):
        for _ in range(num_warmup):
            setup()
            call()
    times: list[list[float]] = [[] for _ in calls]
    order = list(range(len(calls)))
    for start in range(0, num_iters, block):
        if rng is not None:
            rng.shuffle(order)
        for i in order:
            for _ in range(min(block, num_iters - start)):
                setups[i]()
                t0 = time.perf_counter()
                calls[i]()  # a step ends in a device-to-host copy: no sync needed
                times[i].append((time.perf_counter() - t0) * 1e3)
    return times


def _nothing() -> None:
    pass


def p10_p90(values: list[float]) -> list[float]:
    if len(values) < 2:
        return [values[0], values[0]]
    q = statistics.quantiles(values, n=10)
    return [q[0], q[-1]]


def compile_stats(core: EngineCore) -> Any:
    """The piecewise compile's CompileStats (under the FULL wrapper, if any); None when eager."""
    model = core.runner.model_fn
    model = getattr(model, "runnable", model)
    return getattr(model, "stats", None)


def startup_result(core: EngineCore, startup_s: float) -> dict[str, Any]:
    """Start-up figures of a started engine: resolved mode, seconds, graphs and their memory."""
    config, g = core.config, core.runner.graph_stats
    result: dict[str, Any] = {
        "resolved_mode": config.compilation_config.cudagraph_mode.name,
        "attention_backend": config.attention_backend,
        "startup_s": startup_s,
        "num_graphs": g.num_graphs,
        "capture_s": g.capture_seconds,
        "graph_memory_mib": g.graph_memory_bytes / 2**20,
    }
    stats = compile_stats(core)
    if stats is not None:
        result.update(
            compile_s=stats.compile_seconds,
            compile_cache_hit=stats.cache_hit,
            num_pieces=stats.num_pieces,
        )
    return result


def used_mode(before: dict[str, int], after: dict[str, int]) -> str:
    """Runtime modes whose step count grew between two GraphStats.steps readings."""
    return "+".join(m for m in ("FULL", "PIECEWISE", "NONE") if after[m] > before[m])


def environment() -> dict[str, Any]:
    env = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
    }
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
        env["cuda"] = torch.version.cuda
    return env
