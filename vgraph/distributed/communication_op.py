"""The collectives a sharded model issues, as custom ops that graphs capture.

  vgraph::all_reduce(x) -> sum of x over the tensor-parallel ranks     (after row-parallel layers)
  vgraph::all_gather(x) -> x of every rank, concatenated on the last dim  (vocab-parallel LM head)

Registered ops, so that Dynamo keeps each one as a single node (PIECEWISE can split at
`vgraph::all_reduce`, an option of `splitting_ops`, as vLLM and SGLang treat communication), a
FULL CUDA graph captures the NCCL kernel inside it, and the CPU recorder records each call as
one op (re-issued on replay, as a CUDA graph re-issues its kernel) instead of recording through
the body into gloo's calls. Both are functional (a new output tensor): nothing aliases a graph
input. At tp=1 the model code calls neither.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from vgraph.cudagraph.recorder import record_as_one_op
from vgraph.distributed.parallel_state import get_tp


def all_reduce(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    dist.all_reduce(out)
    return out


def all_gather(x: torch.Tensor) -> torch.Tensor:
    """x: [rows, n] -> [rows, n * world_size], rank r's columns at [r * n, (r + 1) * n)."""
    x = x.contiguous()
    parts = [torch.empty_like(x) for _ in range(get_tp().world_size)]
    dist.all_gather(parts, x)
    return torch.cat(parts, dim=-1)


all_reduce_op = torch.library.custom_op("vgraph::all_reduce", all_reduce, mutates_args=())
all_gather_op = torch.library.custom_op("vgraph::all_gather", all_gather, mutates_args=())
record_as_one_op("vgraph::all_reduce", "vgraph::all_gather")


@all_reduce_op.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@all_gather_op.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], x.shape[-1] * get_tp().world_size))


def tensor_model_parallel_all_reduce(x: torch.Tensor) -> torch.Tensor:
    """x summed over the ranks; x itself at tp=1 (no op, no copy)."""
    if get_tp().world_size == 1:
        return x
    return torch.ops.vgraph.all_reduce(x)


def tensor_model_parallel_all_gather(x: torch.Tensor) -> torch.Tensor:
    if get_tp().world_size == 1:
        return x
    return torch.ops.vgraph.all_gather(x)
