"""vgraph_C.paged_attention (with reshape_and_cache writing the step's K/V first, or with the
op's own append of them) against the torch reference, over dtypes, head sizes, block sizes, GQA
ratios and decode / prefill / mixed batches with pad requests and pad tokens; on CPU always, on
CUDA under the `gpu` marker. Also: a CUDA graph captured once stays correct when the lengths and
block tables in its buffers change, and replays of several graphs with split and unsplit contexts
leave the CUDA merge's arrival counters at zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch

from tests.kernels.devices import cuda_param
from vgraph._ext import ext_unavailable_reason, has_cuda_kernels, load_ext
from vgraph.attention.ops_ref import paged_attention_ref, reshape_and_cache_ref

if not load_ext():
    pytest.skip(ext_unavailable_reason(), allow_module_level=True)

CUDA = cuda_param()
DEVICES = ["cpu", CUDA]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Relative-norm error bound per dtype: dominated by rounding the output to the dtype.
REL_TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
NUM_KV_HEADS = 2

# (q_len, seq_len) of the real requests; pads are added by Batch.
BATCHES = {
    "decode": [(1, 1), (1, 37), (1, 16), (1, 95), (1, 64)],
    "prefill": [(17, 17), (5, 5), (24, 70), (33, 33)],
    "mixed": [(1, 50), (12, 12), (1, 1), (7, 29), (1, 33), (20, 81)],
}


@dataclass
class Batch:
    """A step's inputs in the engine's layout; tensors are views the kernels must accept."""

    query: torch.Tensor  # [num_tokens, num_heads, head_dim]
    key: torch.Tensor  # [num_tokens, num_kv_heads, head_dim]
    value: torch.Tensor  # [num_tokens, num_kv_heads, head_dim]
    kv_cache: torch.Tensor  # [2, num_blocks, block_size, num_kv_heads, head_dim]
    slot_mapping: torch.Tensor  # [num_tokens] int64
    query_start_loc: torch.Tensor  # [num_reqs_padded + 1] int32
    seq_lens: torch.Tensor  # [num_reqs_padded] int32
    block_table: torch.Tensor  # [num_reqs_padded, max_blocks_per_req] int32
    pad_rows: torch.Tensor  # [num_tokens] bool, rows owned by no request


def make_metadata(
    reqs: list[tuple[int, int]],
    num_pad_reqs: int,
    num_pad_tokens: int,
    block_size: int,
    num_blocks: int,
    max_blocks: int,
    gen: torch.Generator,
) -> tuple[torch.Tensor, ...]:
    """qsl, seq_lens, block_table (random, non-contiguous block ids), slot_mapping, pad_rows."""
    num_reqs_padded = len(reqs) + num_pad_reqs
    block_table = torch.randint(0, num_blocks, (num_reqs_padded, max_blocks), generator=gen)
    free = torch.randperm(num_blocks, generator=gen).tolist()
    qsl, seq_lens, slots = [0], [], []
    for q_len, seq_len in reqs:
        n = math.ceil(seq_len / block_size)
        block_table[len(seq_lens), :n] = torch.tensor([free.pop() for _ in range(n)])
        for pos in range(seq_len - q_len, seq_len):
            slots.append(
                int(block_table[len(seq_lens), pos // block_size]) * block_size + pos % block_size
            )
        qsl.append(qsl[-1] + q_len)
        seq_lens.append(seq_len)
    qsl += [qsl[-1]] * num_pad_reqs  # pad requests: no tokens, seq_len 0
    seq_lens += [0] * num_pad_reqs
    num_real = len(slots)
    slots += [-1] * num_pad_tokens
    pad_rows = torch.arange(num_real + num_pad_tokens) >= num_real
    i32 = {"dtype": torch.int32}
    return (
        torch.tensor(qsl, **i32),
        torch.tensor(seq_lens, **i32),
        block_table.to(torch.int32),
        torch.tensor(slots, dtype=torch.int64),
        pad_rows,
    )


def make_batch(
    reqs: list[tuple[int, int]],
    group: int,
    head_dim: int,
    block_size: int,
    dtype: torch.dtype,
    device: str,
    seed: int,
    fused_qkv: bool = False,
    num_pad_reqs: int = 2,
    num_pad_tokens: int = 3,
) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    max_blocks = max(math.ceil(s / block_size) for _, s in reqs) + 2
    num_blocks = sum(math.ceil(s / block_size) for _, s in reqs) + 5
    qsl, seq_lens, block_table, slots, pad_rows = make_metadata(
        reqs, num_pad_reqs, num_pad_tokens, block_size, num_blocks, max_blocks, gen
    )
    num_tokens, num_heads = len(slots), NUM_KV_HEADS * group

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(dtype=dtype, device=device)

    if fused_qkv:  # views into one [num_tokens, (num_heads + 2 * num_kv_heads) * head_dim] row
        qkv = randn(num_tokens, (num_heads + 2 * NUM_KV_HEADS) * head_dim)
        q, k, v = qkv.split(
            [num_heads * head_dim, NUM_KV_HEADS * head_dim, NUM_KV_HEADS * head_dim], dim=-1
        )
        query = q.view(num_tokens, num_heads, head_dim)
        key = k.view(num_tokens, NUM_KV_HEADS, head_dim)
        value = v.view(num_tokens, NUM_KV_HEADS, head_dim)
    else:
        query = randn(num_tokens, num_heads, head_dim)
        key = randn(num_tokens, NUM_KV_HEADS, head_dim)
        value = randn(num_tokens, NUM_KV_HEADS, head_dim)
    return Batch(
        query,
        key,
        value,
        randn(2, num_blocks, block_size, NUM_KV_HEADS, head_dim),
        slots.to(device),
        qsl.to(device),
        seq_lens.to(device),
        block_table.to(device),
        pad_rows.to(device),
    )


def run_op(b: Batch, out: torch.Tensor, num_reqs: int | None = None, append: bool = False) -> None:
    """The step's K/V written by reshape_and_cache, then attention; or (append) both in one
    paged_attention call, which on CUDA reads the step's own positions from the K/V rows."""
    scale = b.query.shape[-1] ** -0.5
    if not append:
        torch.ops.vgraph_C.reshape_and_cache(
            b.key, b.value, b.kv_cache[0], b.kv_cache[1], b.slot_mapping
        )
    kv = (b.key, b.value, b.slot_mapping) if append else (None, None, None)
    torch.ops.vgraph_C.paged_attention(
        out,
        b.query,
        b.kv_cache[0],
        b.kv_cache[1],
        b.query_start_loc,
        b.seq_lens,
        b.block_table,
        scale,
        num_reqs,
        *kv,
    )


