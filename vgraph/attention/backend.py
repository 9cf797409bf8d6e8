"""The attention backend interface: the step's common metadata and a per-layer impl.

A backend also declares how much of a CUDA graph it tolerates (AttentionCGSupport, defined with
the graph modes in vgraph/config/modes.py); the graph-mode resolver reads that at start-up.
Backends never read host copies of lengths on a path they claim is graph-safe.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from vgraph.config.modes import AttentionCGSupport


@dataclass
class CommonAttentionMetadata:
    """Backend-independent description of one step, views of the runner's persistent buffers."""

    query_start_loc: torch.Tensor  # [num_reqs_padded + 1] int32, device
    seq_lens: torch.Tensor  # [num_reqs_padded] int32, device; pad requests have 0
    block_table: torch.Tensor  # [num_reqs_padded, max_blocks_per_req] int32, device
    slot_mapping: torch.Tensor  # [num_tokens_padded] int64, device; pad tokens have -1
    query_start_loc_cpu: torch.Tensor  # [num_reqs + 1] int32, host copy (eager paths only)
    seq_lens_cpu: torch.Tensor  # [num_reqs] int32, host copy (eager paths only)
    block_table_cpu: torch.Tensor  # [>= num_reqs, max_blocks_per_req] int32, host (planners)
    num_reqs: int  # real requests
    num_actual_tokens: int  # real tokens
    max_query_len: int
    max_seq_len: int
    for_capture: bool = False  # a graph is being captured: no host-derived shapes allowed
    backend_plan: Any = None  # what the backend's AttentionPlanner made for this step
    # cascade attention: leading blocks every request shares (block_table row 0's), attended
    # once for all queries; 0 = plain attention. Set only for steps that run no FULL graph.
    num_common_prefix_blocks: int = 0
    # some request attends to KV another request writes in this step (a prefix-cache hit on a
    # block the step computes): the whole step's KV must be written before attention reads it
    same_step_kv: bool = False


@dataclass(frozen=True)
class AttentionSpec:
    """The model's attention shape and the runner's limits: what a planner sizes itself by."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    scale: float
    block_size: int
    dtype: torch.dtype
    device: torch.device
    max_num_reqs: int
    max_blocks_per_req: int
    cascade: bool = False  # cascade steps may run (the planner warms their kernels up too)


class AttentionPlanner(ABC):
    """Host-side work a backend does once per step for all layers (index arrays, work split),
    before the forward and never inside a graph. Backends without one plan nothing."""

    @abstractmethod
    def plan(self, common: CommonAttentionMetadata, full_graph: bool) -> None:
        """Set common.backend_plan for this step; full_graph: it will replay a FULL graph."""

    @abstractmethod
    def warm_up(self) -> None:
        """Load or build the backend's kernels at start-up."""


class AttentionImpl(ABC):
    """Per-layer attention math over the paged KV cache, in two calls per step: the cache write
    (graph-safe for every backend: the piecewise split captures it in the piece before
    attention), then attention over the cache (the eager op between pieces). A backend whose
    attention kernel also appends the step's K/V (appends_kv) gets them in forward instead, and
    write_kv_cache is never called: one launch, and one eager op between pieces."""

    appends_kv: ClassVar[bool] = False
    _split: tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]] | None = None

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float) -> None:
        assert num_heads % num_kv_heads == 0
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = scale

    def key_value_caches(self, kv_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(kv_cache[0], kv_cache[1]), made once: a layer's cache never changes, and two view ops
        per call are host time between the captured pieces."""
        split = self._split
        if split is None or split[0] is not kv_cache:
            split = self._split = (kv_cache, (kv_cache[0], kv_cache[1]))
        return split[1]

    @abstractmethod
    def write_kv_cache(
        self,
        key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
        value: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
        kv_cache: torch.Tensor,  # [2, num_blocks, block_size, num_kv_heads, head_dim]
        metadata: CommonAttentionMetadata,
    ) -> None:
        """Store each token's K/V at its slot (metadata's slot_mapping); pad tokens (-1) are
        never written to a real block. Reads no host value: it is captured in any mode."""

    @abstractmethod
    def forward(
        self,
        query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
        kv_cache: torch.Tensor,  # [2, num_blocks, block_size, num_kv_heads, head_dim]
        metadata: CommonAttentionMetadata,
        output: torch.Tensor,  # [num_tokens, num_heads, head_dim], written in full
        key: torch.Tensor | None = None,  # appends_kv: this step's K/V [num_tokens, kv, hd]
        value: torch.Tensor | None = None,
    ) -> None:
        """Attention of every query token over its request's cached context: this step's K/V
        already written, or (appends_kv) given here and written by this call."""


class AttentionBackend(ABC):
    name: ClassVar[str]
    cudagraph_support: ClassVar[AttentionCGSupport]
    impl_cls: ClassVar[type[AttentionImpl]]

    @staticmethod
    def kv_cache_shape(
        num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int
    ) -> tuple[int, ...]:
        return (2, num_blocks, block_size, num_kv_heads, head_dim)

    @classmethod
    def is_available(cls, device: torch.device, head_dim: int | None = None) -> str | None:
        """None if usable on device (for this head size), else why not."""
        return None

    @classmethod
    def make_planner(cls, spec: AttentionSpec) -> AttentionPlanner | None:
        """The backend's per-step planner, or None when its layers need no planning."""
        return None

    @classmethod
    def supports_cascade(cls, device: torch.device) -> bool:
        """Whether forward honours metadata.num_common_prefix_blocks (cascade attention)."""
        return False
