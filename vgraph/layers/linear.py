"""Linear layers with fused weights (qkv, gate_up) and the loaders that fill their shards.

Each parameter carries a `weight_loader(param, loaded_weight, shard_id)` so the checkpoint loader
can fill fused tensors from the separate q/k/v and gate/up tensors of a Hugging Face checkpoint.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vgraph._ext import use_cuda_op


def default_weight_loader(
    param: torch.Tensor, loaded: torch.Tensor, shard_id: object = None
) -> None:
    assert shard_id is None, shard_id
    if param.shape != loaded.shape:
        raise ValueError(
            f"weight shape {tuple(loaded.shape)} does not fit parameter {tuple(param.shape)}"
        )
    param.data.copy_(loaded)


class Linear(nn.Module):
    """y = x W^T (+ b); output rows may be split into named shards (fused projections)."""

    def __init__(
        self, in_features: int, shard_sizes: dict[object, int], bias: bool = False
    ) -> None:
        super().__init__()
        self.shard_offsets: dict[object, tuple[int, int]] = {}
        offset = 0
        for shard, size in shard_sizes.items():
            self.shard_offsets[shard] = (offset, size)
            offset += size
        self.out_features = offset
        self.weight = nn.Parameter(torch.empty(offset, in_features), requires_grad=False)
        self.weight.weight_loader = self.weight_loader
        if bias:
            self.bias = nn.Parameter(torch.empty(offset), requires_grad=False)
            self.bias.weight_loader = self.weight_loader
        else:
            self.register_parameter("bias", None)

    def weight_loader(
        self, param: torch.Tensor, loaded: torch.Tensor, shard_id: object = None
    ) -> None:
        if shard_id is None:
            default_weight_loader(param, loaded)
            return
        offset, size = self.shard_offsets[shard_id]
        target = param.data.narrow(0, offset, size)
        if target.shape != loaded.shape:
            raise ValueError(
                f"shard {shard_id!r}: weight shape {tuple(loaded.shape)} "
                f"does not fit {tuple(target.shape)}"
            )
        target.copy_(loaded)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [T, in] -> [T, out]
        return F.linear(x, self.weight, self.bias)


def qkv_linear(hidden: int, num_heads: int, num_kv_heads: int, head_dim: int, bias: bool) -> Linear:
    return Linear(
        hidden,
        {"q": num_heads * head_dim, "k": num_kv_heads * head_dim, "v": num_kv_heads * head_dim},
        bias=bias,
    )


def gate_up_linear(hidden: int, intermediate: int) -> Linear:
    return Linear(hidden, {0: intermediate, 1: intermediate})


def plain_linear(in_features: int, out_features: int, bias: bool = False) -> Linear:
    return Linear(in_features, {None: out_features}, bias=bias)


class SiluAndMul(nn.Module):
    """silu(gate) * up. On CUDA with a CUDA build of vgraph._C: one fused kernel
    (vgraph_C::silu_and_mul, same rounding); elsewhere the torch code, the float32 oracle."""

    def __init__(self) -> None:
        super().__init__()
        self._fused: bool | None = None  # fused CUDA op or torch code; decided at the first call

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [T, 2 * I] -> [T, I]
        if self._fused is None:
            self._fused = use_cuda_op(x, "silu_and_mul") and x.dim() == 2
        if self._fused:
            out = torch.empty((x.shape[0], x.shape[1] // 2), dtype=x.dtype, device=x.device)
            torch.ops.vgraph_C.silu_and_mul(out, x)
            return out
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up
