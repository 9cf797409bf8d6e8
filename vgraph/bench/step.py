"""`vgraph bench step`: one engine step per cudagraph mode and batch size, side by side.

An in-process engine core is built for every requested mode (start-up time, compile time and
graph memory are recorded), and all of them stay alive: each gets a KV cache of just the blocks
the benchmark uses. Hand-built steps run through `ModelRunner.execute_model`: a decode step of B
requests whose KV cache was really prefilled (context_len tokens each), and a mixed step (decodes
plus one prefill chunk). A step's time includes input preparation, the forward (replayed or
eager), sampling and the device-to-host copy, as the engine pays it without async scheduling (the
engines here schedule synchronously; benchmarks/bench_async_scheduling.py times the engine loop
with and without it).

The modes are timed in turns, a block of steps each, round after round, so that a slow spell of
the host (eager steps are bound by it) falls on every mode alike rather than on whichever ran
then. Warm-up first; the median of all steps is quoted, with the 10th and 90th percentiles.
Prints a table and writes JSON (after start-up and again at the end). A mode that fails to start
is recorded with its error and the others still run. On CUDA every step is then profiled: kernels
per step and GPU time per kernel family (vgraph/bench/kernels.py) go into the JSON.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import torch

from vgraph.bench.args import nonneg_int, positive_int
from vgraph.bench.common import (
    BLOCK_SIZE,
    StepBuilder,
    add_engine_args,
    engine_config,
    environment,
    p10_p90,
    startup_result,
    time_in_turns,
    used_mode,
)
from vgraph.bench.kernels import profile_kernels
from vgraph.core.scheduler import SchedulerOutput
from vgraph.engine.core import EngineCore
from vgraph.utils import cdiv

ALL_MODES = ["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]


def add_cli_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    add_engine_args(p)
    p.add_argument("--modes", nargs="+", default=ALL_MODES, help="cudagraph modes to compare")
    p.add_argument("--batch-sizes", nargs="+", type=positive_int, default=[1, 8, 32, 128])
    p.add_argument(
        "--context-len", type=positive_int, default=128, help="prefilled tokens per request"
    )
    p.add_argument(
        "--mixed", type=mixed_spec, default="4+60", help="mixed step: DECODES+CHUNK, '' to skip"
    )
    p.add_argument("--max-model-len", type=positive_int, default=2048)
    p.add_argument("--num-iters", type=positive_int, default=100)
    p.add_argument("--num-warmup", type=nonneg_int, default=10)
    p.add_argument("--out", default=None, help="write results as JSON here")
    p.add_argument(
        "--no-kernel-profile",
        dest="kernel_profile",
        action="store_false",
        help="skip the per-step kernel count and GPU time per kernel family (CUDA only)",
    )
    return p


@dataclass
class _ModeRun:
    """One mode's live engine, its prepared steps and what was measured."""

    mode: str
    core: EngineCore
    steps: dict[str, SchedulerOutput]  # "decode_<B>" and "mixed"
    result: dict[str, Any]
    times: dict[str, list[float]] = field(default_factory=dict)  # ms per step
    modes_used: dict[str, str] = field(default_factory=dict)  # step -> runtime mode(s)


def blocks_needed(args: argparse.Namespace) -> int:
    """KV blocks of every request the benchmark prefills, with a little room (and at least one
    max_model_len request's worth, which the engine checks for)."""
    per_req = cdiv(args.context_len + 1, BLOCK_SIZE)
    n = sum(args.batch_sizes) * per_req
    if args.mixed:
        decodes, chunk = parse_mixed(args.mixed)
        n += decodes * per_req + cdiv(chunk + 1, BLOCK_SIZE)
    return max(n + 8, cdiv(args.max_model_len, BLOCK_SIZE))


