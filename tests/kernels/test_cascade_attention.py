"""Cascade attention: the torch reference equals plain paged attention, the lse merge is exact,
and vgraph_C.cascade_attention (CPU always, CUDA under the `gpu` marker) matches a float32
reference over dtypes, head sizes, GQA ratios, prefix lengths, pad tokens and pad requests."""

from __future__ import annotations

import pytest
import torch

from tests.kernels.devices import cuda_param
from vgraph._ext import ext_unavailable_reason, load_ext
from vgraph.attention.ops_ref import (
    _attend_with_lse,
    cascade_attention_ref,
    merge_attn_states_ref,
    paged_attention_ref,
)

CUDA = cuda_param("cascade_attention")
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
REL_TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def make_batch(
    suffix_lens: list[int],  # tokens after the shared prefix, per request (query included)
    q_lens: list[int],
    num_prefix_blocks: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    block_size: int = 16,
    num_pad_reqs: int = 1,
    num_pad_tokens: int = 2,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    seed: int = 0,
) -> dict:
    """Requests sharing their first num_prefix_blocks blocks (the same ids), each with blocks of
    its own after them, in a shuffled pool; pad requests (seq_len 0) and pad tokens at the end."""
    gen = torch.Generator().manual_seed(seed)
    prefix_len = num_prefix_blocks * block_size
    own = [-(-n // block_size) for n in suffix_lens]
    max_blocks = num_prefix_blocks + max(own) + 1
    num_blocks = num_prefix_blocks + sum(own) + 4
    perm = torch.randperm(num_blocks, generator=gen).int()
    prefix_ids, rest = perm[:num_prefix_blocks], perm[num_prefix_blocks:]
    num_reqs = len(suffix_lens) + num_pad_reqs
    table = torch.zeros(num_reqs, max_blocks, dtype=torch.int32)
    offset = 0
    for r, n in enumerate(own):
        table[r, :num_prefix_blocks] = prefix_ids
        table[r, num_prefix_blocks : num_prefix_blocks + n] = rest[offset : offset + n]
        offset += n
    seq_lens = [prefix_len + n for n in suffix_lens] + [0] * num_pad_reqs
    qsl = [0]
    for q in q_lens + [0] * num_pad_reqs:
        qsl.append(qsl[-1] + q)
    num_tokens = qsl[-1] + num_pad_tokens
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    return dict(
        query=torch.randn(num_tokens, num_heads, head_dim, generator=gen).to(device, dtype),
        key_cache=torch.randn(*shape, generator=gen).to(device, dtype),
        value_cache=torch.randn(*shape, generator=gen).to(device, dtype),
        query_start_loc=torch.tensor(qsl, dtype=torch.int32, device=device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
        block_table=table.to(device),
    )


def _float32(batch: dict) -> dict:
    return {k: v.cpu().float() if v.is_floating_point() else v.cpu() for k, v in batch.items()}


def reference(batch: dict, scale: float) -> torch.Tensor:
    """Plain paged attention in float32 on the CPU: what cascade must reproduce."""
    b = _float32(batch)
    out = torch.empty_like(b["query"])
    paged_attention_ref(out, scale=scale, **b)
    return out


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float().cpu() - want).norm() / want.norm().clamp_min(1e-12)).item()


def test_merge_of_two_key_sets_equals_softmax_over_their_union() -> None:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(5, 4, 32, generator=gen)
    k, v = torch.randn(40, 4, 32, generator=gen), torch.randn(40, 4, 32, generator=gen)
    full, full_lse = _attend_with_lse(q, k, v, None)
    a, a_lse = _attend_with_lse(q, k[:13], v[:13], None)
    b, b_lse = _attend_with_lse(q, k[13:], v[13:], None)
    torch.testing.assert_close(merge_attn_states_ref(a, a_lse, b, b_lse), full)
    # one side empty (lse -inf): the other side alone; both empty: zeros
    empty = torch.full_like(a_lse, float("-inf"))
    torch.testing.assert_close(merge_attn_states_ref(full, full_lse, a * 0, empty), full)
    assert merge_attn_states_ref(a * 0, empty, a * 0, empty).abs().max() == 0


@pytest.mark.parametrize(
    "suffix_lens, q_lens",
    [([1, 5, 17, 33, 2], [1, 1, 1, 1, 1]), ([9, 20, 3], [4, 20, 1])],
    ids=["decode", "mixed"],
)
@pytest.mark.parametrize("num_prefix_blocks", [0, 1, 3])
def test_reference_equals_paged_attention(suffix_lens, q_lens, num_prefix_blocks) -> None:
    batch = make_batch(suffix_lens, q_lens, num_prefix_blocks, 8, 2, 32)
    out = torch.full_like(batch["query"], float("nan"))
    cascade_attention_ref(out, num_prefix_blocks=num_prefix_blocks, scale=0.17, **batch)
    torch.testing.assert_close(out, reference(batch, 0.17), rtol=1e-5, atol=1e-5)
    assert out[-2:].abs().max() == 0  # pad tokens are zeros


@pytest.mark.parametrize("device", ["cpu", CUDA])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("heads", [(8, 2, 64), (12, 4, 128), (9, 3, 64), (4, 4, 64)])
@pytest.mark.parametrize("num_prefix_blocks", [0, 2, 5])
def test_kernel_matches_float32_reference(device, dtype, heads, num_prefix_blocks) -> None:
    if not load_ext():
        pytest.skip(ext_unavailable_reason())
    num_heads, num_kv_heads, head_dim = heads
    suffix_lens, q_lens = [1, 7, 16, 40, 3, 2, 1, 22, 5], [1, 1, 1, 3, 1, 2, 1, 1, 1]
    batch = make_batch(
        suffix_lens,
        q_lens,
        num_prefix_blocks,
        num_heads,
        num_kv_heads,
        head_dim,
        dtype=dtype,
        device=device,
    )
    out = torch.full_like(batch["query"], float("nan"))
    scale = head_dim**-0.5
    torch.ops.vgraph_C.cascade_attention(
        out, num_prefix_blocks=num_prefix_blocks, scale=scale, **batch
    )
    want = reference(batch, scale)
    assert rel_err(out, want) < REL_TOL[dtype]
    assert out[-2:].abs().max() == 0


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("heads", [(32, 8, 64), (9, 3, 64), (32, 8, 128)])
def test_cuda_kernel_long_shared_prefix(dtype, heads) -> None:
    """64 decode requests over a 2,048-token shared prefix (the benchmark's shape), against the
    float32 reference: the numerics vLLM turned cascade off for."""
    if not (torch.cuda.is_available() and load_ext()):
        pytest.skip("needs a GPU and vgraph._C")
    num_heads, num_kv_heads, head_dim = heads
    suffix = [1 + (i * 37) % 300 for i in range(64)]
    batch = make_batch(
        suffix, [1] * 64, 128, num_heads, num_kv_heads, head_dim, dtype=dtype, device="cuda"
    )
    out = torch.empty_like(batch["query"])
    torch.ops.vgraph_C.cascade_attention(out, num_prefix_blocks=128, scale=head_dim**-0.5, **batch)
    assert rel_err(out, reference(batch, head_dim**-0.5)) < REL_TOL[dtype]


def test_bad_prefix_length_is_rejected() -> None:
    if not load_ext():
        pytest.skip(ext_unavailable_reason())
    batch = make_batch([1, 2], [1, 1], 1, 4, 2, 32)
    out = torch.empty_like(batch["query"])
    with pytest.raises(RuntimeError, match="num_prefix_blocks"):
        torch.ops.vgraph_C.cascade_attention(out, num_prefix_blocks=99, scale=1.0, **batch)
