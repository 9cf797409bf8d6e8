"""Decode-step latency of variants of the decode path, timed in turns in one process: one engine
per variant is started (`vgraph bench step`'s start-up, with the variant's switch set while the
engine loads, prefills and captures its graphs), then their steps run in turns, a block of steps
each, round after round, so a slow spell of the host or the GPU falls on every variant alike.
Variants: `fused` (the default path: fused decode ops, each on the kernel its shape's table picks,
attention appending the step's K/V in its own launch), `cuda_core` (the fused ops on the CUDA-core
GEMV only, VGRAPH_GEMV=cuda_core: the path before the tensor-core kernel), `no_append` (fused ops,
a separate cache-write launch per layer, as before the append), `torch` (LlamaModel's fused ops
off: norm, cuBLAS, rope / silu kernels), `chunk128` / `chunk256` (the attention's smallest
context partition at 128 / 256 positions instead of 64, VGRAPH_ATTN_MIN_CHUNK), `copy_outside`
(the step's input copy launched by the host before the replay, not recorded as the FULL graph's
first node: ModelRunner.full_graphs_copy_inputs off), `one_pair` (the one-token CUDA-core GEMV
with a CTA per row pair, VGRAPH_GEMV_PAIRS=1, where its launcher packs several), `norm_apart`
(the final norm in its own kernel before linear_out: LlamaModel.final_norm_in_head off),
`attn_gt1` / `attn_gt2` / `attn_gt8` (attention with at most 1 / 2 / 8 query heads a CTA at
every batch size, VGRAPH_ATTN_GROUP_HEADS, in place of the launcher's rule; `attn_gt8` is the
rule before 2026-12-03: as many as the GQA ratio allows), `attn_split` (attention splits every
context longer than its smallest partition, VGRAPH_ATTN_ONE_PART_ITERS=0), `no_loop` (the
one-token CUDA-core GEMV with a CTA per group of row pairs where its launcher has a smaller grid
loop over them, VGRAPH_GEMV_CTAS_PER_SM=0), `loop2` / `loop3` (every one-token GEMV with more
groups than 2 / 3 CTAs an SM loops at that many), `small_off` (only grids over one wave loop,
small matrices keep a CTA per group, VGRAPH_GEMV_SMALL_MIB=0), `small1` / `small3` (small
matrices loop at 1 / 3 CTAs an SM instead of 2), `small16` (matrices up to 16 MiB count as small
instead of 4), `loop_all` (also the shapes whose table entry keeps a CTA per group loop,
VGRAPH_GEMV_LOOP=1), `gate_up16` / `qkv16` / `down16` (the gate/up, QKV or residual projections
fused up to 16 tokens at every shape, VGRAPH_GEMV_MAX_TOKENS_GATE_UP / _QKV / _RESIDUAL, in place
of the per-shape table), `all16` (all three), `qkv16_gt2` (qkv16 with attn_gt2), `split_off` /
`split_all` (above 8 tokens the tensor-core GEMV keeps whole column tiles at every shape /
splits its launch by tokens at every shape, VGRAPH_MMA_SPLIT=0 / 1, where its launcher
splits small matrices whose split grid fits the GPU), `pdl_layers_off` (the norm, rope and
silu kernels launched without programmatic stream serialization, VGRAPH_PDL_LAYERS=0),
`blaslt` (torch's GEMMs through cuBLASLt,
torch.backends.cuda.preferred_blas_library("cublaslt"), instead of cuBLAS), `torch_embedding`
(the token embedding through F.embedding instead of vgraph_C::embedding), `wide_norm` (the QKV
and gate/up projections fused up to 16 tokens, on the wide tensor-core GEMV from 2 tokens on,
VGRAPH_GEMV_WIDE_FROM_QKV / _GATE_UP), `wide_norm_head` (wide_norm, and the final norm + LM head
likewise), `wide_gate_up` / `wide_qkv` (wide_norm for one of the two), `wide_norm_w4` (wide_norm
with 4 tiles a CTA, VGRAPH_WIDE_WARPS=4), `wide_norm_late` (wide_norm, the wide kernel letting
the next kernel start only after its loop, VGRAPH_WIDE_LATE_TRIGGER=1, since the default),
`wide_gate_up_late` / `wide_qkv_late` (likewise for one of the two), `wide_off` (the table's wide
kernel off, VGRAPH_GEMV_WIDE_FROM_QKV / _GATE_UP=0: Qwen3-0.6B's path before it),
`wide_off_llama` (wide_off with QKV fused up to 8 tokens and gate/up at one: Llama-3.2-1B's path
before it; the switches apply to every shape), `wide_early` (the wide kernel letting the next
kernel start at once, VGRAPH_WIDE_LATE_TRIGGER=0), `wide_gate_up_from2` (gate/up on the wide
kernel from 2 tokens, VGRAPH_GEMV_WIDE_FROM_GATE_UP=2: Llama-3.2-1B's one token on CUDA cores;
the switch applies to every shape), `pairs2` / `pairs4` (the one-token CUDA-core GEMV with 2 / 4
row pairs a CTA at every shape, each on its own warps, VGRAPH_GEMV_PAIRS: fewer, fuller CTAs),
`pairs4_small1` (pairs4, small matrices looping at 1 CTA an SM), `pack_off` (no shape packs
row pairs by the table's `pack`, VGRAPH_GEMV_PACK=0: SmolLM2-135M's path before 2026-12-04),
`norm_scaled` / `norm_first` (the CUDA-core and tensor-core kernels' norm ops scale the sums by
1 / rms / normalize x first at every shape, VGRAPH_GEMV_NORM_SCALED=1 / 0), `pdl_max4` /
`pdl_max16` / `pdl_max48` (GEMVs over more than 4 / 16 / 48 MiB of weights launched without
programmatic stream serialization, VGRAPH_PDL_MAX_MIB), `head_wide` / `head_mma` (the final
norm + LM head fused up to 16 tokens, on the wide tensor-core kernel from 2 tokens / on the
table's kernel, VGRAPH_GEMV_MAX_TOKENS_NORM_OUT and VGRAPH_GEMV_WIDE_FROM_NORM_OUT), `qkv_wide1`
(the QKV projection on the wide kernel from one token, VGRAPH_GEMV_WIDE_FROM_QKV=1; the
switches apply to every shape), `argmax4` / `argmax8` (greedy argmax with a row cut over 4 / 8
CTAs, VGRAPH_ARGMAX_PARTS), `l2_evict_first` / `l2_normal` (the GEMVs' weight loads with an L2
evict-first policy, since 2026-12-04 the default / unhinted, VGRAPH_GEMV_L2_EVICT_FIRST=1 / 0),
`wide_residual1` (the O and down projections on the wide tensor-core kernel from one token,
VGRAPH_GEMV_WIDE_FROM_RESIDUAL=1), `wide_w4` (the wide kernel with 4 tiles a CTA,
VGRAPH_WIDE_WARPS=4), `wide_residual1_w4` (both), `wide_residual16` / `wide_residual16_w4` (the
O and down projections fused up to 16 tokens, on the wide kernel from 2 tokens; with 4 tiles a
CTA), `greedy_apart` (the sampler's argmax launched after the graph, as before 2026-12-04's
greedy tokens from the LM head op: LlamaForCausalLM.greedy_in_head off), `float32_logits` (the
LM head writing float32 logits, as before 2026-12-04's logits in the model's dtype:
LlamaForCausalLM.float32_logits on), `wpc_o` / `wpc_qkv_o` (the tensor-core GEMV with a warp per
chunk of K where it fits, for the O and down projections / and the QKV projection, at every token
count, VGRAPH_MMA_WARP_PER_CHUNK_RESIDUAL / _QKV=1: SmolLM2-135M's O and QKV at K = 576; the
tree's rule gives the QKV and O projections one up to 8 tokens),
`argmax_plain` (the argmax kernel after the LM head launched without PDL, as before 2026-12-04's
eighteenth pass, VGRAPH_ARGMAX_PDL=0), `gather_off` (the GEMVs' activations loaded each where it
is used, as before the nineteenth pass, not copied to shared memory a chunk at a time,
VGRAPH_GEMV_GATHER=0), `qkv_norm_folded` (each layer's input norm weight folded into its QKV
weight at load, the QKV op with unit_norm: above its GEMV threshold cuBLAS, then one kernel that
scales by 1 / rms and rotates, in place of a norm kernel, cuBLAS and a rope kernel;
VGRAPH_FOLD_QKV_NORM=1). `env:NAME=VALUE,...` is a variant of its own: those VGRAPH_
switches (e.g. `env:VGRAPH_GEMV_GATHER_RESIDUAL=0`); `<variant>+env:NAME=VALUE,...` is a named
variant with those switches added (e.g. `qkv_norm_folded+env:VGRAPH_ATTN_GUESS_BLOCKS=1`).
Arguments after `--` go to `vgraph bench step` (e.g. --modes FULL --batch-sizes 1 16
--context-len 1024; one mode); --out-dir gets one JSON per model and a summary.

    VGRAPH_ENABLE_MULTIPROCESSING=0 python benchmarks/bench_decode_step_ab.py \
        --models SmolLM2-135M Llama-3.2-1B --out-dir /tmp/ab -- --modes FULL --batch-sizes 1 16
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import torch

import vgraph.layers.vocab_parallel_embedding as vocab_embedding
from vgraph.attention.csrc_backend import CsrcAttentionImpl
from vgraph.bench.step import (
    add_cli_args,
    build_report,
    measure,
    print_table,
    profile_runs,
    start_mode,
    summarize,
)
from vgraph.models.llama import LlamaForCausalLM, LlamaModel
from vgraph.worker.model_runner import ModelRunner

VARIANTS = (
    "fused",
    "cuda_core",
    "no_append",
    "torch",
    "chunk128",
    "chunk256",
    "copy_outside",
    "one_pair",
    "norm_apart",
    "attn_gt1",
    "attn_gt2",
    "attn_gt8",
    "attn_split",
    "no_loop",
    "loop2",
    "loop3",
    "small_off",
    "small1",
    "small3",
    "small16",
    "loop_all",
    "gate_up16",
    "qkv16",
    "down16",
    "all16",
    "qkv16_gt2",
    "split_off",
    "split_all",
    "pdl_layers_off",
    "blaslt",
    "torch_embedding",
    "wide_norm",
    "wide_norm_head",
    "wide_gate_up",
    "wide_qkv",
    "wide_norm_w4",
    "wide_norm_late",
    "wide_gate_up_late",
    "wide_qkv_late",
    "wide_off",
    "wide_off_llama",
    "wide_early",
    "wide_gate_up_from2",
    "pairs2",
    "pairs4",
    "pairs4_small1",
    "pack_off",
    "norm_scaled",
    "norm_first",
    "pdl_max4",
    "pdl_max16",
    "pdl_max48",
    "head_wide",
    "head_mma",
    "qkv_wide1",
    "argmax4",
    "argmax8",
    "l2_evict_first",
    "l2_normal",
    "greedy_apart",
    "float32_logits",
    "wpc_o",
    "wpc_qkv_o",
    "argmax_plain",
    "gather_off",
    "qkv_norm_folded",
    "wide_residual1",
    "wide_residual1_w4",
    "wide_w4",
    "wide_residual16",
    "wide_residual16_w4",
)
GATE_UP16 = {"VGRAPH_GEMV_MAX_TOKENS_GATE_UP": "16"}
ALL16 = GATE_UP16 | {"VGRAPH_GEMV_MAX_TOKENS_QKV": "16", "VGRAPH_GEMV_MAX_TOKENS_RESIDUAL": "16"}
# The norm projections (QKV, gate/up) fused up to 16 tokens, on the wide tensor-core kernel from
# 2 tokens on.
WIDE_NORM = {
    "VGRAPH_GEMV_MAX_TOKENS_QKV": "16",
    "VGRAPH_GEMV_MAX_TOKENS_GATE_UP": "16",
    "VGRAPH_GEMV_WIDE_FROM_QKV": "2",
    "VGRAPH_GEMV_WIDE_FROM_GATE_UP": "2",
}
# The table's wide kernel off (its fused ranges on the earlier kernels).
WIDE_OFF = {"VGRAPH_GEMV_WIDE_FROM_QKV": "0", "VGRAPH_GEMV_WIDE_FROM_GATE_UP": "0"}
# The O and down projections fused up to 16 tokens, on the wide kernel from 2 tokens on.
WIDE_RESIDUAL16 = {"VGRAPH_GEMV_MAX_TOKENS_RESIDUAL": "16", "VGRAPH_GEMV_WIDE_FROM_RESIDUAL": "2"}
# Switches the csrc ops read at each launch (so at capture): the variant's, while it starts.
VARIANT_ENV = {
    "cuda_core": {"VGRAPH_GEMV": "cuda_core"},
    "chunk128": {"VGRAPH_ATTN_MIN_CHUNK": "128"},
    "chunk256": {"VGRAPH_ATTN_MIN_CHUNK": "256"},
    "one_pair": {"VGRAPH_GEMV_PAIRS": "1"},
    "attn_gt1": {"VGRAPH_ATTN_GROUP_HEADS": "1"},
    "attn_gt2": {"VGRAPH_ATTN_GROUP_HEADS": "2"},
    "attn_gt8": {"VGRAPH_ATTN_GROUP_HEADS": "8"},
    "attn_split": {"VGRAPH_ATTN_ONE_PART_ITERS": "0"},
    "no_loop": {"VGRAPH_GEMV_CTAS_PER_SM": "0"},
    "loop2": {"VGRAPH_GEMV_CTAS_PER_SM": "2"},
    "loop3": {"VGRAPH_GEMV_CTAS_PER_SM": "3"},
    "small_off": {"VGRAPH_GEMV_SMALL_MIB": "0"},
    "small1": {"VGRAPH_GEMV_SMALL_CTAS_PER_SM": "1"},
    "small3": {"VGRAPH_GEMV_SMALL_CTAS_PER_SM": "3"},
    "small16": {"VGRAPH_GEMV_SMALL_MIB": "16"},
    "loop_all": {"VGRAPH_GEMV_LOOP": "1"},
    "gate_up16": GATE_UP16,
    "qkv16": {"VGRAPH_GEMV_MAX_TOKENS_QKV": "16"},
    "down16": {"VGRAPH_GEMV_MAX_TOKENS_RESIDUAL": "16"},
    "all16": ALL16,
    "qkv16_gt2": {"VGRAPH_GEMV_MAX_TOKENS_QKV": "16", "VGRAPH_ATTN_GROUP_HEADS": "2"},
    "split_off": {"VGRAPH_MMA_SPLIT": "0"},
    "split_all": {"VGRAPH_MMA_SPLIT": "1"},
    "pdl_layers_off": {"VGRAPH_PDL_LAYERS": "0"},
    "wide_norm": WIDE_NORM,
    "wide_norm_head": WIDE_NORM
    | {"VGRAPH_GEMV_MAX_TOKENS_NORM_OUT": "16", "VGRAPH_GEMV_WIDE_FROM_NORM_OUT": "2"},
    "wide_gate_up": {k: v for k, v in WIDE_NORM.items() if "GATE_UP" in k},
    "wide_qkv": {k: v for k, v in WIDE_NORM.items() if "QKV" in k},
    "wide_norm_w4": WIDE_NORM | {"VGRAPH_WIDE_WARPS": "4"},
    "wide_norm_late": WIDE_NORM | {"VGRAPH_WIDE_LATE_TRIGGER": "1"},
    "wide_gate_up_late": {k: v for k, v in WIDE_NORM.items() if "GATE_UP" in k}
    | {"VGRAPH_WIDE_LATE_TRIGGER": "1"},
    "wide_qkv_late": {k: v for k, v in WIDE_NORM.items() if "QKV" in k}
    | {"VGRAPH_WIDE_LATE_TRIGGER": "1"},
    "wide_off": WIDE_OFF,
    "wide_off_llama": WIDE_OFF
    | {"VGRAPH_GEMV_MAX_TOKENS_QKV": "8", "VGRAPH_GEMV_MAX_TOKENS_GATE_UP": "1"},
    "wide_early": {"VGRAPH_WIDE_LATE_TRIGGER": "0"},
    "wide_gate_up_from2": {"VGRAPH_GEMV_WIDE_FROM_GATE_UP": "2"},
    "pairs2": {"VGRAPH_GEMV_PAIRS": "2"},
    "pairs4": {"VGRAPH_GEMV_PAIRS": "4"},
    "pairs4_small1": {"VGRAPH_GEMV_PAIRS": "4", "VGRAPH_GEMV_SMALL_CTAS_PER_SM": "1"},
    "pack_off": {"VGRAPH_GEMV_PACK": "0"},
    "norm_scaled": {"VGRAPH_GEMV_NORM_SCALED": "1"},
    "norm_first": {"VGRAPH_GEMV_NORM_SCALED": "0"},
    "pdl_max4": {"VGRAPH_PDL_MAX_MIB": "4"},
    "pdl_max16": {"VGRAPH_PDL_MAX_MIB": "16"},
    "pdl_max48": {"VGRAPH_PDL_MAX_MIB": "48"},
    "head_wide": {"VGRAPH_GEMV_MAX_TOKENS_NORM_OUT": "16", "VGRAPH_GEMV_WIDE_FROM_NORM_OUT": "2"},
    "head_mma": {"VGRAPH_GEMV_MAX_TOKENS_NORM_OUT": "16"},
    "qkv_wide1": {"VGRAPH_GEMV_WIDE_FROM_QKV": "1"},
    "argmax4": {"VGRAPH_ARGMAX_PARTS": "4"},
    "argmax8": {"VGRAPH_ARGMAX_PARTS": "8"},
    "l2_evict_first": {"VGRAPH_GEMV_L2_EVICT_FIRST": "1"},
    "l2_normal": {"VGRAPH_GEMV_L2_EVICT_FIRST": "0"},
    "wide_residual1": {"VGRAPH_GEMV_WIDE_FROM_RESIDUAL": "1"},
    "wide_residual1_w4": {"VGRAPH_GEMV_WIDE_FROM_RESIDUAL": "1", "VGRAPH_WIDE_WARPS": "4"},
    "wide_w4": {"VGRAPH_WIDE_WARPS": "4"},
    "wide_residual16": WIDE_RESIDUAL16,
    "wide_residual16_w4": WIDE_RESIDUAL16 | {"VGRAPH_WIDE_WARPS": "4"},
    "wpc_o": {"VGRAPH_MMA_WARP_PER_CHUNK_RESIDUAL": "1"},
    "wpc_qkv_o": {"VGRAPH_MMA_WARP_PER_CHUNK_RESIDUAL": "1", "VGRAPH_MMA_WARP_PER_CHUNK_QKV": "1"},
    "argmax_plain": {"VGRAPH_ARGMAX_PDL": "0"},
    "gather_off": {"VGRAPH_GEMV_GATHER": "0"},
    "qkv_norm_folded": {"VGRAPH_FOLD_QKV_NORM": "1"},
}


def variant_base(variant: str) -> str:
    """The named variant a variant builds on: `name` of `name+env:...`; "" for `env:...`."""
    return variant.partition("+env:")[0] if not variant.startswith("env:") else ""


def variant_env(variant: str) -> dict[str, str]:
    """The switches a variant sets: its named part's entry in VARIANT_ENV, and those it names
    (`env:A=1,B=2`, `name+env:A=1`)."""
    env = dict(VARIANT_ENV.get(variant_base(variant), {}))
    _, plus, named = variant.partition("env:")
    if not plus:
        return env
    for item in named.split(","):
        name, eq, value = item.partition("=")
        if not (name.startswith("VGRAPH_") and eq and value):
            raise ValueError(f"variant {variant!r}: each item must be VGRAPH_<NAME>=<value>")
        env[name] = value
    return env


def variant_name(text: str) -> str:
    """--variants' type: a name of VARIANTS, an `env:` variant, or `name+env:...`."""
    if text not in VARIANTS:
        try:
            base = variant_base(text)
            if base not in ("", *VARIANTS) or "env:" not in text:
                raise ValueError(
                    f"choose from {', '.join(VARIANTS)}, env:VGRAPH_<NAME>=<value> "
                    "or <name>+env:VGRAPH_<NAME>=<value>"
                )
            variant_env(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"invalid variant {text!r}: {e}") from None
    return text


