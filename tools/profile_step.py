"""Where a step's time goes, on CUDA.

1. Kernels: one eager decode step under torch.profiler: the number of CUDA kernels launched, the
   summed kernel time and the kernels that dominate. The kernel count times the per-kernel cost
   inside a replayed graph (~0.8 us on an H200) is the floor of a FULL step without fusion.
2. Stages, per mode of --modes (default FULL), for the decode step and the mixed step: each stage
   of ModelRunner.execute_model timed after a synchronize (median of many): dispatch + input
   preparation, the forward (graph replay), sampling, and the device-to-host copy.
3. Timeline, the same stages without a synchronize (median of many steps): the host's time in
   each (dispatch + input preparation, the forward call that launches the graph, the sampler's
   launches, the wait in the device-to-host copy), and the GPU's time from the forward's first
   launch to the sampler's last (CUDA events): the step minus that span is the time the GPU waits
   for the host.
4. Python: the same steps under cProfile: own time per step of the functions that take most
   (the C calls among them: graph launches, kernel launches, copies), and the FULL graph's
   replay alone: the call's host time, the call with the synchronize after it, and the graph's
   own GPU time with its launch hidden behind a sleeping stream.
5. Host: the same steps under torch.profiler's CPU view: self time per step of each ATen op and
   CUDA runtime call (graph launches, kernel launches, copies), the largest first. What the
   list does not cover of the step's time is Python.

    python tools/profile_step.py --model SmolLM2-135M --batch 1 --modes FULL PIECEWISE \
        --out profile.json
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from vgraph.bench import kernels
from vgraph.bench.common import StepBuilder, environment
from vgraph.engine.arg_utils import create_engine_config
from vgraph.engine.core import EngineCore
from vgraph.worker.runner_output import start_to_host


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="SmolLM2-135M")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--context-len", type=int, default=128)
    p.add_argument("--attention-backend", default="auto")
    p.add_argument("--modes", nargs="+", default=["FULL"], help="cudagraph modes to time")
    p.add_argument("--mixed", default="4+60", help="mixed step: DECODES+CHUNK, '' to skip")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("profile_step.py needs a GPU (the kernel profile and the CUDA events)")
    report = {"model": args.model, "batch": args.batch, "environment": environment()}
    report.update(profile_kernels(args))
    _write(args.out, report)
    for mode in args.modes:
        report[f"{mode}_stages_ms"], report[f"{mode}_host"] = time_stages(args, mode)
        _write(args.out, report)


def _write(path: str | None, report: dict) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(report, f, indent=2)


@torch.inference_mode()
def time_stages(args: argparse.Namespace, mode: str) -> tuple[dict, dict]:
    """-> ({step: {stage: median ms}}, {step: host profile}) for the decode and mixed steps."""
    config = create_engine_config(
        args.model,
        load_format="dummy",
        max_model_len=2048,
        attention_backend=args.attention_backend,
        compilation_config={"cudagraph_mode": mode},
        async_scheduling=False,  # the stages of a step that does not overlap the next
    )
    core = EngineCore(config)
    b = StepBuilder(core)
    steps = {
        f"decode_{args.batch}": b.step(b.prefilled(args.batch, args.context_len), [1] * args.batch)
    }
    if args.mixed:
        decodes, chunk = (int(x) for x in args.mixed.split("+"))
        reqs = b.prefilled(decodes, args.context_len) + [b.request(chunk + 1)]
        steps["mixed"] = b.step(reqs, [1] * decodes + [chunk])
    stages, host = {}, {}
    for name, sched in steps.items():
        stages[name] = _stages(core, sched)
        print(
            f"{mode} {name} stages, median ms: "
            + ", ".join(f"{k} {v:.3f}" for k, v in stages[name].items())
        )
        stages[f"{name}_timeline"] = timeline = _timeline(core, sched)
        print(
            f"{mode} {name} timeline, median us: "
            + ", ".join(f"{k} {v:.1f}" for k, v in timeline.items())
        )
        stages[f"{name}_python"] = py = _python_profile(core, sched)
        print(f"{mode} {name} python, us per step (cProfile on: {py['step_us']:.0f} us):")
        for row in py["top"]:
            print(f"  {row['calls']:5.1f} x {row['own_us']:7.1f} us  {row['name'][:90]}")
        if "replay_us" in py:
            print(
                f"{mode} {name} graph replay alone: call {py['replay_us']:.1f} us, "
                f"with the synchronize {py['replay_sync_us']:.1f} us, on the GPU once "
                f"launched {py['replay_gpu_us']:.1f} us"
            )
        host[name] = host_profile(core, sched)
        print(f"{mode} {name} host time per step (profiler on: {host[name]['step_us']:.0f} us):")
        for row in host[name]["top"]:
            print(f"  {row['calls']:7.1f} x {row['self_us']:8.1f} us  {row['name'][:80]}")
    return stages, host


def _stages(core: EngineCore, sched: Any, iters: int = 50) -> dict[str, float]:
    runner = core.runner
    stages: dict[str, list[float]] = defaultdict(list)
    for i in range(iters + 5):
        marks = [time.perf_counter()]
        mode, key, t_pad, r_pad = runner.dispatch(sched)
        step, common = runner.prepare_inputs(sched, t_pad, r_pad)
        _mark(marks)
        logits = runner.execute_forward(step, common, mode, key)
        _mark(marks)
        out = runner.sample(sched, step, logits)
        _mark(marks)
        start_to_host(sched.requests, out, {}).result()  # the copy, waited for
        _mark(marks)
        if i >= 5:
            for name, t0, t1 in zip(("prepare", "forward", "sample", "to_host"), marks, marks[1:]):
                stages[name].append((t1 - t0) * 1e3)
    return {name: statistics.median(v) for name, v in stages.items()}


def _timeline(core: EngineCore, sched: Any, iters: int = 200) -> dict[str, float]:
    """The stages of a step as the engine runs it (no synchronize between them), us: host time
    per stage, the GPU's span from the forward to the sampler's last kernel, and what the step
    spends beyond that span (the GPU idle, waiting for the host)."""
    runner = core.runner
    first, last = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rows: dict[str, list[float]] = defaultdict(list)
    for i in range(iters + 10):
        t0 = time.perf_counter()
        mode, key, t_pad, r_pad = runner.dispatch(sched)
        step, common = runner.prepare_inputs(sched, t_pad, r_pad)
        t1 = time.perf_counter()
        first.record()
        logits = runner.execute_forward(step, common, mode, key)
        t2 = time.perf_counter()
        out = runner.sample(sched, step, logits)
        last.record()
        t3 = time.perf_counter()
        start_to_host(sched.requests, out, {}).result()  # waits for the copy: both events are done
        t4 = time.perf_counter()
        if i < 10:
            continue
        gpu_us = first.elapsed_time(last) * 1e3
        marks = {"prepare": t1 - t0, "forward_call": t2 - t1, "sample_call": t3 - t2}
        marks |= {"to_host_wait": t4 - t3, "step": t4 - t0}
        for k, v in marks.items():
            rows[k].append(v * 1e6)
        rows["gpu_span"].append(gpu_us)
        rows["gpu_idle"].append((t4 - t0) * 1e6 - gpu_us)
    return {k: statistics.median(v) for k, v in rows.items()}


def _python_profile(core: EngineCore, sched: Any, iters: int = 200) -> dict[str, Any]:
    """Own time per step of the 20 costliest functions (cProfile); for a FULL replay also the
    graph's replay call alone."""
    runner = core.runner
    for _ in range(5):
        runner.execute_model(sched)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for _ in range(iters):
        runner.execute_model(sched)
    prof.disable()
    result: dict[str, Any] = {"step_us": (time.perf_counter() - t0) / iters * 1e6}
    stats = pstats.Stats(prof).stats  # (file, line, name) -> (calls, _, own, cumulative, _)
    rows = sorted(stats.items(), key=lambda kv: kv[1][2], reverse=True)[:20]
    result["top"] = [
        {
            "name": f"{f.split('/')[-1]}:{line}({fn})",
            "calls": v[0] / iters,
            "own_us": v[2] / iters * 1e6,
        }
        for (f, line, fn), v in rows
    ]
    mode, key, _, _ = runner.dispatch(sched)
    entries = getattr(runner.logits_fn, "entries", {})
    if key in entries:
        graph = entries[key].graph
        calls, synced = [], []
        for _ in range(iters):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            runner.graph_backend.replay(graph)
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            calls.append((t1 - t0) * 1e6)
            synced.append((time.perf_counter() - t0) * 1e6)
        result["replay_us"] = statistics.median(calls)
        result["replay_sync_us"] = statistics.median(synced)
        result["replay_gpu_us"] = _graph_gpu_time(lambda: runner.graph_backend.replay(graph))
    return result


