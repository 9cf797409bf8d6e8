"""Tensor parallelism: greedy identity of tp=N against tp=1, and decode step latency per graph mode
at tp=1 and tp=N, for each model (dummy weights, the same numbers at every tp size).

  1. identity: `LLM(tensor_parallel_size=tp)` for tp=1 and tp=N on the same prompts (random token
     ids), greedy, per dtype: float32 (the order of the all-reduce's sums is the only difference:
     the tokens should be identical) and the GPU's bfloat16 (reported: where the first token
     differs, if one does; dummy weights give near-tied logits, so bf16 may diverge late).
  2. latency: for tp in (1, N), for each mode, an in-process EngineCore (rank 0 in this process,
     ranks 1.. in its workers; one engine at a time: a process holds one tensor-parallel group);
     decode steps of B requests over a prefilled KV cache (vgraph.bench.common.StepBuilder),
     timed as `vgraph bench step` times them (inputs, forward or replay, sampling, the copy
     to the host; on rank 0, which waits for the other ranks in every all-reduce); median ms.
Prints a table per model and writes JSON (--out). On the CPU it runs too (gloo), slowly: tests
and CI use a tiny model. GPU run (two GPUs):

    VGRAPH_ENABLE_MULTIPROCESSING=0 python benchmarks/bench_tp.py \
        --models Llama-3.2-1B Qwen3-0.6B --out benchmarks/results/tp.json
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
import traceback
from typing import Any

import torch

from vgraph import LLM, SamplingParams
from vgraph.bench.common import BLOCK_SIZE, StepBuilder, environment, p10_p90, used_mode
from vgraph.engine.arg_utils import create_engine_config
from vgraph.engine.core import EngineCore
from vgraph.utils import cdiv


def identity(args: argparse.Namespace, model: str, dtype: str) -> dict[str, Any]:
    rng = random.Random(0)
    vocab = create_engine_config(model, load_format="dummy").model_config.vocab_size
    prompts = [[rng.randrange(vocab) for _ in range(n)] for n in (5, 37, 120, 9)]
    params = SamplingParams(temperature=0, max_tokens=args.identity_tokens, ignore_eos=True)
    tokens = {}
    for tp in (1, args.tp):
        llm = LLM(
            model,
            load_format="dummy",
            dtype=dtype,
            max_model_len=args.max_model_len,
            tensor_parallel_size=tp,
            multiprocess=False,
            # FULL decode graphs (the all-reduce captured); prefills eager: no compile to wait for
            compilation_config={
                "cudagraph_mode": "FULL_DECODE_ONLY",
                "cudagraph_capture_sizes": [1, 2, 4, 8],
            },
        )
        try:
            outs = llm.generate(prompts, params, use_tqdm=False)
            tokens[tp] = [o.outputs[0].token_ids for o in outs]
        finally:
            llm.shutdown()
            gc.collect()
    first_diff = [
        next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), None)
        for x, y in zip(tokens[1], tokens[args.tp])
    ]
    return {
        "dtype": dtype,
        "identical": tokens[1] == tokens[args.tp],
        "first_divergence": first_diff,  # per prompt: index of the first differing token
        "num_tokens": args.identity_tokens,
    }


def latency(args: argparse.Namespace, model: str, tp: int, mode: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    per_req = cdiv(args.context_len + 1, BLOCK_SIZE)
    config = create_engine_config(
        model,
        load_format="dummy",
        block_size=BLOCK_SIZE,
        max_model_len=args.max_model_len,
        max_num_seqs=max(args.batch_sizes),
        num_gpu_blocks_override=max(
            sum(args.batch_sizes) * per_req + 8, cdiv(args.max_model_len, BLOCK_SIZE)
        ),
        tensor_parallel_size=tp,
        compilation_config={"cudagraph_mode": mode, "cudagraph_capture_sizes": args.batch_sizes},
    )
    core = EngineCore(config)
    result: dict[str, Any] = {
        "tp": tp,
        "mode": mode,
        "resolved_mode": config.compilation_config.cudagraph_mode.name,
        "startup_s": time.perf_counter() - t0,
        "num_graphs": core.runner.graph_stats.num_graphs,
    }
    try:
        b = StepBuilder(core)
        runner = core.runner
        for batch in args.batch_sizes:
            sched = b.step(b.prefilled(batch, args.context_len), [1] * batch)
            for _ in range(args.num_warmup):
                runner.execute_model(sched)
            before = dict(runner.graph_stats.steps)
            times = []
            for _ in range(args.num_iters):
                t = time.perf_counter()
                runner.execute_model(sched)  # ends in a device-to-host copy: no sync needed
                times.append((time.perf_counter() - t) * 1e3)
            result.setdefault("decode_ms", {})[batch] = statistics.median(times)
            result.setdefault("percentiles_ms", {})[batch] = p10_p90(times)
            result.setdefault("runtime_modes", {})[batch] = used_mode(
                before, runner.graph_stats.steps
            )
    finally:
        core.shutdown()
        del core
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return result


def print_table(model: str, rows: list[dict[str, Any]], batch_sizes: list[int]) -> None:
    print(f"\n{model}: decode step latency, median ms")
    print(f"{'tp':<4}{'mode':<20}" + "".join(f"{'B=' + str(b):>10}" for b in batch_sizes))
    for r in rows:
        if "error" in r:
            print(f"{r['tp']:<4}{r['mode']:<20}failed: {r['error']}")
            continue
        cells = "".join(f"{r['decode_ms'][b]:>10.3f}" for b in batch_sizes)
        print(f"{r['tp']:<4}{r['mode']:<20}{cells}")


def main(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {
        "benchmark": "tensor_parallel",
        "tp": args.tp,
        "context_len": args.context_len,
        "num_iters": args.num_iters,
        "environment": environment(),
        "models": {},
    }

    def write() -> None:
        if args.out:
            with open(args.out, "w") as f:
                json.dump(report, f, indent=2)

    for model in args.models:
        entry: dict[str, Any] = {"identity": [], "latency": []}
        report["models"][model] = entry
        for dtype in args.identity_dtypes:
            try:
                entry["identity"].append(identity(args, model, dtype))
            except Exception as e:  # noqa: BLE001 - recorded; the other runs still go
                traceback.print_exc()
                entry["identity"].append({"dtype": dtype, "error": f"{type(e).__name__}: {e}"})
            print(f"{model} identity tp=1 vs tp={args.tp}: {entry['identity'][-1]}")
            write()
        for tp in (1, args.tp):
            for mode in args.modes:
                try:
                    entry["latency"].append(latency(args, model, tp, mode))
                except Exception as e:  # noqa: BLE001 - recorded; the other runs still go
                    traceback.print_exc()
                    entry["latency"].append(
                        {"tp": tp, "mode": mode, "error": f"{type(e).__name__}: {e}"}
                    )
                write()
        print_table(model, entry["latency"], args.batch_sizes)
    return report


def add_cli_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--models", nargs="+", default=["Llama-3.2-1B", "Qwen3-0.6B"])
    p.add_argument("--tp", type=int, default=2, help="the tensor parallel size against tp=1")
    p.add_argument(
        "--modes",
        nargs="+",
        default=["NONE", "PIECEWISE", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"],
    )
    p.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 16, 64])
    p.add_argument("--context-len", type=int, default=128, help="prefilled tokens per request")
    p.add_argument("--max-model-len", type=int, default=1024)
    p.add_argument("--num-iters", type=int, default=50)
    p.add_argument("--num-warmup", type=int, default=5)
    p.add_argument("--identity-dtypes", nargs="*", default=["float32", "bfloat16"])
    p.add_argument("--identity-tokens", type=int, default=32)
    p.add_argument("--out", default=None, help="write results as JSON here")
    return p


if __name__ == "__main__":
    main(add_cli_args(argparse.ArgumentParser(description=__doc__)).parse_args())
