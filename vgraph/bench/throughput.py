"""`vgraph bench throughput`: offline throughput, as vLLM's `vllm bench throughput`.

An LLM (every engine argument of `vgraph serve` is accepted) generates for --num-prompts
prompts of --input-len random token ids (--dataset-name random, the only dataset), --output-len
tokens each (ignore_eos, n samples), all submitted at once. Prints requests/s, total tokens/s
and output tokens/s over the wall time of the whole generate call; --output-json writes them.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from vgraph.bench.args import positive_int
from vgraph.bench.latency import add_offline_args, make_llm, random_prompts, sampling_params


def add_cli_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    add_offline_args(p)
    p.add_argument("--num-prompts", type=positive_int, default=1000, help="prompts (default: 1000)")
    p.add_argument("--dataset-name", default="random", choices=["random"], help="prompts' source")
    return p


def main(args: argparse.Namespace) -> dict[str, Any]:
    llm = make_llm(args, "throughput")
    try:
        vocab = llm.config.model_config.vocab_size
        prompts = random_prompts(args.num_prompts, args.input_len, vocab, args.seed)
        t0 = time.perf_counter()
        outputs = llm.generate(prompts, sampling_params(args))
        elapsed = time.perf_counter() - t0
    finally:
        llm.shutdown()
    num_in = sum(len(o.prompt_token_ids) for o in outputs)
    num_out = sum(len(c.token_ids) for o in outputs for c in o.outputs)
    report = {
        "elapsed_time": elapsed,
        "num_requests": len(outputs),
        "total_num_tokens": num_in + num_out,
        "total_num_output_tokens": num_out,
        "requests_per_second": len(outputs) / elapsed,
        "tokens_per_second": (num_in + num_out) / elapsed,
        "output_tokens_per_second": num_out / elapsed,
    }
    print(
        f"Throughput: {report['requests_per_second']:.2f} requests/s, "
        f"{report['tokens_per_second']:.2f} total tokens/s, "
        f"{report['output_tokens_per_second']:.2f} output tokens/s"
    )
    print(f"Total num prompt tokens:  {num_in}")
    print(f"Total num output tokens:  {num_out}")
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump(report, f, indent=4)
    return report