def run_ref(b: Batch, kv_cache: torch.Tensor, num_reqs: int | None = None) -> torch.Tensor:
    """The reference on its own copy of the cache; returns a float32 output."""
    reshape_and_cache_ref(b.key, b.value, kv_cache[0], kv_cache[1], b.slot_mapping)
    out = torch.empty(b.query.shape, dtype=torch.float32, device=b.query.device)
    paged_attention_ref(
        out,
        b.query,
        kv_cache[0],
        kv_cache[1],
        b.query_start_loc,
        b.seq_lens,
        b.block_table,
        b.query.shape[-1] ** -0.5,
        num_reqs,
    )
    return out


def capture_op(static: Batch, append: bool = False) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """run_op over static's buffers captured in a CUDA graph (after a warm-up on a side stream,
    outside the capture) -> (graph, the output it writes)."""
    out = torch.empty_like(static.query)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run_op(static, out, append=append)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run_op(static, out, append=append)
    return graph, out


def check(out: torch.Tensor, ref: torch.Tensor, pad_rows: torch.Tensor) -> None:
    assert not out.isnan().any(), "some rows of out were not written"
    assert (out[pad_rows] == 0).all(), "pad-token rows must be zeros"
    err = ((out.float() - ref).norm() / ref.norm()).item()
    assert err < REL_TOL[out.dtype], f"relative error {err:.2e} >= {REL_TOL[out.dtype]:.0e}"


