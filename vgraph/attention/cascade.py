"""Cascade attention: when to use it (the cost rule) and the shared prefix of a decode step.

A uniform decode step whose requests all start with the same cached blocks can attend in three
parts: every query over the shared prefix KV at once (non-causal: each query sits after the whole
prefix), each query over its own request's suffix, and a merge of the two partial results by
their log-sum-exp (kernels: csrc/cascade_*; reference: ops_ref.cascade_attention_ref). The prefix
KV is then read once per step instead of once per request.

It pays only when the prefix is long and the batch wide enough that the saved reads outweigh the
extra launches, the merge and leaving the FULL graph (cascade steps run PIECEWISE). Measured on
the H200 by benchmarks/bench_prefix_cache.py (`decode` section; benchmarks/results/
2026-12-01-h200-backends-prefix): with the csrc cascade kernel it lost at every prefix of
256-2,048 tokens and 8-64 requests (0.32-0.41x of plain attention in FULL graphs), so no
threshold in that range switches it on and it is off by default (as in vLLM since 2026). The
thresholds stay vLLM's (a prefix of 256+ tokens and 8+ requests) for whoever turns it on.
Imports no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# the measured default of CacheConfig.enable_cascade_attention (see the module docstring)
CASCADE_DEFAULT = False
# shortest shared prefix (tokens) and fewest requests for which cascade beats plain attention
MIN_PREFIX_TOKENS = 256
MIN_NUM_REQS = 8


@dataclass(frozen=True)
class CascadeCostRule:
    """use() says whether a decode step with this shared prefix should run cascade."""

    min_prefix_tokens: int = MIN_PREFIX_TOKENS
    min_num_reqs: int = MIN_NUM_REQS

    def use(self, num_prefix_tokens: int, num_reqs: int) -> bool:
        return num_prefix_tokens >= self.min_prefix_tokens and num_reqs >= self.min_num_reqs

    def prefix_blocks(
        self,
        block_ids: Sequence[Sequence[int]],
        num_computed_tokens: Sequence[int],
        block_size: int,
    ) -> int:
        """Blocks of the shared prefix a uniform decode step of these requests should attend as
        cascade, or 0 (plain attention)."""
        if len(block_ids) < self.min_num_reqs:
            return 0
        n = num_common_prefix_blocks(block_ids, num_computed_tokens, block_size)
        return n if self.use(n * block_size, len(block_ids)) else 0


def num_common_prefix_blocks(
    block_ids: Sequence[Sequence[int]], num_computed_tokens: Sequence[int], block_size: int
) -> int:
    """Leading blocks that every request's block list shares and that every request has fully
    computed (so each query token sits after the whole prefix)."""
    if not block_ids:
        return 0
    limit = min(min(len(b) for b in block_ids), min(num_computed_tokens) // block_size)
    first = block_ids[0]
    for i in range(limit):
        block = first[i]
        if any(b[i] != block for b in block_ids):
            return i
    return limit
