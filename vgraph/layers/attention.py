"""The attention layer and the two custom ops every model's attention goes through.

  kv_cache_update(key, value, layer_name) -> dep          writes this step's K/V into the cache
  unified_attention_with_output(query, output, layer_name, dep)   attention over the cache

Both find their layer's backend impl, KV cache and the step's metadata in the ForwardContext.
The piecewise compiler splits the model at the attention op only, so the cache write is captured
in the piece before it and the eager work between two pieces is one attention launch. `dep`, an
empty tensor, orders the two for Dynamo and Inductor: the write mutates the cache, which is no
argument of the op (the cache does not exist yet when the model is traced), so without a data
dependency the write could be moved or dropped. A backend whose attention kernel appends the
K/V itself (AttentionImpl.appends_kv, the csrc backend) skips kv_cache_update: key and value go
to the attention op, still one launch between two pieces, and one launch fewer per layer.

Only Dynamo needs the ops: going through the dispatcher costs a Python custom op some 20-40 us a
call, more than a decode step's attention kernels. Eager forwards (NONE, and the attention calls
between replayed pieces, see compilation/backend.py) run their bodies directly.
"""

from __future__ import annotations

import torch
from torch import nn

from vgraph.attention.backend import AttentionImpl
from vgraph.forward_context import get_forward_context


def write_kv_cache(key: torch.Tensor, value: torch.Tensor, layer_name: str) -> None:
    """key, value: [num_tokens, num_kv_heads, head_dim]."""
    ctx = get_forward_context()
    if ctx.attn_metadata is None:  # profile / warm-up run without a KV cache
        return
    layer: Attention = ctx.attn_layers[layer_name]
    layer.impl.write_kv_cache(key, value, ctx.kv_caches[layer_name], ctx.attn_metadata)


def kv_cache_update(key: torch.Tensor, value: torch.Tensor, layer_name: str) -> torch.Tensor:
    write_kv_cache(key, value, layer_name)
    return torch.empty(0, dtype=key.dtype, device=key.device)  # the dependency token


def unified_attention(
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    output: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    layer_name: str,
    kv_written: torch.Tensor | None = None,  # kv_cache_update's token; only orders the ops
    key: torch.Tensor | None = None,  # appends_kv: this step's K/V, written by the attention op
    value: torch.Tensor | None = None,
) -> None:
    ctx = get_forward_context()
    if ctx.attn_metadata is None:
        output.zero_()
        return
    layer: Attention = ctx.attn_layers[layer_name]
    kv_cache = ctx.kv_caches[layer_name]
    if key is None:
        layer.impl.forward(query, kv_cache, ctx.attn_metadata, output)
    else:
        layer.impl.forward(query, kv_cache, ctx.attn_metadata, output, key, value)


kv_cache_update_op = torch.library.custom_op(
    "vgraph::kv_cache_update", kv_cache_update, mutates_args=()
)
unified_attention_with_output = torch.library.custom_op(
    "vgraph::unified_attention_with_output", unified_attention, mutates_args=("output",)
)


@kv_cache_update_op.register_fake
def _(key: torch.Tensor, value: torch.Tensor, layer_name: str) -> torch.Tensor:
    return torch.empty(0, dtype=key.dtype, device=key.device)


@unified_attention_with_output.register_fake
def _(
    query: torch.Tensor,
    output: torch.Tensor,
    layer_name: str,
    kv_written: torch.Tensor | None = None,
    key: torch.Tensor | None = None,
    value: torch.Tensor | None = None,
) -> None:
    return None


class Attention(nn.Module):
    """Paged attention for one layer; the backend impl is bound by the model runner."""

    def __init__(
        self, num_heads: int, head_dim: int, scale: float, num_kv_heads: int, prefix: str
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = scale
        self.layer_name = prefix
        self.impl: AttentionImpl | None = None

    def forward(
        self,
        q: torch.Tensor,  # [num_tokens, num_heads * head_dim]
        k: torch.Tensor,  # [num_tokens, num_kv_heads * head_dim]
        v: torch.Tensor,  # [num_tokens, num_kv_heads * head_dim]
    ) -> torch.Tensor:  # [num_tokens, num_heads * head_dim]
        n = q.shape[0]
        output = torch.empty_like(q)
        query = q.view(n, self.num_heads, self.head_dim)
        key = k.view(n, self.num_kv_heads, self.head_dim)
        value = v.view(n, self.num_kv_heads, self.head_dim)
        out = output.view(n, self.num_heads, self.head_dim)
        compiling = torch.compiler.is_compiling()  # ops Dynamo keeps opaque; split at attention
        if self.impl is not None and self.impl.appends_kv:
            attend = (
                torch.ops.vgraph.unified_attention_with_output if compiling else unified_attention
            )
            attend(query, out, self.layer_name, None, key, value)
        elif compiling:
            written = torch.ops.vgraph.kv_cache_update(key, value, self.layer_name)
            torch.ops.vgraph.unified_attention_with_output(query, out, self.layer_name, written)
        else:
            write_kv_cache(key, value, self.layer_name)
            unified_attention(query, out, self.layer_name)
        return output
