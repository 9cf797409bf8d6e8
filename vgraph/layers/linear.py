"""Linear layers with fused weights (qkv, gate_up), sharded for tensor parallelism, and the
loaders that fill their shards.

Each parameter carries a `weight_loader(param, loaded, shard_id)` so the checkpoint loader can
fill fused tensors from the separate q/k/v and gate/up tensors of a Hugging Face checkpoint, and
`full_shapes` (shard id -> the checkpoint tensor's shape) so dummy weights can be drawn whole and
then cut, the same numbers at every tp size. `loaded` is a tensor or a safetensors slice: both
index as `loaded[rows, cols]`, so a rank reads only its part of the file, never the whole tensor.

With tensor parallelism (vgraph/distributed) a layer is column-parallel (each rank holds its rows
of every shard: q, k, v heads, gate and up halves) or row-parallel (its columns of the input,
the partial products summed over ranks by `vgraph::all_reduce`), as in Megatron and vLLM. At
tp=1 every part is the whole tensor and no collective is issued.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vgraph._ext import use_cuda_op
from vgraph.distributed.communication_op import tensor_model_parallel_all_reduce
from vgraph.distributed.parallel_state import get_tp


def shape_of(loaded: Any) -> tuple[int, ...]:
    """Shape of a tensor or of a safetensors slice."""
    return tuple(loaded.shape) if isinstance(loaded, torch.Tensor) else tuple(loaded.get_shape())


def default_weight_loader(param: torch.Tensor, loaded: Any, shard_id: object = None) -> None:
    assert shard_id is None, shard_id
    if tuple(param.shape) != shape_of(loaded):
        raise ValueError(
            f"weight shape {shape_of(loaded)} does not fit parameter {tuple(param.shape)}"
        )
    param.data.copy_(loaded if isinstance(loaded, torch.Tensor) else loaded[:])


@dataclass(frozen=True)
class Part:
    """This rank's part of one checkpoint dimension: [start, start + size) of full."""

    full: int
    start: int = 0
    size: int = -1  # -1: the whole dimension

    def __post_init__(self) -> None:
        if self.size < 0:
            object.__setattr__(self, "size", self.full)
        assert self.start >= 0 and self.start + self.size <= self.full, self

    @property
    def slice(self) -> slice:
        return slice(self.start, self.start + self.size)


def split_part(full: int) -> Part:
    """This rank's equal share of a dimension divisible by the tp size."""
    tp = get_tp()
    assert full % tp.world_size == 0, (full, tp.world_size)
    size = full // tp.world_size
    return Part(full, tp.rank * size, size)


class Linear(nn.Module):
    """y = x W^T (+ b); output rows may be split into named shards (fused projections).

    out_parts: shard id -> this rank's rows of that shard's checkpoint tensor; in_part: this
    rank's columns. reduce: row-parallel, the output is summed over ranks (bias added after).
    """

    def __init__(
        self,
        in_part: Part,
        out_parts: dict[object, Part],
        bias: bool = False,
        reduce: bool = False,
    ) -> None:
        super().__init__()
        self.in_part, self.out_parts, self.reduce = in_part, out_parts, reduce
        self.shard_offsets: dict[object, tuple[int, int]] = {}
        offset = 0
        for shard, part in out_parts.items():
            self.shard_offsets[shard] = (offset, part.size)
            offset += part.size
        self.out_features = offset
        self.weight = nn.Parameter(torch.empty(offset, in_part.size), requires_grad=False)
        self.weight.weight_loader = self.weight_loader
        self.weight.full_shapes = {s: (p.full, in_part.full) for s, p in out_parts.items()}
        if bias:
            self.bias = nn.Parameter(torch.empty(offset), requires_grad=False)
            self.bias.weight_loader = self.weight_loader
            self.bias.full_shapes = {s: (p.full,) for s, p in out_parts.items()}
        else:
            self.register_parameter("bias", None)

    def weight_loader(self, param: torch.Tensor, loaded: Any, shard_id: object = None) -> None:
        if shard_id not in self.shard_offsets:
            raise ValueError(f"shard {shard_id!r} is not one of {list(self.shard_offsets)}")
        expected = param.full_shapes[shard_id]
        if shape_of(loaded) != expected:
            raise ValueError(
                f"shard {shard_id!r}: weight shape {shape_of(loaded)} does not fit {expected}"
            )
        offset, size = self.shard_offsets[shard_id]
        rows = self.out_parts[shard_id].slice
        piece = loaded[rows, self.in_part.slice] if param.dim() == 2 else loaded[rows]
        param.data.narrow(0, offset, size).copy_(piece)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [T, in / tp or in] -> [T, out]
        if not self.reduce:
            return F.linear(x, self.weight, self.bias)
        out = tensor_model_parallel_all_reduce(F.linear(x, self.weight))
        return out if self.bias is None else out + self.bias


def kv_head_part(num_kv_heads: int, head_dim: int) -> Part:
    """This rank's K (or V) rows: its share of the KV heads, or, with fewer KV heads than ranks,
    the one head it shares with tp / num_kv_heads other ranks (replicated)."""
    tp = get_tp()
    if num_kv_heads >= tp.world_size:
        return split_part(num_kv_heads * head_dim)
    head = tp.rank * num_kv_heads // tp.world_size
    return Part(num_kv_heads * head_dim, head * head_dim, head_dim)


def num_kv_heads_per_rank(num_kv_heads: int) -> int:
    return max(1, num_kv_heads // get_tp().world_size)


def qkv_linear(hidden: int, num_heads: int, num_kv_heads: int, head_dim: int, bias: bool) -> Linear:
    """Column-parallel: this rank's q heads and k / v heads."""
    kv = kv_head_part(num_kv_heads, head_dim)
    parts = {"q": split_part(num_heads * head_dim), "k": kv, "v": kv}
    return Linear(Part(hidden), parts, bias=bias)


def gate_up_linear(hidden: int, intermediate: int) -> Linear:
    """Column-parallel: this rank's rows of gate and of up."""
    return Linear(Part(hidden), {0: split_part(intermediate), 1: split_part(intermediate)})


def row_parallel_linear(in_features: int, out_features: int, bias: bool = False) -> Linear:
    """This rank's input columns; the output summed over ranks (o_proj, down_proj)."""
    return Linear(split_part(in_features), {None: Part(out_features)}, bias=bias, reduce=True)


def plain_linear(in_features: int, out_features: int, bias: bool = False) -> Linear:
    """Replicated on every rank."""
    return Linear(Part(in_features), {None: Part(out_features)}, bias=bias)


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
