"""Prefix caching and cascade attention on the GPU: prints tables and writes one JSON.

  ttft    time to first token of a second request sharing a --prefix-len prefix with the first,
          prefix caching on vs off; engine core in its own process (LLM.generate with
          max_tokens=1, so the wall time of the call is the TTFT plus one round trip).
  decode  step time of N decode requests sharing a P-token prefix, cascade attention forced on
          vs off, over --prefix-lens x --num-reqs, in --mode (FULL_AND_PIECEWISE by default: the
          plain steps replay FULL graphs, cascade steps run PIECEWISE, which is the real trade).
          The smallest prefix where cascade wins at the most requests and the fewest requests
          where it wins at the longest prefix are the cost rule's thresholds
          (vgraph/attention/cascade.py MIN_PREFIX_TOKENS / MIN_NUM_REQS).
Usage: python benchmarks/bench_prefix_cache.py --model Llama-3.2-1B --out results/x.json
Runs on the CPU too (slowly; use small sizes), so CI can smoke-test it.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
from typing import Any

import torch

from vgraph import LLM, SamplingParams
from vgraph.attention.cascade import MIN_NUM_REQS, MIN_PREFIX_TOKENS, CascadeCostRule
from vgraph.bench.common import environment


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def release(llm: LLM) -> None:
    llm.shutdown()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def engine_kwargs(args: argparse.Namespace, max_len: int) -> dict[str, Any]:
    return dict(
        load_format=args.load_format,
        max_model_len=max_len,
        max_num_seqs=max(max(args.num_reqs), 8),
        max_num_batched_tokens=max(8192, max_len),
    )


def bench_ttft(args: argparse.Namespace) -> dict[str, Any]:
    """Median TTFT of the second of two requests sharing a prefix, caching on and off."""
    rng = random.Random(0)
    one = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    result: dict[str, Any] = {}
    for caching in (False, True):
        llm = LLM(
            args.model,
            multiprocess=True,
            enable_prefix_caching=caching,
            **engine_kwargs(args, args.prefix_len + 64),
        )
        vocab = llm.config.model_config.vocab_size
        times = []
        for i in range(args.num_warmup + args.num_iters):
            prefix = [rng.randrange(vocab) for _ in range(args.prefix_len)]  # fresh: no old hits
            llm.generate([prefix + [rng.randrange(vocab) for _ in range(16)]], one, use_tqdm=False)
            second = prefix + [rng.randrange(vocab) for _ in range(16)]
            t0 = time.perf_counter()
            out = llm.generate([second], one, use_tqdm=False)[0]
            if i >= args.num_warmup:
                times.append(time.perf_counter() - t0)
        release(llm)
        key = "on" if caching else "off"
        result[key] = {
            "ttft_ms_median": 1e3 * statistics.median(times),
            "ttft_ms": [1e3 * t for t in times],
            "num_cached_tokens": out.num_cached_tokens,
        }
    result["speedup"] = result["off"]["ttft_ms_median"] / result["on"]["ttft_ms_median"]
    print(f"\nTTFT of a second request sharing a {args.prefix_len}-token prefix ({args.model})")
    print(f"{'prefix caching':>15} {'TTFT ms':>9} {'cached':>7}")
    for key in ("off", "on"):
        r = result[key]
        print(f"{key:>15} {r['ttft_ms_median']:9.2f} {r['num_cached_tokens']:7d}")
    print(f"speedup {result['speedup']:.1f}x (target: 5x)")
    return result


def time_decode(llm: LLM, prompts: list[list[int]], cascade: bool, iters: int) -> float:
    """Median seconds of a decode step of these requests (all decoding, all sharing a prefix)."""
    core = llm.engine.client.core
    runner = core.runner
    runner.cascade_rule = CascadeCostRule(0, 0) if cascade else None
    params = SamplingParams(temperature=0, max_tokens=iters + 8, ignore_eos=True)
    ids = [f"decode-{cascade}-{i}-{time.monotonic_ns()}" for i in range(len(prompts))]
    for rid, p in zip(ids, prompts):
        llm.engine.add_tokenized(rid, None, p, params)
    while core.scheduler.waiting or any(
        r.num_computed_tokens < r.num_prompt_tokens for r in core.scheduler.running
    ):
        core.step()
    core.step()  # every request now decodes
    times = []
    for _ in range(iters):
        sync()
        t0 = time.perf_counter()
        core.step()
        sync()
        times.append(time.perf_counter() - t0)
    llm.engine.abort_request(ids)  # the frontend's records and the core's requests
    core.step()
    return statistics.median(times)


def bench_decode(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(1)
    max_len = max(args.prefix_lens) + 64 + args.num_iters
    llm = LLM(
        args.model,
        multiprocess=False,
        enable_cascade_attention=True,
        compilation_config={"cudagraph_mode": args.mode},
        **engine_kwargs(args, max_len),
    )
    vocab = llm.config.model_config.vocab_size
    rows = []
    print(f"\nDecode step time, cascade off vs on ({args.model}, {args.mode})")
    print(f"{'prefix':>7} {'reqs':>5} {'off ms':>8} {'on ms':>8} {'speedup':>8}")
    for prefix_len in args.prefix_lens:
        prefix = [rng.randrange(vocab) for _ in range(prefix_len)]
        for n in args.num_reqs:
            prompts = [prefix + [rng.randrange(vocab) for _ in range(8)] for _ in range(n)]
            off = time_decode(llm, prompts, False, args.num_iters)
            on = time_decode(llm, prompts, True, args.num_iters)
            rows.append(
                {
                    "prefix_len": prefix_len,
                    "num_reqs": n,
                    "off_ms": off * 1e3,
                    "on_ms": on * 1e3,
                    "speedup": off / on,
                }
            )
            print(f"{prefix_len:7d} {n:5d} {off * 1e3:8.3f} {on * 1e3:8.3f} {off / on:8.2f}")
    g = llm.engine.client.core.runner.graph_stats
    release(llm)
    wins = [r for r in rows if r["speedup"] > 1.0]
    most = max(args.num_reqs)
    longest = max(args.prefix_lens)
    min_prefix = min((r["prefix_len"] for r in wins if r["num_reqs"] == most), default=None)
    min_reqs = min((r["num_reqs"] for r in wins if r["prefix_len"] == longest), default=None)
    print(
        f"cascade wins from prefix {min_prefix} at {most} requests and from {min_reqs} "
        f"requests at prefix {longest} (current rule: {MIN_PREFIX_TOKENS} tokens, "
        f"{MIN_NUM_REQS} requests); cascade fallbacks counted: {g.eager_fallbacks['cascade']}"
    )
    return {
        "mode": args.mode,
        "rows": rows,
        "switch": {"min_prefix_tokens": min_prefix, "min_num_reqs": min_reqs},
        "rule_now": {"min_prefix_tokens": MIN_PREFIX_TOKENS, "min_num_reqs": MIN_NUM_REQS},
        "cascade_fallback_steps": g.eager_fallbacks["cascade"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="SmolLM2-135M")
    p.add_argument("--load-format", default="dummy")
    p.add_argument("--sections", nargs="+", default=["ttft", "decode"])
    p.add_argument("--prefix-len", type=int, default=2048, help="ttft: shared prefix tokens")
    p.add_argument("--prefix-lens", type=int, nargs="+", default=[128, 256, 512, 1024, 2048])
    p.add_argument("--num-reqs", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    p.add_argument("--mode", default="FULL_AND_PIECEWISE")
    p.add_argument("--num-iters", type=int, default=20)
    p.add_argument("--num-warmup", type=int, default=2)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    report: dict[str, Any] = {"model": args.model, "environment": environment(), "args": vars(args)}
    if "ttft" in args.sections:
        report["ttft"] = bench_ttft(args)
    if "decode" in args.sections:
        report["decode"] = bench_decode(args)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
