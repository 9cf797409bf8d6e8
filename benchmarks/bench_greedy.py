"""Greedy tokens on the GPU: vgraph_C::argmax_rows against torch.argmax.

Float32 logits at the vocabularies of the shipped models and several batch sizes; each variant is
a chain of --calls argmaxes over different logits captured in one CUDA graph (as the sampler runs
after the model's graph), timed with CUDA events: median microseconds per call of --replays
replays. The variants of a shape are timed in turns, round after round: torch, the kernel with one
CTA a row (`one_cta`, VGRAPH_ARGMAX_PARTS=1) and the kernel as its launcher cuts rows (`vgraph`,
a cluster of CTAs a row).

    python benchmarks/bench_greedy.py --out benchmarks/results/greedy.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from vgraph._ext import has_cuda_kernels, load_ext
from vgraph.bench.kernels import time_graph

VOCABS = {"SmolLM2-135M": 49152, "Llama-3.2-1B": 128256, "Qwen3-0.6B": 151936}


def chains(logits: list[torch.Tensor], out: torch.Tensor) -> tuple[Callable, Callable]:
    """The torch and the vgraph chain: one argmax per logits tensor, each into out."""

    def torch_chain() -> None:
        for x in logits:
            out.copy_(x.argmax(dim=-1))

    def vgraph_chain() -> None:
        for x in logits:
            torch.ops.vgraph_C.argmax_rows(out, x)

    return torch_chain, vgraph_chain


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--calls", type=int, default=16)
    p.add_argument("--replays", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out")
    args = p.parse_args(argv)
    if not (torch.cuda.is_available() and load_ext() and has_cuda_kernels("argmax_rows")):
        print("needs a GPU and a CUDA build of vgraph._C with argmax_rows")
        return 1
    rows = []
    head = f"{'model':14} {'B':>4} {'torch us':>9} {'one_cta us':>11} {'vgraph us':>10}"
    print(f"{head} {'speed-up':>9}")
    for model, vocab in VOCABS.items():
        for b in args.batches:
            logits = [torch.randn(b, vocab, device="cuda") for _ in range(args.calls)]
            out = torch.empty(b, dtype=torch.long, device="cuda")
            torch_chain, vgraph_chain = chains(logits, out)
            runs: dict[str, list[float]] = {"torch": [], "one_cta": [], "vgraph": []}
            for _ in range(args.rounds):
                runs["torch"].append(time_graph(torch_chain, args.calls, args.replays))
                os.environ["VGRAPH_ARGMAX_PARTS"] = "1"  # read at each launch: at capture
                try:
                    runs["one_cta"].append(time_graph(vgraph_chain, args.calls, args.replays))
                finally:
                    del os.environ["VGRAPH_ARGMAX_PARTS"]
                runs["vgraph"].append(time_graph(vgraph_chain, args.calls, args.replays))
            t, o, v = (statistics.median(runs[k]) for k in ("torch", "one_cta", "vgraph"))
            rows.append(
                {
                    "model": model,
                    "vocab": vocab,
                    "batch": b,
                    "torch_us": t,
                    "one_cta_us": o,
                    "vgraph_us": v,
                }
            )
            print(f"{model:14} {b:4d} {t:9.2f} {o:11.2f} {v:10.2f} {t / v:8.2f}x")
            del logits, torch_chain, vgraph_chain
    if args.out:
        result = {
            "benchmark": "greedy argmax, us per call (median)",
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "rows": rows,
        }
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