APPEND = pytest.mark.parametrize("append", [False, True], ids=["write_first", "append"])


@pytest.mark.parametrize("device", DEVICES)
@APPEND
@pytest.mark.parametrize("kind", list(BATCHES))
@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_paged_attention_matches_reference(
    dtype: torch.dtype,
    head_dim: int,
    block_size: int,
    group: int,
    kind: str,
    append: bool,
    device: str,
) -> None:
    b = make_batch(
        BATCHES[kind],
        group,
        head_dim,
        block_size,
        dtype,
        device,
        seed=head_dim * 100 + block_size * 10 + group + len(kind),
        fused_qkv=kind == "mixed",
    )
    kv_ref = b.kv_cache.clone()
    out = torch.full_like(b.query, float("nan"))
    run_op(b, out, append=append)
    ref = run_ref(b, kv_ref)
    assert torch.equal(b.kv_cache, kv_ref), "the cache write differs from the reference"
    check(out, ref, b.pad_rows)


@pytest.mark.parametrize("device", DEVICES)
@APPEND
def test_num_reqs_bounds_the_requests(append: bool, device: str) -> None:
    """Requests at or past num_reqs own no tokens: their rows come out as zeros (their K/V are
    still written to their slots, as reshape_and_cache writes every slot given)."""
    b = make_batch(BATCHES["mixed"], 4, 64, 16, torch.float32, device, seed=7)
    out = torch.full_like(b.query, float("nan"))
    kv_ref = b.kv_cache.clone()
    run_op(b, out, num_reqs=4, append=append)
    ref = run_ref(b, kv_ref, num_reqs=4)
    assert torch.equal(b.kv_cache, kv_ref), "the cache write differs from the reference"
    check(out, ref, b.pad_rows | (torch.arange(len(out), device=device) >= 1 + 12 + 1 + 7))


def test_append_arguments_come_together() -> None:
    """The append's checks (shared by both devices: csrc/common.h), on the CPU."""
    b = make_batch(BATCHES["decode"], 2, 64, 16, torch.float32, "cpu", seed=5)
    out = torch.empty_like(b.query)
    args = (out, b.query, b.kv_cache[0], b.kv_cache[1], b.query_start_loc, b.seq_lens)
    with pytest.raises(RuntimeError, match="key, value and slot_mapping are given together"):
        torch.ops.vgraph_C.paged_attention(*args, b.block_table, 0.125, None, b.key, b.value)
    with pytest.raises(RuntimeError, match="key has 2 rows, query 8"):
        torch.ops.vgraph_C.paged_attention(
            *args, b.block_table, 0.125, None, b.key[:2], b.value[:2], b.slot_mapping
        )


def test_ops_trace_under_torch_compile() -> None:
    """Schemas, alias annotations and fake impls agree with what the CPU kernels do."""
    b = make_batch(BATCHES["mixed"][:3], 2, 64, 16, torch.float32, "cpu", seed=3)
    k_cache, v_cache = b.kv_cache[0].clone(), b.kv_cache[1].clone()
    out = torch.zeros_like(b.query)
    torch.library.opcheck(
        torch.ops.vgraph_C.reshape_and_cache.default,
        (b.key, b.value, k_cache, v_cache, b.slot_mapping),
    )
    metadata = (b.query_start_loc, b.seq_lens, b.block_table, 0.125, None)
    torch.library.opcheck(
        torch.ops.vgraph_C.paged_attention.default, (out, b.query, k_cache, v_cache, *metadata)
    )
    torch.library.opcheck(
        torch.ops.vgraph_C.paged_attention.default,
        (out, b.query, k_cache, v_cache, *metadata, b.key, b.value, b.slot_mapping),
    )


