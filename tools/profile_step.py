"""Where a decode step's time goes, on CUDA.

1. Kernels: one eager decode step under torch.profiler: the number of CUDA kernels launched, the
   summed kernel time and the kernels that dominate. The kernel count times the per-kernel cost
   inside a replayed graph (~0.8 us on an H200) is the floor of a FULL step without fusion.
2. Stages: the same step in FULL mode, each stage of ModelRunner.execute_model timed after a
   synchronize (median of many): dispatch + input preparation, the forward (graph replay),
   sampling, and the device-to-host copy.

    python tools/profile_step.py --model SmolLM2-135M --batch 1 --out profile.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
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
    report = {"model": args.model, "batch": args.batch, "environment": environment()}
    report.update(profile_kernels(args))
    _write(args.out, report)
    report["full_stages_ms"] = time_stages(args)
    _write(args.out, report)


def _write(path: str | None, report: dict) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(report, f, indent=2)


@torch.inference_mode()
def time_stages(args: argparse.Namespace, iters: int = 50) -> dict[str, float]:
    config = VGraphConfig.create(
        args.model,
        load_format="dummy",
        max_model_len=2048,
        attention_backend=args.attention_backend,
        compilation_config={"cudagraph_mode": "FULL"},
    )
    core = EngineCore(config)
    runner = core.runner
    b = _StepBuilder(core)
    sched = b.step(b.prefilled(args.batch, args.context_len), [1] * args.batch)
    stages: dict[str, list[float]] = defaultdict(list)
    for i in range(iters + 5):
        marks = [time.perf_counter()]
        mode, key, t_pad, r_pad = runner.dispatch(sched)
        step, common = runner.prepare_inputs(sched, t_pad, r_pad)
        _mark(marks)
        hidden = runner.execute_forward(step, common, mode, key)
        _mark(marks)
        out = runner.sample(sched, step, hidden)
        _mark(marks)
        runner.to_host(sched, out)
        _mark(marks)
        if i >= 5:
            for name, t0, t1 in zip(("prepare", "forward", "sample", "to_host"), marks, marks[1:]):
                stages[name].append((t1 - t0) * 1e3)
    result = {name: statistics.median(v) for name, v in stages.items()}
    print("FULL step stages, median ms: " + ", ".join(f"{k} {v:.3f}" for k, v in result.items()))
    return result


def _mark(marks: list[float]) -> None:
    torch.cuda.synchronize()
    marks.append(time.perf_counter())


def profile_kernels(args: argparse.Namespace) -> dict:
    config = VGraphConfig.create(
        args.model,
        load_format="dummy",
        max_model_len=2048,
        attention_backend=args.attention_backend,
        enforce_eager=True,
    )
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
    print(
        f"{args.model} batch {args.batch} ({config.attention_backend}): {total_n} kernels, "
        f"{total_t:.0f} us of kernel time per eager decode step"
    )
    for name in top:
        print(f"  {count[name]:5d} x {time_us[name]:8.1f} us  {name[:90]}")
    return {
        "kernels": total_n,
        "kernel_time_us": total_t,
        "attention_backend": config.attention_backend,
        "top": [{"name": n, "count": count[n], "us": time_us[n]} for n in top],
    }


if __name__ == "__main__":
    main()
