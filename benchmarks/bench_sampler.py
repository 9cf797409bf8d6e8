"""Top-k + top-p sampling on the GPU: vgraph's sampler path against FlashInfer's fused kernel.

vgraph's path (vgraph/sample/sampler.py) is temperature, one sort for top-k and top-p, softmax,
then an exponential race; FlashInfer's `top_k_top_p_sampling_from_logits` samples by rejection
without a sort. Both are timed eagerly (CUDA events after warm-up, median of --iters) at the batch
sizes and vocabularies of the shipped models, with top_k=50, top_p=0.9, temperature 0.8. The
answer decides whether FlashInfer's kernel becomes the sampler's fast path (docs/architecture.md).

    python benchmarks/bench_sampler.py --out benchmarks/results/sampler.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys

import torch

from vgraph.sample.sampler import apply_top_k_top_p, exponential_race

VOCABS = {"SmolLM2-135M": 49152, "Llama-3.2-1B": 128256, "Qwen3-0.6B": 151936}


def time_ms(fn, iters: int) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def make_calls(b: int, vocab: int, fis) -> tuple:
    """(vgraph's path, FlashInfer's kernel) as no-argument calls on one batch of logits."""
    logits = torch.randn(b, vocab, device="cuda") * 4
    temp = torch.full((b,), 0.8, device="cuda")
    top_k = torch.full((b,), 50, device="cuda", dtype=torch.int64)
    top_p = torch.full((b,), 0.9, device="cuda")

    def ours():
        scaled = apply_top_k_top_p(logits / temp[:, None], top_k, top_p)
        return exponential_race(scaled.softmax(dim=-1), {})

    def theirs():
        return fis.top_k_top_p_sampling_from_logits(
            logits / temp[:, None], top_k.int(), top_p, deterministic=True
        )

    return ours, theirs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 32, 128])
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--out")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_sampler needs a GPU", file=sys.stderr)
        return 1
    import flashinfer.sampling as fis

    rows = []
    print(f"{'model':<14}{'batch':>6}{'vgraph ms':>11}{'flashinfer ms':>15}{'speed-up':>10}")
    for model, vocab in VOCABS.items():
        for b in args.batches:
            ours, theirs = make_calls(b, vocab, fis)
            row = {"model": model, "vocab": vocab, "batch": b}
            row["vgraph_ms"] = time_ms(ours, args.iters)
            row["flashinfer_ms"] = time_ms(theirs, args.iters)
            rows.append(row)
            print(
                f"{model:<14}{b:>6}{row['vgraph_ms']:>11.3f}{row['flashinfer_ms']:>15.3f}"
                f"{row['vgraph_ms'] / row['flashinfer_ms']:>9.2f}x",
                flush=True,
            )
    result = {
        "benchmark": "top_k_top_p_sampling",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "flashinfer": sys.modules["flashinfer"].__version__,
        "config": {"top_k": 50, "top_p": 0.9, "temperature": 0.8, "timing": "eager, median"},
        "rows": rows,
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
