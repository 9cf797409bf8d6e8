"""Where a decode step's time goes: kernels per step and their GPU time (torch.profiler, CUDA).

For a model (dummy weights) and batch size, profiles one eager decode step of the engine's
model runner and reports the number of CUDA kernels launched, the summed kernel time and the
kernels that dominate. The kernel count times the per-kernel cost inside a replayed graph
(~0.8 us on an H200) is the floor of a FULL graph step without fusion.

    python tools/profile_step.py --model SmolLM2-135M --batch 1 --out profile.json
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from vgraph.bench.latency import _StepBuilder, environment
from vgraph.config import VGraphConfig
from vgraph.engine.core import EngineCore


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="SmolLM2-135M")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--context-len", type=int, default=128)
    p.add_argument("--attention-backend", default="auto")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    config = VGraphConfig.create(args.model, load_format="dummy", max_model_len=2048,
                                 attention_backend=args.attention_backend, enforce_eager=True)
    core = EngineCore(config)
    b = _StepBuilder(core)
    sched = b.step(b.prefilled(args.batch, args.context_len), [1] * args.batch)
    for _ in range(5):
        core.runner.execute_model(sched)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        core.runner.execute_model(sched)
        torch.cuda.synchronize()
    count: Counter[str] = Counter()
    time_us: defaultdict[str, float] = defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            count[e.name] += 1
            time_us[e.name] += e.device_time
    total_n, total_t = sum(count.values()), sum(time_us.values())
    top = sorted(time_us, key=time_us.get, reverse=True)[:12]
    print(f"{args.model} batch {args.batch} ({config.attention_backend}): {total_n} kernels, "
          f"{total_t:.0f} us of kernel time per eager decode step")
    for name in top:
        print(f"  {count[name]:5d} x {time_us[name]:8.1f} us  {name[:90]}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"model": args.model, "batch": args.batch, "kernels": total_n,
                       "kernel_time_us": total_t, "attention_backend": config.attention_backend,
                       "top": [{"name": n, "count": count[n], "us": time_us[n]} for n in top],
                       "environment": environment()}, f, indent=2)


if __name__ == "__main__":
    main()
