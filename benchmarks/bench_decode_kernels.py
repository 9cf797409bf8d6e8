"""The fused decode ops on the GPU: each op's GEMV path against the unfused sequence it replaces.

For each shipped config (bf16, random weights, one set per layer so weights stream from HBM as in
a real step) and token count M, times inside one CUDA graph (CUDA events, warm-up, median of
replays):
  - per op, a chain of num_layers calls (one per layer's weights), per call:
      qkv     rms_norm_qkv_rope     vs fused_add_rms_norm + F.linear(qkv) + rotary_embedding
      o       linear_add_residual   vs F.linear(o) (its add sits in the next fused_add_rms_norm)
      gate_up rms_norm_gate_up_silu vs fused_add_rms_norm + F.linear(gate_up) + silu_and_mul
      down    linear_add_residual   vs F.linear(down)
      lm_head rms_norm_linear_out (float32) vs rms_norm + F.linear(lm_head).float() (one call)
    "cuda_core", "mma" and "wide" force a fused kernel (max_gemv_tokens=32 with VGRAPH_GEMV=
    cuda_core, =mma or =wide: the CUDA-core GEMV, the tensor-core one or the wide tensor-core one,
    with --wide-sweep also at each split of K and tiles a CTA), "auto" uses the op's per-shape
    table; at one token "one_pair" is the CUDA-core kernel with a CTA per row pair
    (VGRAPH_GEMV_PAIRS=1) and "no_loop" its packed CTAs, a CTA per group
    (VGRAPH_GEMV_CTAS_PER_SM=0), against which
    "cuda_core" packs pairs and loops a smaller grid over them as its launcher picks; above 8
    tokens "mma_whole" is the tensor-core kernel with whole column tiles (VGRAPH_MMA_SPLIT=0)
    and "mma_split" split by tokens at every shape (=1), against which "mma" splits where its
    launcher picks;
  - the whole layer stack without attention: 4 fused ops per layer vs today's 8 launches.
Also prints, per op, the largest M up to which a fused kernel beats the unfused sequence, the
smallest M from which the tensor-core kernel beats the CUDA-core one and the smallest from which
the wide kernel beats both: the per-shape table in
csrc/decode_cuda.cu comes from them. VGRAPH_PDL=0 in the environment
launches without programmatic dependent launch (for a comparison). Writes JSON to --out.

    python benchmarks/bench_decode_kernels.py --out benchmarks/results/decode_kernels.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from vgraph._ext import ext_unavailable_reason, has_cuda_kernels, load_ext
from vgraph.bench.kernels import time_graph

CONFIGS = ("SmolLM2-135M", "Llama-3.2-1B", "Qwen3-0.6B")
CONFIG_DIR = Path(__file__).resolve().parents[1] / "vgraph" / "models" / "configs"
DTYPE = torch.bfloat16
OPS = torch.ops.vgraph_C if hasattr(torch.ops, "vgraph_C") else None
EPS = 1e-5


def chain(call: Callable[[int], object], num_layers: int) -> Callable[[], None]:
    """One call per layer, back to back."""

    def step() -> None:
        for i in range(num_layers):
            call(i)

    return step


class Model:
    """Per-layer random weights of one config and the step's buffers for up to 32 tokens."""

    def __init__(self, name: str) -> None:
        cfg = json.loads((CONFIG_DIR / name / "config.json").read_text())
        self.name = name
        self.hidden = h = cfg["hidden_size"]
        self.nh, self.nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.hd = cfg.get("head_dim") or h // self.nh
        self.inter = i = cfg["intermediate_size"]
        self.layers = cfg["num_hidden_layers"]
        self.vocab = cfg["vocab_size"]
        self.n_qkv = (self.nh + 2 * self.nkv) * self.hd
        self.qk_norm = "Qwen3" in name

        def w(*shape: int) -> torch.Tensor:
            return (torch.randn(*shape, device="cuda") * shape[-1] ** -0.5).to(DTYPE)

        self.w_qkv = [w(self.n_qkv, h) for _ in range(self.layers)]
        self.w_o = [w(h, self.nh * self.hd) for _ in range(self.layers)]
        self.w_gu = [w(2 * i, h) for _ in range(self.layers)]
        self.w_down = [w(h, i) for _ in range(self.layers)]
        self.norm_w = [w(h) + 1 for _ in range(self.layers)]
        self.w_lm = w(self.vocab, h)
        self.cos_sin = torch.randn(4096, self.hd, device="cuda")  # float32 [max_pos, hd]
        self.positions = torch.randint(0, 4096, (32,), device="cuda")
        self.residual = torch.randn(32, h, device="cuda").to(DTYPE)
        self.hidden_x = torch.randn(32, h, device="cuda").to(DTYPE)
        self.attn = torch.randn(32, self.nh * self.hd, device="cuda").to(DTYPE)
        self.act = torch.randn(32, i, device="cuda").to(DTYPE)
        self.qkv = torch.empty(32, self.n_qkv, device="cuda", dtype=DTYPE)
        self.act_out = torch.empty(32, i, device="cuda", dtype=DTYPE)
        self.logits = torch.empty(32, self.vocab, device="cuda", dtype=torch.float32)

    # ---- one op, fused -----------------------------------------------------------------------
    def fused(self, op: str, m: int, limit: int | None) -> Callable[[], None]:
        res, x, pos = self.residual[:m], self.hidden_x[:m], self.positions[:m]
        rope = not self.qk_norm

        def qkv(layer: int) -> None:
            OPS.rms_norm_qkv_rope(
                self.qkv[:m], res, self.norm_w[layer], EPS, self.w_qkv[layer], None,
                pos if rope else None, self.cos_sin if rope else None, self.hd, self.nh,
                self.nkv, limit,
            )  # fmt: skip

        calls = {
            "qkv": qkv,
            "o": lambda i: OPS.linear_add_residual(res, self.attn[:m], self.w_o[i], limit),
            "gate_up": lambda i: OPS.rms_norm_gate_up_silu(
                self.act_out[:m], res, self.norm_w[i], EPS, self.w_gu[i], limit
            ),
            "down": lambda i: OPS.linear_add_residual(res, self.act[:m], self.w_down[i], limit),
        }
        if op == "lm_head":
            return lambda: OPS.rms_norm_linear_out(
                self.logits[:m], x, self.norm_w[0], EPS, self.w_lm, limit
            )
        return chain(calls[op], self.layers)

    # ---- the same op, as today's model runs it ---------------------------------------------------
    def unfused(self, op: str, m: int) -> Callable[[], None]:
        res, x, pos = self.residual[:m], self.hidden_x[:m], self.positions[:m]
        h = self.hidden_x[:m].clone()

        def qkv(i: int) -> None:
            OPS.fused_add_rms_norm(h, res, self.norm_w[i], EPS)
            y = F.linear(h, self.w_qkv[i])
            if not self.qk_norm:
                q, k = (
                    y[:, : self.nh * self.hd],
                    y[:, self.nh * self.hd : (self.nh + self.nkv) * self.hd],
                )
                OPS.rotary_embedding(pos, q, k, self.hd, self.cos_sin, True)

        def gate_up(i: int) -> None:
            OPS.fused_add_rms_norm(h, res, self.norm_w[i], EPS)
            OPS.silu_and_mul(self.act_out[:m], F.linear(h, self.w_gu[i]))

        calls = {
            "qkv": qkv,
            "o": lambda i: F.linear(self.attn[:m], self.w_o[i]),
            "gate_up": gate_up,
            "down": lambda i: F.linear(self.act[:m], self.w_down[i]),
        }

        def lm_head() -> None:
            OPS.rms_norm(h, x, self.norm_w[0], EPS)
            F.linear(h, self.w_lm).float()

        if op == "lm_head":
            return lm_head
        return chain(calls[op], self.layers)

    # ---- the layer stack without attention ---------------------------------------------------
    def stack(self, m: int, fused: bool, limit: int | None) -> Callable[[], None]:
        ops = ("qkv", "o", "gate_up", "down")
        steps = [self.fused(op, m, limit) if fused else self.unfused(op, m) for op in ops]
        return chain(lambda i: steps[i](), len(steps))


