"""`vgraph bench latency`: one engine step per cudagraph mode and batch size, side by side.

For each requested mode an in-process engine core is built (start-up time and graph memory are
recorded), then hand-built steps run through `ModelRunner.execute_model`: a decode step of B
requests whose KV cache was really prefilled (context_len tokens each), and a mixed step (decodes
plus one prefill chunk). A step's time includes input preparation, the forward (replayed or
eager), sampling and the device-to-host copy, as the engine pays it. Warm-up first, then the
median of many steps. Prints a table and writes JSON (after every mode, so a run cut short keeps
what it measured). A mode that fails is recorded with its error and the next one runs.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import time
import traceback
from datetime import datetime, timezone
from typing import Any

import torch

from vgraph.config import VGraphConfig
from vgraph.core.scheduler import SchedulerOutput
from vgraph.engine.core import EngineCore
from vgraph.request import Request
from vgraph.sampling_params import SamplingParams

ALL_MODES = ["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]


def add_cli_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--model", default="SmolLM2-135M", help="folder or shipped config name")
    p.add_argument("--load-format", default="dummy", choices=["auto", "safetensors", "dummy"])
    p.add_argument("--dtype", default="auto")
    p.add_argument("--attention-backend", default="auto")
    p.add_argument("--modes", nargs="+", default=ALL_MODES, help="cudagraph modes to compare")
    p.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 8, 32, 128])
    p.add_argument("--context-len", type=int, default=128, help="prefilled tokens per request")
    p.add_argument("--mixed", default="4+60", help="mixed step: DECODES+CHUNK, '' to skip")
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--num-iters", type=int, default=100)
    p.add_argument("--num-warmup", type=int, default=10)
    p.add_argument("--out", default=None, help="write results as JSON here")
    return p


class _StepBuilder:
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

    def release(self) -> None:
        kv = self.core.scheduler.kv
        for rid in list(kv.req_to_blocks):
            kv.free_blocks.extend(kv.req_to_blocks.pop(rid))


def time_steps(core: EngineCore, sched: SchedulerOutput, warmup: int, iters: int) -> list[float]:
    """Milliseconds per execute_model call (each ends in a device-to-host copy, so synced)."""
    for _ in range(warmup):
        core.runner.execute_model(sched)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        core.runner.execute_model(sched)
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def bench_mode(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    config = VGraphConfig.create(
        args.model,
        load_format=args.load_format,
        dtype=args.dtype,
        attention_backend=args.attention_backend,
        max_model_len=args.max_model_len,
        max_num_seqs=max(max(args.batch_sizes), 8),
        compilation_config={"cudagraph_mode": mode},
    )
    core = EngineCore(config)
    startup_s = time.perf_counter() - t0
    b = _StepBuilder(core)
    result: dict[str, Any] = {
        "mode": mode,
        "resolved_mode": config.compilation_config.cudagraph_mode.name,
        "attention_backend": config.attention_backend,
        "startup_s": startup_s,
        "decode_ms": {},
        "runtime_modes": {},
    }
    for batch in args.batch_sizes:
        reqs = b.prefilled(batch, args.context_len)
        before = core.runner.counters()
        times = time_steps(core, b.step(reqs, [1] * batch), args.num_warmup, args.num_iters)
        result["decode_ms"][batch] = statistics.median(times)
        result["runtime_modes"][f"decode_{batch}"] = _used_mode(before, core.runner.counters())
        b.release()
    if args.mixed:
        decodes, chunk = (int(x) for x in args.mixed.split("+"))
        reqs = b.prefilled(decodes, args.context_len) + [b.request(chunk + 1)]
        before = core.runner.counters()
        sched = b.step(reqs, [1] * decodes + [chunk])
        times = time_steps(core, sched, args.num_warmup, args.num_iters)
        result["mixed_ms"] = statistics.median(times)
        result["runtime_modes"]["mixed"] = _used_mode(before, core.runner.counters())
        b.release()
    c = core.runner.counters()
    result.update(
        num_graphs=c["num_graphs"],
        capture_s=c["capture_seconds"],
        graph_memory_mib=c["graph_memory_bytes"] / 2**20,
    )
    stats = _compile_stats(core)
    if stats is not None:
        result.update(
            compile_s=stats.compile_seconds,
            compile_cache_hit=stats.cache_hit,
            num_pieces=stats.num_pieces,
        )
    del core, b
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return result


def _compile_stats(core: EngineCore) -> Any:
    """The piecewise compile's CompileStats (under the FULL wrapper, if any); None when eager."""
    model = core.runner.model_fn
    model = getattr(model, "runnable", model)
    return getattr(model, "stats", None)


def _used_mode(before: dict[str, float], after: dict[str, float]) -> str:
    used = [m for m in ("FULL", "PIECEWISE", "NONE") if after[f"steps_{m}"] > before[f"steps_{m}"]]
    return "+".join(used)


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


def print_table(model: str, results: list[dict[str, Any]], batch_sizes: list[int]) -> None:
    head = f"{'mode':<20}{'resolved':<20}" + "".join(f"{'B=' + str(b):>10}" for b in batch_sizes)
    head += f"{'mixed':>10}{'start s':>10}{'compile s':>10}{'graphs':>8}{'mem MiB':>10}"
    print(f"\n{model}: decode step latency, median ms")
    print(head)
    for r in results:
        if "error" in r:
            print(f"{r['mode']:<20}failed: {r['error']}")
            continue
        row = f"{r['mode']:<20}{r['resolved_mode']:<20}"
        row += "".join(f"{r['decode_ms'][b]:>10.3f}" for b in batch_sizes)
        row += f"{r.get('mixed_ms', float('nan')):>10.3f}{r['startup_s']:>10.1f}"
        row += f"{r.get('compile_s', 0.0):>10.1f}"
        row += f"{int(r['num_graphs']):>8}{r['graph_memory_mib']:>10.1f}"
        print(row)


def main(args: argparse.Namespace) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    report = _report(args, results)
    for mode in args.modes:
        try:
            results.append(bench_mode(args, mode))
        except Exception as e:  # one broken mode must not cost the others' numbers
            traceback.print_exc()
            results.append({"mode": mode, "error": f"{type(e).__name__}: {e}"})
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        report = _report(args, results)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(report, f, indent=2)
    print_table(args.model, results, args.batch_sizes)
    failed = [r["mode"] for r in results if "error" in r]
    if failed:
        raise SystemExit(f"bench latency: mode(s) {', '.join(failed)} failed")
    return report


def _report(args: argparse.Namespace, results: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "benchmark": "latency",
        "model": args.model,
        "load_format": args.load_format,
        "context_len": args.context_len,
        "mixed": args.mixed,
        "num_iters": args.num_iters,
        "environment": environment(),
        "results": results,
    }


if __name__ == "__main__":
    main(add_cli_args(argparse.ArgumentParser(description=__doc__)).parse_args())
