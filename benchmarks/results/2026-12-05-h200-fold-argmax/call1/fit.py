"""Fixed cost and streaming rate of the GEMV kernels: per-call time of a chain of 16 calls (one
weight matrix each, so every call streams from HBM) captured in a CUDA graph, at several matrix
sizes; a least-squares line us = fixed + bytes / rate per kernel and token count. Tells whether a
kernel's gap to the LM head's 4.3 TB/s is a fixed cost a call (ramp and tail) or its rate.

    python fit.py  # prints a table, writes fit.json next to --out (default ./fit.json)
"""

import json
import os
import sys

import torch

from vgraph._ext import load_ext
from vgraph.bench.kernels import time_graph

load_ext()
OPS = torch.ops.vgraph_C
LAYERS, K = 16, 2048
out = sys.argv[1] if len(sys.argv) > 1 else "fit.json"


def timed(kernel: str, n: int, k: int, tokens: int, op: str) -> float:
    # "wide_deep": the wide kernel's deeper ring (VGRAPH_WIDE_STAGES=11: 11 stages, 9 at 16 tokens);
    # "wide_refill": its chunk D - 1 issued ahead of the activations (VGRAPH_WIDE_EARLY_REFILL=1)
    os.environ["VGRAPH_WIDE_STAGES"] = "11" if kernel == "wide_deep" else ""
    os.environ["VGRAPH_WIDE_EARLY_REFILL"] = "1" if kernel == "wide_refill" else ""
    kernel = kernel.removesuffix("_deep").removesuffix("_refill")
    os.environ["VGRAPH_GEMV"] = "" if kernel == "cublas" else kernel
    max_tokens = 0 if kernel == "cublas" else 32
    g = torch.Generator(device="cuda").manual_seed(n + k)
    ws = [
        torch.randn(n, k, device="cuda", generator=g).mul_(k**-0.5).bfloat16()
        for _ in range(LAYERS)
    ]
    x = torch.randn(tokens, k, device="cuda", generator=g).bfloat16()
    nw = torch.ones(k, device="cuda", dtype=torch.bfloat16)
    if op == "gate_up":
        y = torch.empty(tokens, n // 2, device="cuda", dtype=torch.bfloat16)

        def step() -> None:
            for w in ws:
                OPS.rms_norm_gate_up_silu(y, x, nw, 1e-5, w, max_tokens)
    else:
        res = torch.zeros(tokens, n, device="cuda", dtype=torch.bfloat16)

        def step() -> None:
            for w in ws:
                OPS.linear_add_residual(res, x, w, max_tokens)

    us = time_graph(step, LAYERS, 50)
    ws.clear()  # free the weights before the next size
    torch.cuda.empty_cache()
    return us


rows = []
for op, sizes, kernels in (
    (
        "gate_up",
        [(n, K) for n in (4096, 8192, 16384, 32768)],
        ("wide", "wide_deep", "wide_refill", "cuda_core", "cublas"),
    ),
    (
        "down",
        [(2048, k) for k in (2048, 4096, 8192, 16384)],
        ("cuda_core", "mma", "wide", "wide_refill", "cublas"),
    ),
):
    for tokens in (1, 16):
        for kernel in kernels:
            if kernel == "cuda_core" and tokens > 1:
                continue
            pts = [(n * k * 2, timed(kernel, n, k, tokens, op)) for n, k in sizes]
            mb = [b / 1e6 for b, _ in pts]
            us = [t for _, t in pts]
            mx, my = sum(mb) / len(mb), sum(us) / len(us)
            slope = sum((a - mx) * (b - my) for a, b in zip(mb, us)) / sum(
                (a - mx) ** 2 for a in mb
            )
            fixed = my - slope * mx
            row = {
                "op": op,
                "tokens": tokens,
                "kernel": kernel,
                "points_mb_us": list(zip(mb, us)),
                "fixed_us": fixed,
                "rate_tb_s": 1 / slope if slope > 0 else None,
            }  # MB/us = TB/s
            rows.append(row)
            rate = "-" if row["rate_tb_s"] is None else f"{row['rate_tb_s']:.2f}"
            pts_s = " ".join(f"{a:.0f}MB:{b:.1f}" for a, b in zip(mb, us))
            head = f"{op:8s} M={tokens:<3d} {kernel:10s} fixed {fixed:5.1f} us  rate {rate} TB/s"
            print(f"{head} | {pts_s}")
with open(out, "w") as f:
    json.dump(rows, f, indent=1)
