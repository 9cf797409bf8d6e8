"""The engine's decode step with and without async scheduling, in the engine core's own loop.

Two in-process engine cores per model (`async_scheduling` off and on, the same graph mode and
capture sizes) stay alive; for each batch size they run in turns, `--rounds` rounds: B requests
of random prompts (greedy, ignore_eos, max_tokens = warm-up + timed steps) are added, stepped
through their prefill and `--num-warmup` decode steps, then `--num-iters` calls of
EngineCore.step() are timed one by one; the requests then run out. A step here is what the
engine core's busy loop pays per generated token: schedule, prepare, launch (or replay), sample,
the copy back and the scheduler's update; with async scheduling the next step is launched before
the previous one's tokens are back, so a call's time is the device's step once the host keeps
ahead of it. The prompt length puts the mean context of the timed steps at --context-len.
Greedy tokens of both engines are compared (they must be equal). Prints a table (median ms per
step, 10th / 90th percentiles) and writes JSON. With --profile-steps N, the last round's requests
then run N more steps under the CUDA profiler: the device's span a step, its busy and idle time
and the longest gaps with the kernels around them (vgraph/bench/kernels.py: profile_kernels), to
tell a loop that waits from one whose kernels run slower.

    python benchmarks/bench_async_scheduling.py --models SmolLM2-135M Llama-3.2-1B \
        --batch-sizes 1 4 8 16 --out /tmp/async.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch

from vgraph.bench.common import BLOCK_SIZE, environment, p10_p90
from vgraph.bench.kernels import profile_kernels
from vgraph.engine.arg_utils import create_engine_config
from vgraph.engine.core import EngineCore
from vgraph.engine.protocol import EngineCoreRequest
from vgraph.models.llama import LlamaForCausalLM
from vgraph.sampling_params import SamplingParams
from vgraph.utils import cdiv

VARIANTS = {"sync": False, "async": True}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["SmolLM2-135M"])
    p.add_argument("--load-format", default="dummy")
    p.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 4, 8, 16])
    p.add_argument("--context-len", type=int, default=128, help="mean context of timed steps")
    p.add_argument("--num-warmup", type=int, default=16)
    p.add_argument("--num-iters", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--mode", default="FULL", help="cudagraph_mode of both engines")
    p.add_argument(
        "--capture-sizes", nargs="+", type=int, default=None, help="default: the engine's list"
    )
    p.add_argument(
        "--greedy-apart",
        action="store_true",
        help="the sampler's own argmax after the graph, not the LM head op's greedy tokens",
    )
    p.add_argument(
        "--float32-logits",
        action="store_true",
        help="the LM head writes float32 logits, not logits in the model's dtype",
    )
    p.add_argument(
        "--profile-steps",
        type=int,
        default=0,
        help="after the timed steps of the last round, this many steps under the CUDA profiler",
    )
    p.add_argument("--out", default=None)
    return p.parse_args()


def start(model: str, async_scheduling: bool, args: argparse.Namespace) -> EngineCore:
    steps = args.num_warmup + args.num_iters
    per_req = cdiv(args.context_len + steps, BLOCK_SIZE) + 1
    max_model_len = 2 * (args.context_len + steps)
    # every request of the largest batch, and at least one request of max_model_len (the
    # scheduler refuses a cache smaller than that)
    num_blocks = max(max(args.batch_sizes) * per_req, cdiv(max_model_len, BLOCK_SIZE)) + 8
    cc: dict[str, Any] = {"cudagraph_mode": args.mode}
    if args.capture_sizes:
        cc["cudagraph_capture_sizes"] = args.capture_sizes
    config = create_engine_config(
        model,
        load_format=args.load_format,
        block_size=BLOCK_SIZE,
        max_num_seqs=max(max(args.batch_sizes), 8),
        max_model_len=max_model_len,
        num_gpu_blocks_override=num_blocks,
        enable_prefix_caching=False,
        compilation_config=cc,
        async_scheduling=async_scheduling,
    )
    return EngineCore(config)


def run_batch(
    core: EngineCore, batch: int, args: argparse.Namespace, seed: int, profile_steps: int = 0
) -> tuple[list[float], list[int], dict[str, Any] | None]:
    """ms of each timed step, the first request's tokens, and the profile of profile_steps more
    steps (None without)."""
    steps = args.num_warmup + args.num_iters + (profile_steps + 1 if profile_steps else 0)
    prompt_len = max(1, args.context_len - args.num_warmup - args.num_iters // 2)
    vocab = core.config.model_config.vocab_size
    gen = torch.Generator().manual_seed(seed)
    params = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=steps + 4)
    ids = [f"b{batch}-s{seed}-{i}" for i in range(batch)]
    for rid in ids:
        prompt = torch.randint(0, vocab, (prompt_len,), generator=gen).tolist()
        core.add_request(EngineCoreRequest(rid, prompt, params, [], time.time()))
    tokens: dict[str, list[int]] = {rid: [] for rid in ids}

    def step() -> None:
        for out in core.step().outputs:
            tokens[out.request_id].extend(out.new_token_ids)

    while min(len(t) for t in tokens.values()) < args.num_warmup:
        step()
    times = []
    for _ in range(args.num_iters):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    profile = profile_kernels(step, profile_steps) if profile_steps else None
    while core.has_unfinished_requests():
        step()
    return times, tokens[ids[0]], profile


def main() -> None:
    args = parse_args()
    LlamaForCausalLM.greedy_in_head = not args.greedy_apart
    LlamaForCausalLM.float32_logits = args.float32_logits
    report: dict[str, Any] = {"environment": environment(), "args": vars(args), "models": {}}
    rows = []
    for model in args.models:
        cores = {name: start(model, flag, args) for name, flag in VARIANTS.items()}
        result: dict[str, Any] = {}
        for batch in args.batch_sizes:
            times: dict[str, list[float]] = {name: [] for name in cores}
            first: dict[str, list[list[int]]] = {name: [] for name in cores}
            profiles: dict[str, dict[str, Any]] = {}
            for r in range(args.rounds):
                profile_steps = args.profile_steps if r == args.rounds - 1 else 0
                for name, core in cores.items():
                    t, toks, prof = run_batch(core, batch, args, r, profile_steps)
                    times[name] += t
                    first[name].append(toks)
                    if prof is not None:
                        profiles[name] = prof
            entry = {
                name: {
                    "median_ms": statistics.median(t),
                    "p10_p90_ms": p10_p90(t),
                    "mean_ms": statistics.fmean(t),
                }
                for name, t in times.items()
            }
            entry["greedy_tokens_equal"] = first["sync"] == first["async"]
            for name, prof in profiles.items():
                entry[name]["profile"] = prof
            result[str(batch)] = entry
            rows.append((model, batch, entry))
        for core in cores.values():
            core.shutdown()
        report["models"][model] = result
    print(f"{'model':<16} {'B':>3} {'sync ms':>9} {'async ms':>9} {'saved':>7}  tokens equal")
    for model, batch, e in rows:
        s, a = e["sync"]["median_ms"], e["async"]["median_ms"]
        print(
            f"{model:<16} {batch:>3} {s:>9.3f} {a:>9.3f} {s - a:>7.3f}  {e['greedy_tokens_equal']}"
        )
    for model, batch, e in rows:
        for name in VARIANTS:
            prof = e[name].get("profile")
            if prof is None:
                continue
            gaps = ", ".join(
                f"{g['us']:.1f} ({g['after'][:24]} -> {g['before'][:24]})"
                for g in prof["longest_gaps"][:4]
            )
            print(
                f"profiled {model} B={batch} {name}: span {prof['span_us_per_step']:.1f} us a "
                f"step, busy {prof['busy_us_per_step']:.1f}, idle {prof['idle_us_per_step']:.1f}, "
                f"{prof['kernels_per_step']:.0f} kernels; longest gaps {gaps}"
            )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