def _graph_gpu_time(replay: Callable[[], None], iters: int = 50) -> float:
    """us from a replay's start on the GPU to its end, its launch hidden: the stream sleeps
    (torch.cuda._sleep) while the host launches, and the first event waits behind the sleep."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        torch.cuda.synchronize()
        torch.cuda._sleep(2_000_000)  # about 1 ms, longer than any launch
        start.record()
        replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def host_profile(core: EngineCore, sched: Any, iters: int = 20) -> dict[str, Any]:
    """Self CPU time per step of each ATen op / CUDA runtime call, the 15 largest."""
    for _ in range(5):
        core.runner.execute_model(sched)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(iters):
            core.runner.execute_model(sched)
        step_us = (time.perf_counter() - t0) / iters * 1e6
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    top = [
        {"name": e.key, "calls": e.count / iters, "self_us": e.self_cpu_time_total / iters}
        for e in events[:15]
    ]
    return {"step_us": step_us, "top": top}


def _mark(marks: list[float]) -> None:
    torch.cuda.synchronize()
    marks.append(time.perf_counter())


def profile_kernels(args: argparse.Namespace) -> dict:
    config = create_engine_config(
        args.model,
        load_format="dummy",
        max_model_len=2048,
        attention_backend=args.attention_backend,
        enforce_eager=True,
        async_scheduling=False,
    )
    core = EngineCore(config)
    b = StepBuilder(core)
    sched = b.step(b.prefilled(args.batch, args.context_len), [1] * args.batch)
    k = kernels.profile_kernels(lambda: core.runner.execute_model(sched), num_steps=1)
    print(
        f"{args.model} batch {args.batch} ({config.attention_backend}): "
        f"{k['kernels_per_step']:.0f} kernels, {k['gpu_us_per_step']:.0f} us of kernel time per "
        f"eager decode step, the GPU busy {k['busy_us_per_step']:.0f} us"
    )
    for f, v in k["families"].items():
        print(f"  {f:<14} {v['kernels']:5.0f} x {v['us']:8.1f} us, {v['wall_us']:8.1f} us busy")
    for row in k["top"]:
        print(f"  {row['kernels']:5.0f} x {row['us']:8.1f} us  {row['name'][:90]}")
    return {
        "kernels": k["kernels_per_step"],
        "kernel_time_us": k["gpu_us_per_step"],
        "attention_backend": config.attention_backend,
        "families": k["families"],
        "top": k["top"],
    }


if __name__ == "__main__":
    main()