KERNELS = ("cuda_core", "mma", "wide")


# The one-token CUDA-core variants beside the launcher's choice ("cuda_core"): a CTA per row pair,
# and packed CTAs; neither loops a smaller grid over its groups.
NO_LOOP = {"VGRAPH_GEMV_CTAS_PER_SM": "0"}
ONE_TOKEN_VARIANTS = {"one_pair": {"VGRAPH_GEMV_PAIRS": "1"} | NO_LOOP, "no_loop": NO_LOOP}
# Above 8 tokens, the tensor-core kernel's launch split by tokens nowhere / everywhere, beside the
# launcher's choice ("mma").
SPLIT_VARIANTS = {
    "mma_whole": {"VGRAPH_MMA_SPLIT": "0"},
    "mma_split": {"VGRAPH_MMA_SPLIT": "1"},
}


def timed_with(kernel: str, step: Callable[[], None], calls: int, replays: int,
               switches: dict[str, str] | None = None) -> float:  # fmt: skip
    """time_graph with VGRAPH_GEMV=kernel (and the other switches given) while the graph is
    captured (the op reads them then)."""
    env = {"VGRAPH_GEMV": kernel} | (switches or {})
    os.environ.update(env)
    try:
        return time_graph(step, calls, replays)
    finally:
        for key in env:
            del os.environ[key]


