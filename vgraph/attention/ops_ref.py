"""Plain torch references for the vgraph_C kernels (csrc/), with the same signatures.

They define what the kernels compute and are what tests/kernels compares against: readable loops
over requests, float32 math, host reads of the metadata. Never used on a hot path and never inside
a captured graph (they read lengths on the host).
"""

from __future__ import annotations

import torch


def reshape_and_cache_ref(
    key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    value: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    key_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    value_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    slot_mapping: torch.Tensor,  # [num_tokens] int64, -1 = pad token
) -> None:
    """Writes token i's K/V rows to slot slot_mapping[i] (block s // block_size, offset s % bs)."""
    num_tokens = key.shape[0]
    slots = slot_mapping[:num_tokens].long()
    keep = slots >= 0
    flat_k = key_cache.view(-1, *key_cache.shape[2:])  # [num_slots, num_kv_heads, head_dim]
    flat_v = value_cache.view(-1, *value_cache.shape[2:])
    flat_k[slots[keep]] = key[keep]
    flat_v[slots[keep]] = value[keep]


def paged_attention_ref(
    out: torch.Tensor,  # [num_tokens, num_heads, head_dim], written in place
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    key_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    value_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    query_start_loc: torch.Tensor,  # [num_reqs_padded + 1] int32
    seq_lens: torch.Tensor,  # [num_reqs_padded] int32
    block_table: torch.Tensor,  # [num_reqs_padded, max_blocks_per_req] int32
    scale: float,
    num_reqs: int | None = None,
) -> None:
    """Causal attention of each request's query tokens over its paged K/V.

    Request r owns query rows qsl[r]..qsl[r+1]; its query token i sits at position
    seq_len - q_len + i and attends to positions 0..that position. Rows owned by no request
    (pad tokens) are zeros.
    """
    num_reqs = seq_lens.shape[0] if num_reqs is None else num_reqs
    block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
    group = query.shape[1] // num_kv_heads
    qsl = query_start_loc.tolist()
    lens = seq_lens.tolist()
    result = torch.zeros(out.shape, dtype=torch.float32, device=out.device)
    for r in range(num_reqs):
        start, end, seq_len = qsl[r], qsl[r + 1], lens[r]
        q_len = end - start
        if q_len <= 0 or seq_len <= 0:
            continue
        positions = torch.arange(seq_len, device=out.device)
        blocks = block_table[r, positions // block_size].long()
        k = key_cache[blocks, positions % block_size].float()  # [seq_len, num_kv_heads, head_dim]
        v = value_cache[blocks, positions % block_size].float()
        k = k.repeat_interleave(group, dim=1)  # [seq_len, num_heads, head_dim]
        v = v.repeat_interleave(group, dim=1)
        q = query[start:end].float()  # [q_len, num_heads, head_dim]
        scores = torch.einsum("qhd,khd->hqk", q, k) * scale  # [num_heads, q_len, seq_len]
        query_pos = seq_len - q_len + torch.arange(q_len, device=out.device)
        causal = positions[None, :] <= query_pos[:, None]  # [q_len, seq_len]
        scores = scores.masked_fill(~causal, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        result[start:end] = torch.einsum("hqk,khd->qhd", probs, v)
    out.copy_(result.to(out.dtype))
