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
    key: torch.Tensor | None = None,  # the append: reshape_and_cache_ref's arguments, first
    value: torch.Tensor | None = None,
    slot_mapping: torch.Tensor | None = None,
) -> None:
    """Causal attention of each request's query tokens over its paged K/V.

    Request r owns query rows qsl[r]..qsl[r+1]; its query token i sits at position
    seq_len - q_len + i and attends to positions 0..that position. Rows owned by no request
    (pad tokens) are zeros. With key, value and slot_mapping the step's K/V are written first.
    """
    if key is not None:
        assert value is not None and slot_mapping is not None
        reshape_and_cache_ref(key, value, key_cache, value_cache, slot_mapping)
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


def merge_attn_states_ref(
    prefix_out: torch.Tensor,  # [num_tokens, num_heads, head_dim] float32
    prefix_lse: torch.Tensor,  # [num_tokens, num_heads] float32, -inf = attended nothing
    suffix_out: torch.Tensor,  # [num_tokens, num_heads, head_dim] float32
    suffix_lse: torch.Tensor,  # [num_tokens, num_heads] float32
) -> torch.Tensor:  # [num_tokens, num_heads, head_dim] float32
    """Softmax over the union of two disjoint key sets from each set's normalised output and
    log-sum-exp: weights exp(lse_i - max) / sum. Rows where both are -inf come back zeros."""
    m = torch.maximum(prefix_lse, suffix_lse)
    m = m.masked_fill(m == float("-inf"), 0.0)
    w_p = torch.exp(prefix_lse - m)  # [num_tokens, num_heads]
    w_s = torch.exp(suffix_lse - m)
    denom = (w_p + w_s).clamp_min(torch.finfo(torch.float32).tiny)
    return (prefix_out * w_p[..., None] + suffix_out * w_s[..., None]) / denom[..., None]


def _attend_with_lse(
    q: torch.Tensor,  # [q_len, num_heads, head_dim] float32, already scaled
    k: torch.Tensor,  # [kv_len, num_heads, head_dim] float32
    v: torch.Tensor,  # [kv_len, num_heads, head_dim] float32
    mask: torch.Tensor | None,  # [q_len, kv_len] bool, True = attend; None = all
) -> tuple[torch.Tensor, torch.Tensor]:  # [q_len, num_heads, head_dim], [q_len, num_heads]
    scores = torch.einsum("qhd,khd->qhk", q, k)  # [q_len, num_heads, kv_len]
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # -inf where nothing is attended
    probs = torch.exp(scores - lse.masked_fill(lse == float("-inf"), 0.0)[..., None])
    return torch.einsum("qhk,khd->qhd", probs, v), lse


def cascade_attention_ref(
    out: torch.Tensor,  # [num_tokens, num_heads, head_dim], written in place
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    key_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    value_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    query_start_loc: torch.Tensor,  # [num_reqs_padded + 1] int32
    seq_lens: torch.Tensor,  # [num_reqs_padded] int32
    block_table: torch.Tensor,  # [num_reqs_padded, max_blocks_per_req] int32
    num_prefix_blocks: int,
    scale: float,
    num_reqs: int | None = None,
) -> None:
    """paged_attention_ref's result, computed as cascade attention: the first
    num_prefix_blocks blocks (the same for every request: block_table row 0's) are attended by
    every query token at once without a causal mask (each query must sit after them), each
    request's remaining positions causally per request, and the two partials are merged by
    their log-sum-exp. Rows owned by no request are zeros."""
    num_reqs = seq_lens.shape[0] if num_reqs is None else num_reqs
    block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
    group = query.shape[1] // num_kv_heads
    qsl = query_start_loc.tolist()
    lens = seq_lens.tolist()
    prefix_len = num_prefix_blocks * block_size
    num_owned = qsl[num_reqs] if num_reqs else 0
    q = query[:num_owned].float() * scale  # [num_owned, num_heads, head_dim]
    # 1. the shared prefix, once for all query tokens
    blocks = block_table[0, :num_prefix_blocks].long()
    k_p = key_cache[blocks].flatten(0, 1).float().repeat_interleave(group, dim=1)
    v_p = value_cache[blocks].flatten(0, 1).float().repeat_interleave(group, dim=1)
    prefix_out, prefix_lse = _attend_with_lse(q, k_p, v_p, None)
    # 2. each request's own suffix, causal
    suffix_out = torch.zeros_like(prefix_out)
    suffix_lse = torch.full_like(prefix_lse, float("-inf"))
    for r in range(num_reqs):
        start, end, seq_len = qsl[r], qsl[r + 1], lens[r]
        q_len = end - start
        if q_len <= 0 or seq_len <= prefix_len:
            continue
        assert seq_len - q_len >= prefix_len, "a query token sits inside the shared prefix"
        positions = torch.arange(prefix_len, seq_len, device=out.device)
        rows = block_table[r, positions // block_size].long()
        k = key_cache[rows, positions % block_size].float().repeat_interleave(group, dim=1)
        v = value_cache[rows, positions % block_size].float().repeat_interleave(group, dim=1)
        query_pos = seq_len - q_len + torch.arange(q_len, device=out.device)
        causal = positions[None, :] <= query_pos[:, None]  # [q_len, suffix_len]
        suffix_out[start:end], suffix_lse[start:end] = _attend_with_lse(q[start:end], k, v, causal)
    # 3. merge by log-sum-exp
    result = torch.zeros(out.shape, dtype=torch.float32, device=out.device)
    result[:num_owned] = merge_attn_states_ref(prefix_out, prefix_lse, suffix_out, suffix_lse)
    for r in range(num_reqs):  # requests with nothing to attend (seq_len 0) are pads
        if lens[r] <= 0:
            result[qsl[r] : qsl[r + 1]] = 0.0
    out.copy_(result.to(out.dtype))