def parse_mixed(spec: str) -> tuple[int, int]:
    """'DECODES+CHUNK' -> (decodes, chunk): decode requests >= 0 and a prefill chunk >= 1."""
    try:
        decodes, chunk = (int(x) for x in spec.split("+"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{spec!r} is not DECODES+CHUNK, e.g. 4+60 ('' skips the mixed step)"
        ) from None
    if decodes < 0 or chunk < 1:
        raise argparse.ArgumentTypeError(f"{spec!r}: use DECODES >= 0 and CHUNK >= 1")
    return decodes, chunk


def mixed_spec(text: str) -> str:
    """--mixed as argparse checks it: '' or a valid DECODES+CHUNK, kept as given."""
    if text:
        parse_mixed(text)
    return text


def check_sizes(args: argparse.Namespace) -> None:
    """Every request the steps build must fit --max-model-len: a decode request holds
    context_len + 1 tokens, the mixed step's prefill chunk + 1 (its next token's slot)."""
    limit = args.max_model_len
    if args.context_len + 1 > limit:
        raise SystemExit(
            f"bench step: --context-len {args.context_len} needs --max-model-len >= "
            f"{args.context_len + 1} (a decode request holds context + 1 tokens); got {limit}"
        )
    chunk = parse_mixed(args.mixed)[1] if args.mixed else 0
    if chunk + 1 > limit:
        raise SystemExit(
            f"bench step: --mixed {args.mixed}: a prefill chunk of {chunk} tokens needs "
            f"--max-model-len >= {chunk + 1}; got {limit}"
        )


def start_mode(args: argparse.Namespace, mode: str) -> _ModeRun:
    t0 = time.perf_counter()
    mixed_reqs = parse_mixed(args.mixed)[0] + 1 if args.mixed else 0
    config = engine_config(
        args,
        max_model_len=args.max_model_len,
        max_num_seqs=max(max(args.batch_sizes), mixed_reqs, 8),
        num_gpu_blocks_override=blocks_needed(args),
        compilation_config={"cudagraph_mode": mode},
    )
    core = EngineCore(config)
    result = {"mode": mode} | startup_result(core, time.perf_counter() - t0)
    b = StepBuilder(core)
    steps = {}
    for batch in args.batch_sizes:
        steps[f"decode_{batch}"] = b.step(b.prefilled(batch, args.context_len), [1] * batch)
    if args.mixed:
        decodes, chunk = parse_mixed(args.mixed)
        reqs = b.prefilled(decodes, args.context_len) + [b.request(chunk + 1)]
        steps["mixed"] = b.step(reqs, [1] * decodes + [chunk])
    return _ModeRun(mode, core, steps, result)


def measure(runs: list[_ModeRun], args: argparse.Namespace, block: int = 10) -> None:
    """Every step of every mode: warm-up, then blocks of `block` steps, the modes in turn."""
    for name in runs[0].steps:
        before = [dict(run.core.runner.graph_stats.steps) for run in runs]
        calls = [lambda r=run.core.runner, s=run.steps[name]: r.execute_model(s) for run in runs]
        for run, times in zip(runs, time_in_turns(calls, args.num_iters, args.num_warmup, block)):
            run.times[name] = times
        for run, steps in zip(runs, before):
            run.modes_used[name] = used_mode(steps, run.core.runner.graph_stats.steps)


def profile_runs(runs: list[_ModeRun]) -> None:
    """Kernels per step and GPU time per kernel family, for every step of every mode."""
    for run in runs:
        for name, sched in run.steps.items():
            k = profile_kernels(lambda r=run.core.runner, s=sched: r.execute_model(s))
            run.result.setdefault("kernels", {})[name] = k
            families = ", ".join(
                f"{f} {v['kernels']:.0f}x {v['us']:.0f} us ({v.get('wall_us', 0):.0f} busy)"
                for f, v in list(k["families"].items())[:5]
            )
            print(
                f"{run.mode:<20}{name:<12}{k['kernels_per_step']:6.0f} kernels "
                f"{k['gpu_us_per_step']:8.1f} us GPU, {k.get('busy_us_per_step', 0):6.1f} busy, "
                f"{k.get('idle_us_per_step', 0):5.1f} idle  ({families})"
            )


def summarize(run: _ModeRun) -> dict[str, Any]:
    r = dict(run.result)
    r["decode_ms"] = {
        int(k.split("_")[1]): statistics.median(v)
        for k, v in run.times.items()
        if k.startswith("decode_")
    }
    if "mixed" in run.times:
        r["mixed_ms"] = statistics.median(run.times["mixed"])
    r["percentiles_ms"] = {k: p10_p90(v) for k, v in run.times.items()}
    r["samples_ms"] = dict(run.times)  # every timed step, in the order it ran
    r["runtime_modes"] = dict(run.modes_used)
    return r


def print_table(model: str, results: list[dict[str, Any]], batch_sizes: list[int]) -> None:
    head = f"{'mode':<20}{'resolved':<20}" + "".join(f"{'B=' + str(b):>10}" for b in batch_sizes)
    head += f"{'mixed':>10}{'mixed ran':>19}"
    head += f"{'start s':>10}{'compile s':>10}{'graphs':>8}{'mem MiB':>10}"
    print(f"\n{model}: decode step latency, median ms")
    print(head)
    for r in results:
        if "error" in r:
            print(f"{r['mode']:<20}failed: {r['error']}")
            continue
        if "decode_ms" not in r:  # started, not measured
            continue
        row = f"{r['mode']:<20}{r['resolved_mode']:<20}"
        row += "".join(f"{r['decode_ms'][b]:>10.3f}" for b in batch_sizes)
        row += f"{r.get('mixed_ms', float('nan')):>10.3f}"
        row += f"{r.get('runtime_modes', {}).get('mixed', '-'):>19}{r['startup_s']:>10.1f}"
        row += f"{r.get('compile_s', 0.0):>10.1f}"
        row += f"{int(r['num_graphs']):>8}{r['graph_memory_mib']:>10.1f}"
        print(row)


def main(args: argparse.Namespace) -> dict[str, Any]:
    repeated = sorted({m for m in args.modes if args.modes.count(m) > 1})
    if repeated:
        raise SystemExit(f"bench step: --modes lists {', '.join(repeated)} more than once")
    check_sizes(args)
    runs: list[_ModeRun] = []
    failed: list[dict[str, Any]] = []
    for mode in args.modes:
        try:
            runs.append(start_mode(args, mode))
        except Exception as e:  # one broken mode must not cost the others' numbers
            traceback.print_exc()
            failed.append({"mode": mode, "error": f"{type(e).__name__}: {e}"})
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    _write(args, [r.result for r in runs] + failed)
    if runs:
        measure(runs, args)
        if args.kernel_profile and torch.cuda.is_available():
            profile_runs(runs)
    by_mode = {r.mode: summarize(r) for r in runs} | {f["mode"]: f for f in failed}
    results = [by_mode[m] for m in args.modes]
    report = _write(args, results)
    print_table(args.model, results, args.batch_sizes)
    if failed:
        raise SystemExit(f"bench step: mode(s) {', '.join(f['mode'] for f in failed)} failed")
    return report


def _write(args: argparse.Namespace, results: list[dict[str, Any]]) -> dict[str, Any]:
    report = build_report(args, results)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
    return report


def build_report(args: argparse.Namespace, results: list[dict[str, Any]]) -> dict[str, Any]:
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
