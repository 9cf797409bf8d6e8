"""vgraph_C.reshape_and_cache against the torch reference: every real token's K/V lands in its slot
bit-exactly, pad tokens (slot -1) write nothing, other slots stay untouched; contiguous and
strided (fused qkv) inputs; CPU always, CUDA under the `gpu` marker.
"""

from __future__ import annotations

import pytest
import torch

from tests.kernels.devices import cuda_param
from vgraph._ext import ext_unavailable_reason, load_ext
from vgraph.attention.ops_ref import reshape_and_cache_ref

if not load_ext():
    pytest.skip(ext_unavailable_reason(), allow_module_level=True)

CUDA = cuda_param()
NUM_KV_HEADS, NUM_BLOCKS, NUM_TOKENS, NUM_PAD_TOKENS = 4, 12, 37, 5


@pytest.mark.parametrize("device", ["cpu", CUDA])
@pytest.mark.parametrize("fused_qkv", [False, True], ids=["contiguous", "fused_qkv"])
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_reshape_and_cache_matches_reference(
    dtype: torch.dtype, head_dim: int, block_size: int, fused_qkv: bool, device: str
) -> None:
    gen = torch.Generator().manual_seed(head_dim + block_size + fused_qkv)
    num_tokens = NUM_TOKENS + NUM_PAD_TOKENS
    kv_width = NUM_KV_HEADS * head_dim
    if fused_qkv:  # key/value are strided views into one [num_tokens, 3 * kv_width] row
        qkv = torch.randn(num_tokens, 3 * kv_width, generator=gen).to(dtype).to(device)
        _, k, v = qkv.split([kv_width, kv_width, kv_width], dim=-1)
        key = k.view(num_tokens, NUM_KV_HEADS, head_dim)
        value = v.view(num_tokens, NUM_KV_HEADS, head_dim)
    else:
        key = torch.randn(num_tokens, NUM_KV_HEADS, head_dim, generator=gen).to(dtype).to(device)
        value = torch.randn(num_tokens, NUM_KV_HEADS, head_dim, generator=gen).to(dtype)
        value = value.to(device)
    assert key.is_contiguous() != fused_qkv
    # Distinct random slots for the real tokens, -1 for the pad tokens (placed among them).
    slots = torch.randperm(NUM_BLOCKS * block_size, generator=gen)[:num_tokens]
    slots[torch.randperm(num_tokens, generator=gen)[:NUM_PAD_TOKENS]] = -1
    slot_mapping = slots.to(device)
    shape = (2, NUM_BLOCKS, block_size, NUM_KV_HEADS, head_dim)
    kv_cache = torch.randn(shape, generator=gen).to(dtype).to(device)
    kv_before = kv_cache.clone()
    kv_ref = kv_cache.clone()

    torch.ops.vgraph_C.reshape_and_cache(key, value, kv_cache[0], kv_cache[1], slot_mapping)
    reshape_and_cache_ref(key, value, kv_ref[0], kv_ref[1], slot_mapping)

    assert torch.equal(kv_cache, kv_ref)
    flat = kv_cache.view(2, -1, NUM_KV_HEADS, head_dim)
    written = slot_mapping[slot_mapping >= 0]
    assert torch.equal(flat[0, written], key[slot_mapping >= 0])
    untouched = torch.ones(flat.shape[1], dtype=torch.bool, device=device)
    untouched[written] = False
    assert torch.equal(flat[:, untouched], kv_before.view_as(flat)[:, untouched])


def test_rejects_out_of_range_slot() -> None:
    key = torch.randn(2, NUM_KV_HEADS, 64)
    kv_cache = torch.randn(2, 2, 16, NUM_KV_HEADS, 64)
    slots = torch.tensor([0, 2 * 16], dtype=torch.int64)
    with pytest.raises(RuntimeError, match="outside the cache"):
        torch.ops.vgraph_C.reshape_and_cache(key, key, kv_cache[0], kv_cache[1], slots)
