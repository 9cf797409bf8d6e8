"""The `torch` attention backend: plain PyTorch over the paged KV cache, on CPU and CUDA.

It is the readable reference. Mixed and prefill steps loop over requests using host copies of the
lengths (eager only). Uniform single-token decode takes a batched path that reads lengths and block
tables from device tensors only, with shapes fixed by the buffers, so it can be captured in a graph:
hence UNIFORM_SINGLE_TOKEN_DECODE.

Pad tokens (slot -1) write into the cache's last slot, which the block pool never hands out
(the model runner allocates one spare block for it); this keeps the write free of host syncs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from vgraph.attention.backend import (
    AttentionBackend,
    AttentionCGSupport,
    AttentionImpl,
    CommonAttentionMetadata,
)
from vgraph.utils import cdiv


def write_kv_cache(
    key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    value: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    kv_cache: torch.Tensor,  # [2, num_blocks, block_size, num_kv_heads, head_dim]
    slot_mapping: torch.Tensor,  # [num_tokens] int64, -1 for pad tokens
) -> None:
    num_slots = kv_cache.shape[1] * kv_cache.shape[2]
    slots = torch.where(slot_mapping < 0, num_slots - 1, slot_mapping)
    kv_cache[0].view(num_slots, *key.shape[1:]).index_copy_(0, slots, key)
    kv_cache[1].view(num_slots, *value.shape[1:]).index_copy_(0, slots, value)


class TorchAttentionImpl(AttentionImpl):
    def write_kv_cache(
        self,
        key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
        value: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
        kv_cache: torch.Tensor,  # [2, num_blocks, block_size, num_kv_heads, head_dim]
        metadata: CommonAttentionMetadata,
    ) -> None:
        write_kv_cache(key, value, kv_cache, metadata.slot_mapping[: key.shape[0]])

    def forward(
        self,
        query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
        kv_cache: torch.Tensor,  # [2, num_blocks, block_size, num_kv_heads, head_dim]
        metadata: CommonAttentionMetadata,
        output: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    ) -> None:
        if metadata.max_query_len == 1:
            # PIECEWISE steps pad tokens, not requests: tokens past the requests are pads
            num_reqs = metadata.seq_lens.shape[0]
            self._decode(query[:num_reqs], kv_cache, metadata, output[:num_reqs])
            output[num_reqs:].zero_()
        else:
            self._varlen(query, kv_cache, metadata, output)

    def _decode(
        self,
        query: torch.Tensor,  # [num_reqs_padded, num_heads, head_dim], one token per request
        kv_cache: torch.Tensor,
        md: CommonAttentionMetadata,
        output: torch.Tensor,
    ) -> None:
        """Batched single-token decode; graph-safe: no host reads, shapes from the buffers."""
        num_reqs = query.shape[0]
        block_size = kv_cache.shape[2]
        # eager: only the blocks the longest sequence needs; capture: the whole table width
        width = md.block_table.shape[1] if md.for_capture else cdiv(md.max_seq_len, block_size)
        block_table = md.block_table[:num_reqs, :width]  # [B, W]
        seq_lens = md.seq_lens[:num_reqs]  # [B]
        kh, g, d = self.num_kv_heads, self.num_heads // self.num_kv_heads, self.head_dim
        k = kv_cache[0][block_table].view(num_reqs, -1, kh, d)  # [B, W*bs, KH, D]
        v = kv_cache[1][block_table].view(num_reqs, -1, kh, d)
        q = query.view(num_reqs, kh, g, d).float()
        scores = torch.einsum("bhgd,bthd->bhgt", q, k.float()) * self.scale  # [B, KH, G, T]
        pos = torch.arange(k.shape[1], device=query.device)
        valid = pos[None, :] < seq_lens[:, None]  # [B, T]
        scores = scores.masked_fill(~valid[:, None, None, :], torch.finfo(torch.float32).min)
        probs = scores.softmax(dim=-1)
        out = torch.einsum("bhgt,bthd->bhgd", probs, v.float())  # [B, KH, G, D]
        out = torch.where((seq_lens > 0)[:, None, None, None], out, 0.0)
        output.copy_(out.reshape(num_reqs, kh * g, d))

    def _varlen(
        self,
        query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
        kv_cache: torch.Tensor,
        md: CommonAttentionMetadata,
        output: torch.Tensor,
    ) -> None:
        """Any mix of prefill chunks and decodes: one causal SDPA call per request."""
        block_size = kv_cache.shape[2]
        qsl = md.query_start_loc_cpu.tolist()
        seq_lens = md.seq_lens_cpu.tolist()
        output[md.num_actual_tokens :].zero_()
        for r in range(md.num_reqs):
            start, end, seq_len = qsl[r], qsl[r + 1], seq_lens[r]
            q_len = end - start
            blocks = md.block_table[r, : cdiv(seq_len, block_size)]
            k = kv_cache[0][blocks].flatten(0, 1)[:seq_len]  # [S, KH, D]
            v = kv_cache[1][blocks].flatten(0, 1)[:seq_len]
            q_pos = torch.arange(seq_len - q_len, seq_len, device=query.device)
            mask = torch.arange(seq_len, device=query.device)[None, :] <= q_pos[:, None]
            out = F.scaled_dot_product_attention(
                query[start:end].transpose(0, 1),  # [H, Q, D]
                k.transpose(0, 1),
                v.transpose(0, 1),
                attn_mask=mask,
                scale=self.scale,
                enable_gqa=self.num_heads != self.num_kv_heads,
            )
            output[start:end] = out.transpose(0, 1)


class TorchAttentionBackend(AttentionBackend):
    name = "torch"
    cudagraph_support = AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE
    impl_cls = TorchAttentionImpl