@contextlib.contextmanager
def variant_switches(variant: str) -> Iterator[None]:
    """The class-level switches of a variant, set while its engine loads and captures: the model
    decides on the fused ops at its first forward, a captured graph keeps the attention form, a
    runner reads its input-copy switch when built."""
    fused_ops, appends = LlamaModel.use_fused_ops, CsrcAttentionImpl.appends_kv
    copy_in_graph, norm_in_head = ModelRunner.full_graphs_copy_inputs, LlamaModel.final_norm_in_head
    head = LlamaForCausalLM
    greedy_in_head, float32_logits = head.greedy_in_head, head.float32_logits
    env, base = variant_env(variant), variant_base(variant)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    if base == "torch":
        LlamaModel.use_fused_ops = lambda self, x: False
    if base == "no_append":
        CsrcAttentionImpl.appends_kv = False
    if base == "copy_outside":
        ModelRunner.full_graphs_copy_inputs = False
    if base == "norm_apart":
        LlamaModel.final_norm_in_head = False
    if base == "greedy_apart":
        LlamaForCausalLM.greedy_in_head = False
    if base == "float32_logits":
        LlamaForCausalLM.float32_logits = True
    cuda_op = vocab_embedding.use_cuda_op  # the embedding decides at its first call
    if base == "torch_embedding":
        vocab_embedding.use_cuda_op = lambda x, op: False
    blas = torch.backends.cuda.preferred_blas_library() if torch.cuda.is_available() else None
    if base == "blaslt" and blas is not None:
        torch.backends.cuda.preferred_blas_library("cublaslt")
    try:
        yield
    finally:
        LlamaModel.use_fused_ops, CsrcAttentionImpl.appends_kv = fused_ops, appends
        ModelRunner.full_graphs_copy_inputs = copy_in_graph
        LlamaModel.final_norm_in_head = norm_in_head
        LlamaForCausalLM.greedy_in_head = greedy_in_head
        LlamaForCausalLM.float32_logits = float32_logits
        vocab_embedding.use_cuda_op = cuda_op
        if blas is not None:
            torch.backends.cuda.preferred_blas_library(blas)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_model(model: str, variants: list[str], bench_args: list[str], out: Path) -> list[dict]:
    args = add_cli_args(argparse.ArgumentParser()).parse_args(["--model", model, *bench_args])
    if len(args.modes) != 1:
        raise SystemExit("bench_decode_step_ab: give one --modes (the variants are the columns)")
    runs = []
    for variant in variants:
        with variant_switches(variant):
            run = start_mode(args, args.modes[0])
        run.mode = f"{run.mode}/{variant}"  # the label of its row
        runs.append(run)
    measure(runs, args)
    if args.kernel_profile and torch.cuda.is_available():
        profile_runs(runs)
    results = [summarize(r) for r in runs]
    for r, variant in zip(results, variants):
        r["mode"], r["variant"] = r["mode"].split("/")[0], variant
    out.write_text(json.dumps(build_report(args, results), indent=2))
    print_table(
        model, [r | {"mode": f"{r['mode']}/{r['variant']}"} for r in results], args.batch_sizes
    )
    del runs
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return results


def cli() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["SmolLM2-135M", "Llama-3.2-1B"])
    parser.add_argument("--out-dir", default="benchmarks/results/decode_step_ab")
    parser.add_argument("--variants", nargs="+", type=variant_name, default=list(VARIANTS))
    parser.add_argument("bench_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    bench_args = [a for a in args.bench_args if a != "--"]
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = []
    for model in args.models:
        for r in run_model(
            model, args.variants, bench_args, out_dir / f"latency_{Path(model).name}.json"
        ):
            summary.append(
                {"model": model, "path": r["variant"], "mode": r["mode"], **r["decode_ms"]}
            )
    print("\ndecode step, median ms (variants timed in turns)")
    for s in summary:
        cols = " ".join(
            f"B={k}: {v:.3f}" for k, v in s.items() if k not in ("model", "path", "mode")
        )
        print(f"{s['model']:14} {s['path']:10} {s['mode']:6} {cols}")
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(cli())
