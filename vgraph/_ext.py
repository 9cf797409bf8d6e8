"""Loads the vgraph._C op library (built by `python -m vgraph.ext_build`) and registers the fake
impls that let its ops trace under torch.compile.

This module never builds anything: a missing library is reported, not compiled on import.
"""

from __future__ import annotations

from pathlib import Path

import torch

from vgraph.torch_internals import dispatch_has_kernel

LIB_PATH = Path(__file__).resolve().parent / "_C.so"

_loaded: bool | None = None  # None until the first load_ext()
_reason = ""


def load_ext() -> bool:
    """Loads the library once; True when torch.ops.vgraph_C is usable."""
    global _loaded, _reason
    if _loaded is not None:
        return _loaded
    if not LIB_PATH.exists():
        _loaded, _reason = False, "vgraph._C is not built: run `make ext`"
        return False
    try:
        torch.ops.load_library(str(LIB_PATH))
    except (OSError, RuntimeError) as e:
        _loaded, _reason = False, f"vgraph._C failed to load from {LIB_PATH}: {e}"
        return False
    _register_fakes()
    _loaded = True
    return True


def ext_unavailable_reason() -> str:
    """Why load_ext() returned False ('' when it did not)."""
    load_ext()
    return _reason


def has_cuda_kernels(op: str = "paged_attention") -> bool:
    """True when the loaded library carries a CUDA impl of vgraph_C::<op> (a CUDA build that is
    new enough to have that op)."""
    return load_ext() and dispatch_has_kernel(f"vgraph_C::{op}", "CUDA")


def use_cuda_op(x: torch.Tensor, op: str) -> bool:
    """Whether a layer should call vgraph_C::<op> on x: only for CUDA tensors with a CUDA build.
    Layers decide once, at their first call, and cache the answer; the CPU keeps the torch code."""
    return x.is_cuda and _has_cuda_kernels_const(op)


# Dynamo calls this at trace time and bakes in the answer, so a first call inside torch.compile
# neither traces load_library nor breaks the graph.
@torch.compiler.assume_constant_result
def _has_cuda_kernels_const(op: str) -> bool:
    return bool(has_cuda_kernels(op))


def _register_fakes() -> None:
    # Both ops only mutate their outputs in place, so the fake impls have nothing to compute.
    @torch.library.register_fake("vgraph_C::reshape_and_cache")
    def _reshape_and_cache_fake(key, value, key_cache, value_cache, slot_mapping) -> None:
        return None

    @torch.library.register_fake("vgraph_C::paged_attention")
    def _paged_attention_fake(
        out,
        query,
        key_cache,
        value_cache,
        query_start_loc,
        seq_lens,
        block_table,
        scale,
        num_reqs=None,
        key=None,
        value=None,
        slot_mapping=None,
    ) -> None:
        return None

    @torch.library.register_fake("vgraph_C::cascade_attention")
    def _cascade_attention_fake(
        out,
        query,
        key_cache,
        value_cache,
        query_start_loc,
        seq_lens,
        block_table,
        num_prefix_blocks,
        scale,
        num_reqs=None,
    ) -> None:
        return None

    # The fused layer ops also only write their Tensor(a!) arguments.
    @torch.library.register_fake("vgraph_C::rms_norm")
    def _rms_norm_fake(out, input, weight, eps) -> None:
        return None

    @torch.library.register_fake("vgraph_C::fused_add_rms_norm")
    def _fused_add_rms_norm_fake(input, residual, weight, eps) -> None:
        return None

    @torch.library.register_fake("vgraph_C::rotary_embedding")
    def _rotary_embedding_fake(positions, query, key, head_size, cos_sin_cache, is_neox) -> None:
        return None

    @torch.library.register_fake("vgraph_C::silu_and_mul")
    def _silu_and_mul_fake(out, input) -> None:
        return None

    @torch.library.register_fake("vgraph_C::embedding")
    def _embedding_fake(out, ids, weight, start, end, vocab_size) -> None:
        return None

    # The fused decode ops (csrc/decode_*.cpp/.cu) write only their mutable arguments too.
    @torch.library.register_fake("vgraph_C::linear_out")
    def _linear_out_fake(
        out, x, weight, max_gemv_tokens=None, greedy=None, greedy_state=None
    ) -> None:
        return None

    @torch.library.register_fake("vgraph_C::rms_norm_linear_out")
    def _rms_norm_linear_out_fake(
        out, hidden, norm_weight, eps, weight, max_gemv_tokens=None, greedy=None, greedy_state=None
    ) -> None:
        return None

    @torch.library.register_fake("vgraph_C::linear_add_residual")
    def _linear_add_residual_fake(residual, x, weight, max_gemv_tokens=None) -> None:
        return None

    @torch.library.register_fake("vgraph_C::rms_norm_qkv_rope")
    def _rms_norm_qkv_rope_fake(
        qkv,
        hidden,
        norm_weight,
        eps,
        weight,
        bias,
        positions,
        cos_sin_cache,
        head_size,
        num_heads,
        num_kv_heads,
        max_gemv_tokens=None,
        unit_norm=False,
        wide_packed=None,
    ) -> None:
        return None

    @torch.library.register_fake("vgraph_C::rms_norm_gate_up_silu")
    def _rms_norm_gate_up_silu_fake(
        out, hidden, norm_weight, eps, weight, max_gemv_tokens=None, wide_packed=None
    ) -> None:
        return None

    @torch.library.register_fake("vgraph_C::rms_norm_mlp_residual")
    def _rms_norm_mlp_residual_fake(
        residual,
        norm_weight,
        eps,
        gate_up_weight,
        down_weight,
        state=None,
        wide_packed=None,
        max_fused_tokens=None,
    ) -> None:
        return None

    @torch.library.register_fake("vgraph_C::apply_logits_processors")
    def _apply_logits_processors_fake(out, logits, bitmask, row_ptr, codes, values, params) -> None:
        return None

    @torch.library.register_fake("vgraph_C::argmax_rows")
    def _argmax_rows_fake(out, logits) -> None:
        return None
