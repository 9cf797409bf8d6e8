"""The `csrc` attention backend: vgraph's own paged-KV kernels (vgraph._C, csrc/), CPU and CUDA.

Every length and block index is read from device tensors and the launch shape depends only on
the padded token and request counts, so any step (decode, prefill chunks, mixed) can be captured:
support ALWAYS. In a decode step the attention op appends the step's K/V itself (appends_kv:
on CUDA one launch writes them to their slots and reads them from their rows for the step's own
positions); a step with prefills writes them first (reshape_and_cache), as one of its requests
may attend to blocks another computes in the same step (a prefix-cache hit), which the
appending launch could read before they are written. Pad
tokens (slot -1) are skipped by the cache write; rows owned by no request come back as zeros.
Steps with a shared prefix (metadata.num_common_prefix_blocks) run the cascade_attention op
instead: never inside a FULL graph (the dispatcher sees to that).
"""

from __future__ import annotations

import torch

from vgraph._ext import ext_unavailable_reason, has_cuda_kernels, load_ext
from vgraph.attention.backend import (
    AttentionBackend,
    AttentionCGSupport,
    AttentionImpl,
    CommonAttentionMetadata,
)
from vgraph.torch_internals import dispatch_has_kernel


class CsrcAttentionImpl(AttentionImpl):
    appends_kv = True

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float) -> None:
        super().__init__(num_heads, num_kv_heads, head_dim, scale)
        # the library is loaded per process: the engine core's own process never ran the
        # availability check that loaded it in the frontend
        if not load_ext():
            raise RuntimeError(
                f"the csrc attention backend needs vgraph._C: {ext_unavailable_reason()}"
            )

    def write_kv_cache(
        self,
        key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
        value: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
        kv_cache: torch.Tensor,  # [2, num_blocks, block_size, num_kv_heads, head_dim]
        metadata: CommonAttentionMetadata,
    ) -> None:
        key_cache, value_cache = self.key_value_caches(kv_cache)
        torch.ops.vgraph_C.reshape_and_cache.default(
            key, value, key_cache, value_cache, metadata.slot_mapping
        )

    def forward(
        self,
        query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
        kv_cache: torch.Tensor,  # [2, num_blocks, block_size, num_kv_heads, head_dim]
        metadata: CommonAttentionMetadata,
        output: torch.Tensor,  # [num_tokens, num_heads, head_dim]
        key: torch.Tensor | None = None,  # [num_tokens, num_kv_heads, head_dim]: the append
        value: torch.Tensor | None = None,
    ) -> None:
        key_cache, value_cache = self.key_value_caches(kv_cache)
        if key is not None and (
            metadata.max_query_len > 1  # prefills: a FULL graph of this shape serves any step
            or metadata.same_step_kv  # the append reads only KV of earlier steps
            or metadata.num_common_prefix_blocks  # the cascade kernels read the cache only
        ):
            self.write_kv_cache(key, value, kv_cache, metadata)
            key = value = None
        if metadata.num_common_prefix_blocks:
            torch.ops.vgraph_C.cascade_attention.default(
                output,
                query,
                key_cache,
                value_cache,
                metadata.query_start_loc,
                metadata.seq_lens,
                metadata.block_table,
                metadata.num_common_prefix_blocks,
                self.scale,
            )
            return
        torch.ops.vgraph_C.paged_attention.default(
            output,
            query,
            key_cache,
            value_cache,
            metadata.query_start_loc,
            metadata.seq_lens,
            metadata.block_table,
            self.scale,
            None,
            key,
            value,
            None if key is None else metadata.slot_mapping,
        )


class CsrcAttentionBackend(AttentionBackend):
    name = "csrc"
    cudagraph_support = AttentionCGSupport.ALWAYS
    impl_cls = CsrcAttentionImpl

    cuda_head_dims = (64, 128)

    @classmethod
    def is_available(cls, device: torch.device, head_dim: int | None = None) -> str | None:
        if not load_ext():
            return ext_unavailable_reason()
        if device.type == "cuda":
            if not has_cuda_kernels():
                return "vgraph._C was built without CUDA kernels: run `make ext` on a CUDA machine"
            if head_dim is not None and head_dim not in cls.cuda_head_dims:
                return f"its CUDA kernels support head_dim {cls.cuda_head_dims}, not {head_dim}"
        return None

    @classmethod
    def supports_cascade(cls, device: torch.device) -> bool:
        """A vgraph._C built before cascade_attention existed has no kernel for it."""
        key = "CUDA" if device.type == "cuda" else "CPU"
        return load_ext() and dispatch_has_kernel("vgraph_C::cascade_attention", key)