@pytest.mark.gpu
@pytest.mark.skipif(
    not (torch.cuda.is_available() and has_cuda_kernels()),
    reason="needs a GPU and a CUDA build of vgraph._C",
)
@pytest.mark.parametrize(
    ("num_reqs", "seq_len", "max_blocks"),
    [(1, 8000, 600), (3, 3000, 2048), (64, 700, 64), (300, 257, 40)],
)
@APPEND
def test_cuda_decode_partitions(num_reqs: int, seq_len: int, max_blocks: int, append: bool) -> None:
    """Long and short contexts over wide block tables: split and unsplit launches."""
    gen = torch.Generator().manual_seed(num_reqs)
    reqs = [
        (1, int(x)) for x in torch.randint(seq_len // 2, seq_len + 1, (num_reqs,), generator=gen)
    ]
    b = make_batch(reqs, 4, 128, 16, torch.bfloat16, "cuda", seed=num_reqs)
    rows, width = b.block_table.shape
    wide = torch.zeros(rows, max_blocks, dtype=torch.int32, device="cuda")
    wide[:, :width] = b.block_table
    b.block_table = wide
    kv_ref = b.kv_cache.clone()
    out = torch.full_like(b.query, float("nan"))
    run_op(b, out, append=append)
    check(out, run_ref(b, kv_ref), b.pad_rows)


@pytest.mark.gpu
@pytest.mark.skipif(
    not (torch.cuda.is_available() and has_cuda_kernels()),
    reason="needs a GPU and a CUDA build of vgraph._C",
)
@pytest.mark.parametrize("group_heads", ["1", "2", "4", "8"])
@pytest.mark.parametrize("one_part_iters", ["0", "4"])
@pytest.mark.parametrize(("kind", "head_dim"), [("decode", 64), ("mixed", 128)])
@pytest.mark.parametrize("guess_blocks", ["0", "1"])
def test_cuda_group_heads_and_one_part_switches(
    monkeypatch, group_heads: str, one_part_iters: str, kind: str, head_dim: int, guess_blocks: str
) -> None:
    """Every query-head grouping the launcher can pick (VGRAPH_ATTN_GROUP_HEADS caps it), every
    split of short contexts (VGRAPH_ATTN_ONE_PART_ITERS=0 splits any context longer than the
    smallest partition) and the block ids guessed with the request lookup or not
    (VGRAPH_ATTN_GUESS_BLOCKS; a mixed batch's tokens mostly guess wrong) give the reference's
    rows, with the append."""
    monkeypatch.setenv("VGRAPH_ATTN_GROUP_HEADS", group_heads)
    monkeypatch.setenv("VGRAPH_ATTN_ONE_PART_ITERS", one_part_iters)
    monkeypatch.setenv("VGRAPH_ATTN_GUESS_BLOCKS", guess_blocks)
    reqs = BATCHES[kind] + [(1, 200), (1, 130)]
    b = make_batch(reqs, 8, head_dim, 16, torch.bfloat16, "cuda", seed=int(group_heads) + head_dim)
    kv_ref = b.kv_cache.clone()
    out = torch.full_like(b.query, float("nan"))
    run_op(b, out, append=True)
    ref = run_ref(b, kv_ref)
    assert torch.equal(b.kv_cache, kv_ref), "the cache write differs from the reference"
    check(out, ref, b.pad_rows)


@pytest.mark.gpu
@pytest.mark.skipif(
    not (torch.cuda.is_available() and has_cuda_kernels()),
    reason="needs a GPU and a CUDA build of vgraph._C",
)
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("VGRAPH_ATTN_GROUP_HEADS", "0"),
        ("VGRAPH_ATTN_ONE_PART_ITERS", "x"),
        ("VGRAPH_ATTN_MIN_CHUNK", "24"),
        ("VGRAPH_ATTN_GUESS_BLOCKS", "2"),
    ],
)
def test_cuda_switches_reject_bad_values(monkeypatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    b = make_batch(BATCHES["decode"], 2, 64, 16, torch.bfloat16, "cuda", seed=1)
    with pytest.raises(RuntimeError, match=name):
        run_op(b, torch.empty_like(b.query), append=True)


@pytest.mark.gpu
@pytest.mark.skipif(
    not (torch.cuda.is_available() and has_cuda_kernels()),
    reason="needs a GPU and a CUDA build of vgraph._C",
)
@APPEND
def test_cuda_graph_replay_follows_new_lengths(append: bool) -> None:
    """Capture once over a mixed batch, then new lengths/block tables in the same buffers."""
    dtype, head_dim, block_size, group = torch.bfloat16, 128, 16, 4
    num_tokens, num_reqs_padded, max_blocks = 32, 6, 16
    first = make_batch(
        [(1, 40), (9, 9), (1, 100), (6, 30)],
        group,
        head_dim,
        block_size,
        dtype,
        "cuda",
        seed=1,
        num_pad_reqs=2,
        num_pad_tokens=num_tokens - 17,
    )
    second = make_batch(
        [(1, 200), (1, 3), (12, 60), (1, 77), (2, 2)],
        group,
        head_dim,
        block_size,
        dtype,
        "cuda",
        seed=2,
        num_pad_reqs=1,
        num_pad_tokens=num_tokens - 17,
    )

    def padded_table(b: Batch) -> torch.Tensor:
        table = torch.zeros(num_reqs_padded, max_blocks, dtype=torch.int32, device="cuda")
        table[:, : b.block_table.shape[1]] = b.block_table
        return table

    # Static buffers sized for both batches; the cache is big enough for either's block ids.
    num_blocks = max(first.kv_cache.shape[1], second.kv_cache.shape[1])
    static = Batch(
        first.query.clone(),
        first.key.clone(),
        first.value.clone(),
        torch.randn(2, num_blocks, block_size, NUM_KV_HEADS, head_dim, device="cuda").to(dtype),
        first.slot_mapping.clone(),
        first.query_start_loc.clone(),
        first.seq_lens.clone(),
        padded_table(first),
        first.pad_rows,
    )
    graph, out = capture_op(static, append)

    for src in (first, second):
        for name in ("query", "key", "value", "slot_mapping", "query_start_loc", "seq_lens"):
            getattr(static, name).copy_(getattr(src, name))
        static.block_table.copy_(padded_table(src))
        static.pad_rows = src.pad_rows
        kv_ref = static.kv_cache.clone()
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check(out, run_ref(static, kv_ref), static.pad_rows)


def copy_step(static: Batch, src: Batch) -> None:
    """Loads a step's inputs into a captured graph's buffers (src's block table may be narrower)."""
    for name in ("query", "key", "value", "slot_mapping", "query_start_loc", "seq_lens"):
        getattr(static, name).copy_(getattr(src, name))
    static.block_table.zero_()
    static.block_table[:, : src.block_table.shape[1]] = src.block_table
    static.pad_rows = src.pad_rows


# (seq_len low, seq_len high) of the decode requests of one replay: contexts of at most 64
# positions fit one partition (kMinChunk), longer ones are cut into several.
ONE_PART, SEVERAL_PARTS, ANY = (1, 64), (65, 4096), (1, 4096)


@pytest.mark.gpu
@pytest.mark.skipif(
    not (torch.cuda.is_available() and has_cuda_kernels()),
    reason="needs a GPU and a CUDA build of vgraph._C",
)
@pytest.mark.parametrize(("group", "head_dim"), [(1, 64), (2, 128), (8, 128)])
@APPEND
def test_cuda_graph_replays_reset_the_merge_counters(
    group: int, head_dim: int, append: bool
) -> None:
    """Decode graphs of 1 and 8 tokens, replayed in turn with one-partition and split contexts and
    fewer real requests than tokens: the last CTA of a split context merges the partials and
    resets its arrival counter, so every replay (sharing one counter buffer) matches the torch
    reference, and a counter left over would leave rows unwritten (NaN) or merged too early."""
    # make_batch's tables are 2 blocks wider than the longest context: 4096 / 16 + 2 <= 260
    dtype, block_size, max_blocks = torch.bfloat16, 16, 260
    num_blocks = 8 * max_blocks + 5
    gen = torch.Generator().manual_seed(group * 1000 + head_dim)

    def step(num_tokens: int, num_real: int, lens: tuple[int, int], seed: int) -> Batch:
        seq_lens = torch.randint(lens[0], lens[1] + 1, (num_real,), generator=gen).tolist()
        return make_batch(
            [(1, s) for s in seq_lens],
            group,
            head_dim,
            block_size,
            dtype,
            "cuda",
            seed=seed,
            num_pad_reqs=num_tokens - num_real,
            num_pad_tokens=num_tokens - num_real,
        )

    graphs: dict[int, tuple[torch.cuda.CUDAGraph, Batch, torch.Tensor]] = {}
    for num_tokens in (1, 8):
        first = step(num_tokens, num_tokens, SEVERAL_PARTS, seed=num_tokens)
        static = Batch(
            first.query.clone(),
            first.key.clone(),
            first.value.clone(),
            torch.randn(2, num_blocks, block_size, NUM_KV_HEADS, head_dim, device="cuda").to(dtype),
            first.slot_mapping.clone(),
            first.query_start_loc.clone(),
            first.seq_lens.clone(),
            torch.zeros(num_tokens, max_blocks, dtype=torch.int32, device="cuda"),
            first.pad_rows,
        )
        copy_step(static, first)
        graph, out = capture_op(static, append)
        graphs[num_tokens] = (graph, static, out)

    # (num_tokens, real requests, context range): the two graphs interleaved, split contexts
    # followed by one-partition ones and the same split contexts again
    replays = [
        (1, 1, SEVERAL_PARTS),
        (8, 8, SEVERAL_PARTS),
        (1, 1, ONE_PART),
        (8, 8, ONE_PART),
        (8, 8, ANY),
        (1, 1, SEVERAL_PARTS),
        (8, 5, SEVERAL_PARTS),
        (8, 2, ANY),
        (8, 8, SEVERAL_PARTS),
    ]
    for i, (num_tokens, num_real, lens) in enumerate(replays):
        graph, static, out = graphs[num_tokens]
        copy_step(static, step(num_tokens, num_real, lens, seed=100 + i))
        kv_ref = static.kv_cache.clone()
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check(out, run_ref(static, kv_ref), static.pad_rows)


@pytest.mark.parametrize(
    ("max_query_len", "same_step_kv", "appends"),
    [(1, False, True), (7, False, False), (1, True, False)],
    ids=["decode", "prefill", "same_step_hit"],
)
def test_csrc_backend_appends_only_over_kv_of_earlier_steps(
    monkeypatch, max_query_len: int, same_step_kv: bool, appends: bool
) -> None:
    """The csrc backend's attention appends the step's K/V in its own launch only in a decode
    step over KV of earlier steps; a step with prefills (whose FULL graph serves any such step)
    or one that reads KV it writes itself (a same-step prefix hit) writes them first."""
    from vgraph.attention.backend import CommonAttentionMetadata
    from vgraph.attention.csrc_backend import CsrcAttentionImpl

    b = make_batch(BATCHES["decode"], 2, 64, 16, torch.float32, "cpu", seed=11)
    impl = CsrcAttentionImpl(2 * NUM_KV_HEADS, NUM_KV_HEADS, 64, 0.125)
    writes = []
    write = impl.write_kv_cache
    monkeypatch.setattr(impl, "write_kv_cache", lambda *a: writes.append(a) or write(*a))
    md = CommonAttentionMetadata(
        b.query_start_loc,
        b.seq_lens,
        b.block_table,
        b.slot_mapping,
        b.query_start_loc,
        b.seq_lens,
        b.block_table,
        num_reqs=len(b.seq_lens),
        num_actual_tokens=len(b.query),
        max_query_len=max_query_len,
        max_seq_len=int(b.seq_lens.max()),
        same_step_kv=same_step_kv,
    )
    kv_ref = b.kv_cache.clone()
    out = torch.full_like(b.query, float("nan"))
    impl.forward(b.query, b.kv_cache, md, out, b.key, b.value)
    assert bool(writes) != appends
    check(out, run_ref(b, kv_ref), b.pad_rows)
    assert torch.equal(b.kv_cache, kv_ref)
