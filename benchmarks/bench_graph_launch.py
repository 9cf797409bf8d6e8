"""What a CUDA graph replay costs the host, and whether the GPU waits for it.

A chain of N dependent kernels is captured (the fused decode GEMV, vgraph_C::linear_out at one
token on a [576, 576] weight, launched with programmatic stream serialization unless VGRAPH_PDL=0;
and torch's in-place add, a plain launch) as one graph, or as consecutive graphs of growing
length (the first short, each next one at most --ratio times the one before), replayed in order.
Per variant, medians of many steps:
  launch_us  the host's time in the replay calls
  step_us    the replay calls plus the synchronize after them: what a step waits
  gpu_us     CUDA events around the replays (the first recorded before the launch)
  run_us     the same events with the launch hidden behind a sleeping stream: the graphs' own
             time on the GPU
step_us - run_us is what a step loses to the launch: if it is about launch_us, the GPU starts a
graph only once its launch call is done, and a short first graph lets it start sooner.

    python benchmarks/bench_graph_launch.py --lengths 80 160 --out /tmp/graph_launch.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable

import torch

from vgraph._ext import ext_unavailable_reason, load_ext


def segments(n: int, first: int, ratio: float) -> list[int]:
    """Lengths summing to n: first, then each at most ratio times the previous."""
    out, size = [], first
    while sum(out) < n:
        out.append(min(size, n - sum(out)))
        size = max(1, int(size * ratio))
    return out


def capture(kernel: Callable[[], None], lengths: list[int]) -> list[torch.cuda.CUDAGraph]:
    pool, graphs = torch.cuda.graph_pool_handle(), []
    for length in lengths:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool):
            for _ in range(length):
                kernel()
        graphs.append(g)
    return graphs


def time_replays(graphs: list[torch.cuda.CUDAGraph], iters: int) -> dict[str, float]:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    launch, step, gpu = [], [], []
    for i in range(iters + 10):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        start.record()
        for g in graphs:
            g.replay()
        end.record()
        t1 = time.perf_counter()
        end.synchronize()
        t2 = time.perf_counter()
        if i >= 10:
            launch.append((t1 - t0) * 1e6)
            step.append((t2 - t0) * 1e6)
            gpu.append(start.elapsed_time(end) * 1e3)
    hidden = []  # the launch hidden behind a sleeping stream: the graphs' own GPU time
    for _ in range(50):
        torch.cuda.synchronize()
        torch.cuda._sleep(2_000_000)
        start.record()
        for g in graphs:
            g.replay()
        end.record()
        end.synchronize()
        hidden.append(start.elapsed_time(end) * 1e3)
    med = statistics.median
    return {
        "launch_us": med(launch),
        "step_us": med(step),
        "gpu_us": med(gpu),
        "run_us": med(hidden),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--lengths", nargs="+", type=int, default=[40, 80, 160, 320])
    p.add_argument("--first", type=int, default=8, help="kernels in the first graph of a split")
    p.add_argument("--ratio", type=float, default=4.0)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if not (torch.cuda.is_available() and load_ext()):
        why = ext_unavailable_reason() or "no GPU"
        raise SystemExit(f"bench_graph_launch.py needs a GPU and vgraph._C ({why})")
    dtype, dev = torch.bfloat16, "cuda"
    x = torch.randn(1, 576, dtype=dtype, device=dev)
    w = torch.randn(576, 576, dtype=dtype, device=dev) * 576**-0.5
    y = torch.empty(1, 576, dtype=dtype, device=dev)
    a = torch.zeros(1 << 16, device=dev)
    kernels = {
        "gemv": lambda: torch.ops.vgraph_C.linear_out(y, x, w, 32),
        "add": lambda: a.add_(1.0),
    }
    for k in kernels.values():  # settle lazy state outside any capture
        k()
    torch.cuda.synchronize()
    rows = []
    pdl = os.environ.get("VGRAPH_PDL", "1") != "0"
    print(f"PDL {'on' if pdl else 'off'}; medians, us")
    heads = ("launch", "step", "gpu", "run", "step-run")
    print(f"{'kernel':6} {'N':>4} {'graphs':>14} " + " ".join(f"{h:>8}" for h in heads))
    for name, kernel in kernels.items():
        for n in args.lengths:
            for lengths in ([n], segments(n, args.first, args.ratio)):
                r = time_replays(capture(kernel, lengths), args.iters)
                r |= {"kernel": name, "n": n, "graphs": lengths, "pdl": pdl}
                rows.append(r)
                print(
                    f"{name:6} {n:4} {len(lengths):>3} x {str(lengths[:3])[:9]:9} "
                    f"{r['launch_us']:8.1f} {r['step_us']:8.1f} {r['gpu_us']:8.1f} "
                    f"{r['run_us']:8.1f} {r['step_us'] - r['run_us']:8.1f}"
                )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
