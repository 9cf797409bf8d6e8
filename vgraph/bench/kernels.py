"""Kernels per step and GPU time per kernel family, from torch.profiler's CUDA activity; and
time_graph, the CUDA-graph timing loop of the kernel benchmarks in benchmarks/.

Kernels replayed inside a CUDA graph are reported like launched ones, so the same count works for
every mode. Kernel durations overlap under programmatic dependent launch; each family's wall_us
is its share of the GPU's busy time instead (wall_times), which adds up to the step's. Families
group kernel names by what they compute; a name no rule knows is its own family, so nothing is
hidden under "other".
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import torch

# first match wins; the fused decode ops are named before the plain matrix and norm kernels
KERNEL_FAMILIES = [
    ("fused_decode", r"vgraph::gemv::|gemv_kernel<"),
    ("attention", r"paged_attention|attention|flash|fmha"),
    ("kv_cache_write", r"reshape_and_cache|cache_kernel"),
    ("matmul", r"gemm|gemv|nvjet|xmma|cutlass|matmul|splitK|sm90_"),
    ("norm", r"rms|layer_?norm"),
    ("rotary", r"rotary|rope"),
    ("embedding", r"embedding_kernel"),  # after rotary: rotary_embedding_kernel
    ("activation", r"silu|gelu|act_and_mul"),
    ("sampling", r"argmax|arg_max|topk|sort|softmax|exponential|multinomial"),
    ("copy_fill", r"copy|memcpy|memset|fill|cat_|CatArray"),
    ("index", r"index|gather|scatter"),
    ("reduce", r"reduce"),
    ("elementwise", r"elementwise|vectorized|unrolled"),
    ("triton", r"^triton_"),
]
_RULES = [(family, re.compile(pattern, re.IGNORECASE)) for family, pattern in KERNEL_FAMILIES]


def kernel_family(name: str) -> str:
    for family, rule in _RULES:
        if rule.search(name):
            return family
    return name.split("(")[0].split("<")[0][:60]


def wall_times(spans: list[tuple[float, float]]) -> list[float]:
    """Each kernel's share of the time the GPU is busy: the part of its [start, end) that no
    kernel started before it covers. Kernels overlap under programmatic dependent launch (one
    starts, loads its weights and waits while the previous one runs), so their durations add up to
    more than the step; these shares add up to the busy time, each kernel charged what it adds."""
    order = sorted(range(len(spans)), key=lambda i: spans[i][0])
    out = [0.0] * len(spans)
    covered = float("-inf")
    for i in order:
        start, end = spans[i]
        out[i] = max(0.0, end - max(start, covered))
        covered = max(covered, end)
    return out


def short_name(name: str) -> str:
    """A kernel's name without its argument list and return type (its template arguments stay:
    they tell the epilogues and tile sizes apart)."""
    name = name.replace("(anonymous namespace)", "{anonymous}")
    depth = 0
    for i, ch in enumerate(name):  # the first "(" outside template brackets opens the arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            name = name[:i]
            break
    return name.removeprefix("void ").strip()


def step_sequence(
    kernels: list[tuple[str, float]], spans: list[tuple[float, float]], num_steps: int
) -> list[dict[str, Any]]:
    """The first step's kernels in the order they started: short name, duration, and busy share
    (wall_times), so a step's time can be read kernel by kernel."""
    per_step = len(kernels) // num_steps
    order = sorted(range(len(spans)), key=lambda i: spans[i][0])[:per_step]
    walls = wall_times([spans[i] for i in order])
    return [
        {"name": short_name(kernels[i][0]), "us": kernels[i][1], "wall_us": wall}
        for i, wall in zip(order, walls)
    ]


