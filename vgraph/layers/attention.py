"""The attention layer and the one custom op every model's attention goes through.

`vgraph::unified_attention_with_output` writes into an output tensor it is given and returns
nothing, so Dynamo sees one opaque op per layer: the piecewise compiler splits the model there.
The op finds its layer's backend impl, KV cache and the step's metadata in the ForwardContext.

Only Dynamo needs the op: going through the dispatcher costs a Python custom op some 20-40 us a
call, more than a decode step's attention kernels. Eager forwards (NONE, and the attention calls
between replayed pieces, see compilation/backend.py) run its body, `unified_attention`, directly.
"""

from __future__ import annotations

import torch
from torch import nn

from vgraph.attention.backend import AttentionImpl
from vgraph.forward_context import get_forward_context


def unified_attention(
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    value: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    output: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    layer_name: str,
) -> None:
    ctx = get_forward_context()
    if ctx.attn_metadata is None:  # profile / warm-up run without a KV cache
        output.zero_()
        return
    layer: Attention = ctx.attn_layers[layer_name]
    layer.impl.forward(query, key, value, ctx.kv_caches[layer_name], ctx.attn_metadata, output)


unified_attention_with_output = torch.library.custom_op(
    "vgraph::unified_attention_with_output", unified_attention, mutates_args=("output",)
)


@unified_attention_with_output.register_fake
def _(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    output: torch.Tensor,
    layer_name: str,
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
        attend = (
            torch.ops.vgraph.unified_attention_with_output  # one opaque op to split the graph at
            if torch.compiler.is_compiling()
            else unified_attention
        )
        attend(
            q.view(n, self.num_heads, self.head_dim),
            k.view(n, self.num_kv_heads, self.head_dim),
            v.view(n, self.num_kv_heads, self.head_dim),
            output.view(n, self.num_heads, self.head_dim),
            self.layer_name,
        )
        return output
