"""`vgraph bench latency`: end-to-end latency of one batch, as vLLM's `vllm bench latency`.

An LLM (every engine argument of `vgraph serve` is accepted, --model etc.) generates one batch
of --batch-size prompts of --input-len random token ids, --output-len tokens each (ignore_eos,
temperature 1.0, n samples), --num-iters-warmup times untimed, then --num-iters times timed.
Prints the average and the 10/25/50/75/90/99th percentiles (numpy's, linear interpolation) of
the batch latency in seconds; --output-json writes them. The per-step, per-mode table of the
engine's graph modes is `vgraph bench step`. Both offline benchmarks refuse --input-len +
--output-len above max_model_len (the engine would cut every request short).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from vgraph.bench.args import nonneg_int, positive_int
from vgraph.engine.engine_args import EngineArgs
from vgraph.entrypoints.cli_args import add_dataclass_args, engine_args_from
from vgraph.sampling_params import SamplingParams

PERCENTILES = [10, 25, 50, 75, 90, 99]


def add_offline_args(p: argparse.ArgumentParser) -> None:
    """What both offline benchmarks take: the workload's shape and the engine's arguments."""
    p.add_argument("--input-len", type=positive_int, default=32, help="prompt tokens (default: 32)")
    p.add_argument(
        "--output-len", type=positive_int, default=128, help="tokens generated per sample"
    )
    p.add_argument("--n", type=positive_int, default=1, help="samples per prompt (default: 1)")
    p.add_argument("--output-json", default=None, help="write the results as JSON here")
    add_dataclass_args(p, EngineArgs, "engine", positional=False)


def add_cli_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    add_offline_args(p)
    p.add_argument(
        "--batch-size", type=positive_int, default=8, help="prompts per batch (default: 8)"
    )
    p.add_argument("--num-iters-warmup", type=nonneg_int, default=10, help="untimed batches first")
    p.add_argument("--num-iters", type=positive_int, default=30, help="timed batches (default: 30)")
    return p


def check_lengths(args: argparse.Namespace, max_model_len: int, limit: str, what: str) -> None:
    """Refuse a workload the engine would cut short: a request stops at max_model_len tokens,
    so --input-len + --output-len above it would under-generate (vLLM refuses it too)."""
    total = args.input_len + args.output_len
    if total > max_model_len:
        raise SystemExit(
            f"bench {what}: --input-len {args.input_len} + --output-len {args.output_len} = "
            f"{total} tokens per request is more than {limit} {max_model_len}; shorten them"
            + (" or raise --max-model-len" if limit == "--max-model-len" else "")
        )


def make_llm(args: argparse.Namespace, what: str) -> Any:
    """The LLM of the engine flags, once the lengths fit: checked against --max-model-len
    before anything loads, else against the model's own limit once the config resolves it."""
    from vgraph.entrypoints.llm import LLM

    if args.max_model_len is not None:
        check_lengths(args, args.max_model_len, "--max-model-len", what)
    ea = engine_args_from(args)
    kwargs = {k: v for k, v in vars(ea).items() if k != "model"}
    llm = LLM(ea.model, **kwargs)
    try:
        limit = llm.config.model_config.max_model_len
        check_lengths(args, limit, "the model's max_model_len", what)
    except SystemExit:
        llm.shutdown()
        raise
    return llm


def random_prompts(num: int, input_len: int, vocab_size: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, vocab_size, size=(num, input_len)).tolist()


def sampling_params(args: argparse.Namespace) -> SamplingParams:
    return SamplingParams(
        n=args.n, temperature=1.0, top_p=1.0, ignore_eos=True, max_tokens=args.output_len
    )


def main(args: argparse.Namespace) -> dict[str, Any]:
    llm = make_llm(args, "latency")
    try:
        vocab = llm.config.model_config.vocab_size
        prompts = random_prompts(args.batch_size, args.input_len, vocab, args.seed)
        params = sampling_params(args)
        for _ in range(args.num_iters_warmup):
            llm.generate(prompts, params, use_tqdm=False)
        latencies = []
        for _ in range(args.num_iters):
            t0 = time.perf_counter()
            llm.generate(prompts, params, use_tqdm=False)
            latencies.append(time.perf_counter() - t0)
    finally:
        llm.shutdown()
    report = {
        "avg_latency": float(np.mean(latencies)),
        "latencies": latencies,
        "percentiles": {str(p): float(np.percentile(latencies, p)) for p in PERCENTILES},
    }
    print(f"Avg latency: {report['avg_latency']} seconds")
    for p, value in report["percentiles"].items():
        print(f"{p}% percentile latency: {value} seconds")
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump(report, f, indent=4)
    return report