def summarize_kernels(
    kernels: list[tuple[str, float]],  # (kernel name, GPU microseconds) of every launch
    num_steps: int,
    spans: list[tuple[float, float]] | None = None,  # (start, end) us of each, same order
) -> dict[str, Any]:
    """Per-step kernel count and GPU time, by family and for the 10 largest kernels; with spans,
    also each family's and each of those kernels' share of the busy time (wall_times), the busy
    time per step, and the first step's kernels in order (step_sequence)."""
    count: Counter[str] = Counter()
    time_us: defaultdict[str, float] = defaultdict(float)
    wall_us: defaultdict[str, float] = defaultdict(float)
    fam_count: Counter[str] = Counter()
    fam_us: defaultdict[str, float] = defaultdict(float)
    fam_wall: defaultdict[str, float] = defaultdict(float)
    walls = wall_times(spans) if spans is not None else [0.0] * len(kernels)
    for (name, us), wall in zip(kernels, walls):
        count[name] += 1
        time_us[name] += us
        wall_us[name] += wall
        family = kernel_family(name)
        fam_count[family] += 1
        fam_us[family] += us
        fam_wall[family] += wall
    top = sorted(time_us, key=time_us.get, reverse=True)[:10]
    families = {}
    for f in sorted(fam_us, key=fam_us.get, reverse=True):
        families[f] = {"kernels": fam_count[f] / num_steps, "us": fam_us[f] / num_steps}
        if spans is not None:
            families[f]["wall_us"] = fam_wall[f] / num_steps
    out = {
        "kernels_per_step": len(kernels) / num_steps,
        "gpu_us_per_step": sum(time_us.values()) / num_steps,
        "families": families,
        "top": [
            {"name": n, "kernels": count[n] / num_steps, "us": time_us[n] / num_steps} for n in top
        ],
    }
    if spans is not None:
        out["busy_us_per_step"] = sum(walls) / num_steps
        for entry in out["top"]:
            entry["wall_us"] = wall_us[entry["name"]] / num_steps
        out["sequence"] = step_sequence(kernels, spans, num_steps)
    return out


def idle_gaps(
    activity: list[tuple[str, float, float]],  # (name, start us, end us) of kernels and copies
    num_steps: int,
    top: int = 8,
) -> dict[str, Any]:
    """Where the GPU waits: from the first activity's start to the last one's end (span_us, per
    step: what a loop's step takes on the device), the time nothing ran (idle_us), and the `top`
    longest gaps with what ended before and what started after each. A loop whose step exceeds
    the GPU's busy time shows here whether the device waited (for the host, a copy) or ran the
    same kernels slower (no idle time)."""
    if not activity:
        return {"span_us_per_step": 0.0, "idle_us_per_step": 0.0, "longest_gaps": []}
    order = sorted(range(len(activity)), key=lambda i: activity[i][1])
    first = order[0]
    covered, last = activity[first][2], first
    gaps = []
    for i in order[1:]:
        _, start, end = activity[i]
        if start > covered:
            gaps.append((start - covered, last, i))
        if end > covered:
            covered, last = end, i
    longest = sorted(gaps, key=lambda g: g[0], reverse=True)[:top]
    return {
        "span_us_per_step": (covered - activity[first][1]) / num_steps,
        "idle_us_per_step": sum(g[0] for g in gaps) / num_steps,
        "longest_gaps": [
            {"us": us, "after": short_name(activity[a][0]), "before": short_name(activity[b][0])}
            for us, a, b in longest
        ],
    }


def profile_kernels(step: Callable[[], Any], num_steps: int = 10) -> dict[str, Any]:
    """Run step() num_steps times under the CUDA profiler (after one unprofiled run): the kernel
    summary (summarize_kernels) and where the GPU waited (idle_gaps, copies counted as busy)."""
    from torch.profiler import ProfilerActivity, profile

    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(num_steps):
            step()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    kernels = [e for e in events if not _is_transfer(e.name)]
    out = summarize_kernels(
        [(e.name, e.device_time) for e in kernels],
        num_steps,
        [(e.time_range.start, e.time_range.end) for e in kernels],
    )
    activity = [(e.name, e.time_range.start, e.time_range.end) for e in events]
    return out | idle_gaps(activity, num_steps)


def _is_transfer(name: str) -> bool:
    """Host-device copies are activity records too, but not kernels of the step."""
    return name.startswith("Memcpy") or name.startswith("Memset")


def time_graph(step: Callable[[], Any], calls: int, replays: int) -> float:
    """Median microseconds per call of `step` (which issues `calls` ops) captured in one CUDA
    graph: one eager run first (lazy initialisation stays out of the capture), three untimed
    replays, then `replays` timed with CUDA events."""
    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(3):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(replays):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    del graph
    return statistics.median(times)
