"""The `torch` attention backend: plain PyTorch over the paged KV cache, on CPU and CUDA.

It is the readable reference. Mixed and prefill steps loop over requests using host copies of the
lengths (eager only). Uniform single-token decode takes a batched path that reads lengths and block
tables from device tensors only, with shapes fixed by the buffers, so it can be captured in a graph:
hence UNIFORM_SINGLE_TOKEN_DECODE. Cascade steps (a shared prefix) run ops_ref's cascade
reference, eagerly: they never run in a FULL graph.

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
from vgraph.attention.ops_ref import cascade_attention_ref
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


_CHUNK_ELEMS = 1 << 22  # K (and V) elements gathered at a time: 16 MiB each in fp32


def paged_decode_attention(
    out: torch.Tensor,  # [B, num_heads, head_dim], written in full
    query: torch.Tensor,  # [B, num_heads, head_dim], one token per request
    kv_cache: torch.Tensor,  # [2, num_blocks, block_size, num_kv_heads, head_dim]
    block_table: torch.Tensor,  # [>= B, max_blocks_per_req] int32
    seq_lens: torch.Tensor,  # [>= B] int32; 0 for pad requests (their rows come back 0)
    scale: float,
    num_blocks: int,  # blocks of each table row to visit: an upper bound of what is in use
) -> None:
    """Attention of each request's query token over its first seq_lens[b] cached tokens.

    Visits the table a chunk of blocks at a time with a running softmax (flash-decoding), so
    memory stays within _CHUNK_ELEMS however long the context: never K/V for every position.
    """
    b = query.shape[0]
    block_size, kh, d = kv_cache.shape[2], kv_cache.shape[3], kv_cache.shape[4]
    g = query.shape[1] // kh
    q = query.view(b, kh, g, d).float() * scale  # [B, KH, G, D]
    lens = seq_lens[:b, None]  # [B, 1]
    m = torch.full((b, kh, g), float("-inf"), device=query.device)  # running max
    denom = torch.zeros((b, kh, g), device=query.device)  # running sum of exp
    acc = torch.zeros((b, kh, g, d), device=query.device)  # running sum of exp * v
    step = max(1, _CHUNK_ELEMS // max(1, b * block_size * kh * d))
    for start in range(0, num_blocks, step):
        blocks = block_table[:b, start : min(start + step, num_blocks)].flatten()  # [B*C]
        # index_select, not k_cache[blocks]: advanced indexing is ~50x slower on the CPU
        k = kv_cache[0].index_select(0, blocks).view(b, -1, kh, d).transpose(1, 2).float()
        v = kv_cache[1].index_select(0, blocks).view(b, -1, kh, d).transpose(1, 2).float()
        s = q @ k.transpose(-1, -2)  # [B, KH, G, C*bs]; k, v: [B, KH, C*bs, D]
        pos = torch.arange(start * block_size, start * block_size + k.shape[2], device=q.device)
        s = s.masked_fill(~(pos[None, :] < lens)[:, None, None, :], float("-inf"))
        m_new = torch.maximum(m, s.amax(dim=-1))
        m_safe = m_new.masked_fill(m_new == float("-inf"), 0.0)  # no token yet: exp stays 0
        p = torch.exp(s - m_safe[..., None])
        corr = torch.exp(m - m_safe)
        denom = denom * corr + p.sum(dim=-1)
        acc = acc * corr[..., None] + p @ v
        m = m_new
    res = acc / denom.clamp_min(torch.finfo(torch.float32).tiny)[..., None]
    res = torch.where((seq_lens[:b] > 0)[:, None, None, None], res, 0.0)
    out.copy_(res.reshape(b, kh * g, d))


def _paged_decode_attention_cpu(
    out: torch.Tensor,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    num_blocks: int,
) -> None:
    """The CPU kernel reads the lengths where they live, as a GPU kernel reads device memory:
    a replayed graph visits the blocks in use, not the table's whole width."""
    b = query.shape[0]
    longest = int(seq_lens[:b].max()) if b else 0
    num_blocks = min(num_blocks, cdiv(longest, kv_cache.shape[2]))
    paged_decode_attention(out, query, kv_cache, block_table, seq_lens, scale, num_blocks)


# An op (not a Python custom op) so the CPU recorder records it as one kernel, replayed on the
# captured tensors, rather than recording the ops of one length's worth of blocks.
_lib = torch.library.Library("vgraph", "FRAGMENT")
_lib.define(
    "paged_decode_attention(Tensor(a!) out, Tensor query, Tensor kv_cache, Tensor block_table, "
    "Tensor seq_lens, float scale, int num_blocks) -> ()"
)
_lib.impl("paged_decode_attention", _paged_decode_attention_cpu, "CPU")
_lib.impl("paged_decode_attention", paged_decode_attention, "CUDA")


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
        if metadata.num_common_prefix_blocks:  # cascade: eager only, the readable reference
            cascade_attention_ref(
                output,
                query,
                kv_cache[0],
                kv_cache[1],
                metadata.query_start_loc,
                metadata.seq_lens,
                metadata.block_table,
                metadata.num_common_prefix_blocks,
                self.scale,
                metadata.num_reqs,
            )
        elif metadata.max_query_len == 1:
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
        output: torch.Tensor,  # [num_reqs_padded, num_heads, head_dim]
    ) -> None:
        """Batched single-token decode; graph-safe: no host reads, shapes from the buffers.

        Eager visits the blocks the longest sequence needs. A capture may not read that length,
        so it calls the op, which bounds its work by the table width (CUDA) or by the lengths it
        reads when it runs (the CPU "kernel", as a GPU kernel reads device memory).
        """
        if md.for_capture:
            torch.ops.vgraph.paged_decode_attention(
                output,
                query,
                kv_cache,
                md.block_table,
                md.seq_lens,
                self.scale,
                md.block_table.shape[1],
            )
        else:
            num_blocks = cdiv(md.max_seq_len, kv_cache.shape[2])
            paged_decode_attention(
                output, query, kv_cache, md.block_table, md.seq_lens, self.scale, num_blocks
            )

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

    @classmethod
    def supports_cascade(cls, device: torch.device) -> bool:
        return True
