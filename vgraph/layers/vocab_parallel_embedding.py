"""The token embedding and the LM head, split over the vocabulary for tensor parallelism.

Rank r holds rows [r * per_rank, (r + 1) * per_rank) of the [vocab_size, hidden] table, with
per_rank = ceil(vocab_size / tp) (the last rank's rows past vocab_size are zeros). The embedding
looks up the ids in its range, zeroes the others and sums over ranks (`vgraph::all_reduce`); the
head computes its columns of the logits and gathers them (`vgraph::all_gather`), cut back to
vocab_size. At tp=1 both are the plain table: F.embedding and F.linear, no collective, no mask.
On CUDA with a CUDA build of vgraph._C the lookup and its mask are one kernel
(vgraph_C::embedding: a CTA per token, launched with PDL); elsewhere the torch code.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vgraph._ext import use_cuda_op
from vgraph.distributed.communication_op import (
    tensor_model_parallel_all_gather,
    tensor_model_parallel_all_reduce,
)
from vgraph.distributed.parallel_state import get_tp
from vgraph.layers.linear import shape_of
from vgraph.utils import cdiv


class VocabParallelEmbedding(nn.Module):
    def __init__(self, vocab_size: int, hidden_size: int) -> None:
        super().__init__()
        tp = get_tp()
        self.vocab_size, self.tp_size = vocab_size, tp.world_size
        self.per_rank = cdiv(vocab_size, tp.world_size)
        self.vocab_start = tp.rank * self.per_rank
        self.vocab_end = min(self.vocab_start + self.per_rank, vocab_size)  # real rows end here
        self.weight = nn.Parameter(torch.empty(self.per_rank, hidden_size), requires_grad=False)
        self.weight.weight_loader = self.weight_loader
        self.weight.full_shapes = {None: (vocab_size, hidden_size)}
        self._fused: bool | None = None  # vgraph_C::embedding or torch; decided at the first call

    def weight_loader(self, param: torch.Tensor, loaded: Any, shard_id: object = None) -> None:
        assert shard_id is None, shard_id
        if shape_of(loaded) != param.full_shapes[None]:
            raise ValueError(
                f"weight shape {shape_of(loaded)} does not fit {param.full_shapes[None]}"
            )
        n = self.vocab_end - self.vocab_start
        param.data[:n].copy_(loaded[self.vocab_start : self.vocab_end])
        param.data[n:].zero_()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:  # [T] -> [T, hidden]
        if self._fused is None:
            self._fused = use_cuda_op(self.weight, "embedding")
        if self._fused:
            out = torch.empty(
                input_ids.shape[0], self.weight.shape[1], dtype=self.weight.dtype,
                device=self.weight.device,
            )  # fmt: skip
            torch.ops.vgraph_C.embedding(
                out, input_ids, self.weight, self.vocab_start, self.vocab_end, self.vocab_size
            )
            return out if self.tp_size == 1 else tensor_model_parallel_all_reduce(out)
        if self.tp_size == 1:
            return F.embedding(input_ids, self.weight)
        mine = (input_ids >= self.vocab_start) & (input_ids < self.vocab_end)  # [T]
        local = torch.where(mine, input_ids - self.vocab_start, 0)  # [T]
        out = F.embedding(local, self.weight) * mine.unsqueeze(-1).to(self.weight.dtype)
        return tensor_model_parallel_all_reduce(out)


class ParallelLMHead(VocabParallelEmbedding):
    """The LM head's weight, split like the embedding (the same module when tied)."""


def vocab_parallel_logits(
    hidden: torch.Tensor,  # [R, hidden]
    head: VocabParallelEmbedding,
) -> torch.Tensor:  # [R, vocab_size] float32
    logits = F.linear(hidden, head.weight)  # [R, per_rank]
    if head.tp_size > 1:
        logits = tensor_model_parallel_all_gather(logits)[:, : head.vocab_size]
    return logits.float()