def suggest(rows: list[dict], op: str) -> dict:
    """max_tokens: the largest M (of the measured ones) up to which the fastest fused kernel beats
    the unfused sequence; mma_from: the smallest M from which the tensor-core kernel beats the
    CUDA-core one; wide_from: the smallest from which the wide tensor-core kernel beats both."""
    best, mma_from, wide_from, unbroken = 0, None, None, True
    for r in sorted((r for r in rows if r["op"] == op), key=lambda r: r["m"]):
        if mma_from is None and r["mma_us"] < r["cuda_core_us"]:
            mma_from = r["m"]
        if wide_from is None and r["wide_us"] < min(r["cuda_core_us"], r["mma_us"]):
            wide_from = r["m"]
        unbroken = unbroken and min(r[f"{k}_us"] for k in KERNELS) < r["unfused_us"]
        if unbroken:
            best = r["m"]
    return {"max_tokens": best, "mma_from": mma_from, "wide_from": wide_from}


def wide_sweep(model: Model, op: str, m: int, calls: int, replays: int) -> dict[str, float]:
    """The wide kernel's time per (split of K, tiles a CTA), for the splits that divide the op's
    chunks of K."""
    k = {"qkv": model.hidden, "o": model.nh * model.hd, "gate_up": model.hidden,
         "down": model.inter, "lm_head": model.hidden}[op]  # fmt: skip
    out = {}
    for split in (1, 2, 4, 8):
        if (k // 64) % split:
            continue
        for warps in (2, 4, 8):
            switches = {"VGRAPH_WIDE_SPLIT": str(split), "VGRAPH_WIDE_WARPS": str(warps)}
            try:
                us = timed_with("wide", model.fused(op, m, 32), calls, replays, switches)
            except RuntimeError:  # the split leaves too little shared memory
                continue
            out[f"s{split}w{warps}"] = us
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS))
    parser.add_argument("--tokens", nargs="+", type=int, default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--replays", type=int, default=30)
    parser.add_argument("--out", default="benchmarks/results/decode_kernels.json")
    parser.add_argument("--wide-sweep", action="store_true",
                        help="also time the wide kernel at every split of K (1, 2, 4, 8) and "
                        "tiles a CTA (2, 4, 8) that fit (VGRAPH_WIDE_SPLIT / _WARPS)")  # fmt: skip
    parser.add_argument("--no-stacks", action="store_true", help="skip the layer stacks")
    args = parser.parse_args()
    if not (torch.cuda.is_available() and load_ext() and has_cuda_kernels("linear_out")):
        why = ext_unavailable_reason() or ("no GPU" if not torch.cuda.is_available() else "")
        print(f"needs a GPU and a CUDA build of vgraph._C: {why or 'a CPU build was loaded'}")
        return 1
    pdl = os.environ.get("VGRAPH_PDL", "1") != "0"
    rows, stacks, thresholds = [], [], {}
    for name in args.configs:
        model = Model(name)
        for m in args.tokens:
            for op in ("qkv", "o", "gate_up", "down", "lm_head"):
                calls = 1 if op == "lm_head" else model.layers
                row = {"config": name, "op": op, "m": m}
                for kernel in KERNELS:
                    row[f"{kernel}_us"] = timed_with(kernel, model.fused(op, m, 32), calls,
                                                     args.replays)  # fmt: skip
                kernel, variants = ("cuda_core", ONE_TOKEN_VARIANTS) if m == 1 else (
                    "mma", SPLIT_VARIANTS if m > 8 else {})  # fmt: skip
                for variant, switches in variants.items():
                    step = model.fused(op, m, 32)
                    row[f"{variant}_us"] = timed_with(kernel, step, calls, args.replays, switches)
                if args.wide_sweep:
                    row["wide_sweep"] = wide_sweep(model, op, m, calls, args.replays)
                row["auto_us"] = time_graph(model.fused(op, m, None), calls, args.replays)
                row["unfused_us"] = time_graph(model.unfused(op, m), calls, args.replays)
                rows.append(row)
            if args.no_stacks:
                continue
            s = {"config": name, "m": m, "layers": model.layers}
            s["fused_us"] = time_graph(model.stack(m, True, None), 1, args.replays)
            for kernel in KERNELS:
                s[f"{kernel}_us"] = timed_with(kernel, model.stack(m, True, 32), 1, args.replays)
            if m > 8:
                s["mma_whole_us"] = timed_with("mma", model.stack(m, True, 32), 1, args.replays,
                                               SPLIT_VARIANTS["mma_whole"])  # fmt: skip
            s["unfused_us"] = time_graph(model.stack(m, False, None), 1, args.replays)
            stacks.append(s)
        thresholds[name] = {op: suggest([r for r in rows if r["config"] == name], op)
                            for op in ("qkv", "o", "gate_up", "down", "lm_head")}  # fmt: skip
        del model
        torch.cuda.empty_cache()

    print(f"\nper call, us (median of {args.replays} graph replays; PDL {'on' if pdl else 'off'})")
    extra = ("one_pair", "no_loop", "mma_whole", "mma_split")
    head = " ".join(f"{c:>9}" for c in (*extra, *KERNELS, "auto", "unfused"))
    print(f"{'config':14} {'op':8} {'M':>3} {head} {'x':>6}")
    for r in rows:
        best = min(r[f"{k}_us"] for k in KERNELS)
        cols = [f"{r[f'{c}_us']:9.2f}" if f"{c}_us" in r else f"{'-':>9}" for c in extra]
        cols += [f"{r[f'{c}_us']:9.2f}" for c in (*KERNELS, "auto", "unfused")]
        print(f"{r['config']:14} {r['op']:8} {r['m']:3d} {' '.join(cols)} "
              f"{r['unfused_us'] / best:6.2f}")  # fmt: skip
    if args.wide_sweep:
        print("\nthe wide kernel per split of K (s) and tiles a CTA (w), us per call")
        for r in rows:
            cells = " ".join(f"{key}:{us:.2f}" for key, us in r["wide_sweep"].items())
            print(f"{r['config']:14} {r['op']:8} {r['m']:3d} rule {r['wide_us']:.2f}  {cells}")
    print("\nlayer stack without attention, us per step")
    print(f"{'config':14} {'M':>3} {'auto':>8} {'cuda_core':>10} {'mma':>8} {'mma_whole':>9} "
          f"{'unfused':>8}")  # fmt: skip
    for s in stacks:
        whole = f"{s['mma_whole_us']:9.1f}" if "mma_whole_us" in s else f"{'-':>9}"
        print(f"{s['config']:14} {s['m']:3d} {s['fused_us']:8.1f} {s['cuda_core_us']:10.1f} "
              f"{s['mma_us']:8.1f} {whole} {s['unfused_us']:8.1f}")  # fmt: skip
    print("\nper op, fused up to max_tokens, tensor cores from mma_from:", json.dumps(thresholds))
    result = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "pdl": pdl,
        "dtype": str(DTYPE),
        "ops": rows,
        "stacks": stacks,
        "thresholds": thresholds,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
