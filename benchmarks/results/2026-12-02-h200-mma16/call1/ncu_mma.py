"""One launch per (config, op, M, forced column tiles) of the fused decode ops' GEMV kernels,
for Nsight Compute (each kernel alone, caches flushed). The order is printed first."""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".."))
from bench_decode_kernels import Model  # noqa: E402

from vgraph._ext import load_ext  # noqa: E402

assert load_ext()

CASES = [  # config, op, M, kernel, forced NT
    ("SmolLM2-135M", "o", 8, "mma", ""),
    ("SmolLM2-135M", "o", 8, "mma", "2"),
    ("SmolLM2-135M", "o", 16, "mma", ""),
    ("SmolLM2-135M", "qkv", 8, "mma", ""),
    ("SmolLM2-135M", "qkv", 16, "mma", ""),
    ("SmolLM2-135M", "gate_up", 8, "mma", ""),
    ("SmolLM2-135M", "gate_up", 8, "mma", "2"),
    ("SmolLM2-135M", "gate_up", 16, "mma", ""),
    ("SmolLM2-135M", "down", 8, "mma", ""),
    ("SmolLM2-135M", "down", 16, "mma", ""),
    ("SmolLM2-135M", "o", 1, "cuda_core", ""),
    ("SmolLM2-135M", "gate_up", 1, "cuda_core", ""),
    ("Llama-3.2-1B", "gate_up", 8, "mma", ""),
    ("Llama-3.2-1B", "gate_up", 8, "mma", "2"),
    ("Llama-3.2-1B", "gate_up", 16, "mma", ""),
    ("Llama-3.2-1B", "down", 8, "mma", ""),
    ("Llama-3.2-1B", "down", 16, "mma", ""),
]

models = {}
for i, (cfg, op, m, kernel, nt) in enumerate(CASES):
    print(f"case {i}: {cfg} {op} M={m} {kernel} NT={nt or 'auto'}", flush=True)
for cfg, op, m, kernel, nt in CASES:
    if cfg not in models:
        models[cfg] = Model(cfg)
        models[cfg].layers = 1
    os.environ["VGRAPH_GEMV"] = kernel
    os.environ["VGRAPH_MMA_NT"] = nt
    models[cfg].fused(op, m, 32)()
torch.cuda.synchronize()
