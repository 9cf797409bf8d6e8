"""The torch backend's graph-safe decode (paged_decode_attention) against the plain reference,
and its memory bound: it never gathers K/V for every position of a long block table."""

from __future__ import annotations

import pytest
import torch

from vgraph.attention import torch_backend
from vgraph.attention.ops_ref import paged_attention_ref
from vgraph.attention.torch_backend import paged_decode_attention
from vgraph.torch_internals import TorchDispatchMode, tree_flatten

NUM_BLOCKS, BLOCK_SIZE, KV_HEADS, HEADS, HEAD_DIM, WIDTH = 96, 4, 2, 6, 8, 16


def case(seq_lens: list[int], seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    kv = torch.randn(2, NUM_BLOCKS, BLOCK_SIZE, KV_HEADS, HEAD_DIM, generator=g)
    b = len(seq_lens)
    query = torch.randn(b, HEADS, HEAD_DIM, generator=g)
    table = torch.randperm(NUM_BLOCKS, generator=g)[: b * WIDTH].view(b, WIDTH).int()
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    ref = torch.empty_like(query)
    paged_attention_ref(
        ref, query, kv[0], kv[1], torch.arange(b + 1, dtype=torch.int32), lens, table, 0.3
    )
    return query, kv, table, lens, ref


@pytest.mark.parametrize("chunk_elems", [1, 300, 1 << 22])  # one block a chunk .. all at once
def test_equals_reference_whatever_the_chunking(monkeypatch, chunk_elems):
    monkeypatch.setattr(torch_backend, "_CHUNK_ELEMS", chunk_elems)
    query, kv, table, lens, ref = case([1, 13, 64, 0, 30])  # 0: a pad request -> zeros
    out = torch.full_like(query, float("nan"))
    paged_decode_attention(out, query, kv, table, lens, 0.3, WIDTH)  # the whole table width
    torch.testing.assert_close(out, ref)
    assert bool((out[3] == 0).all())


def test_cpu_op_reads_the_lengths_when_it_runs():
    query, kv, table, lens, ref = case([5, 9, 2])
    out = torch.empty_like(query)
    torch.ops.vgraph.paged_decode_attention(out, query, kv, table, lens, 0.3, WIDTH)
    torch.testing.assert_close(out, ref)


class MaxNumel(TorchDispatchMode):
    """The largest tensor any op allocates while the mode is on."""

    def __init__(self) -> None:
        super().__init__()
        self.max_numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        seen = {
            t.untyped_storage().data_ptr()
            for t in tree_flatten((args, kwargs))[0]
            if isinstance(t, torch.Tensor)
        }
        for t in tree_flatten(out)[0]:  # new memory only, not views of the inputs
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in seen:
                self.max_numel = max(self.max_numel, t.numel())
        return out


def test_a_long_table_is_visited_a_chunk_at_a_time(monkeypatch):
    """What a captured graph does on CUDA (it may not read the lengths): visit the whole table
    width, yet never hold K or V for every position of it."""
    monkeypatch.setattr(torch_backend, "_CHUNK_ELEMS", 2 * BLOCK_SIZE * KV_HEADS * HEAD_DIM * 4)
    query, kv, table, lens, ref = case([60, 3, 17, 41])
    out = torch.empty_like(query)
    with MaxNumel() as mode:
        paged_decode_attention(out, query, kv, table, lens, 0.3, WIDTH)
    torch.testing.assert_close(out, ref)
    whole_width = 4 * WIDTH * BLOCK_SIZE * KV_HEADS * HEAD_DIM  # K of every position
    assert mode.max_numel <= whole_width // 8
