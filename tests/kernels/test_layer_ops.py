"""The fused layer ops of vgraph._C (rms_norm, fused_add_rms_norm, rotary_embedding, silu_and_mul,
embedding) against the torch code they replace (RMSNorm._norm, RotaryEmbedding's torch path,
SiluAndMul's torch path, VocabParallelEmbedding's F.embedding and mask): dtypes, odd hidden
sizes, strided rows (q/k views of a fused qkv); the layers' fused paths forced on under
torch.compile; on CUDA also captured graphs replayed with new inputs. CPU always, CUDA under the
`gpu` marker.
"""

from __future__ import annotations

import pytest
import torch

from tests.kernels.devices import cuda_param
from vgraph._ext import ext_unavailable_reason, load_ext
from vgraph.layers.layernorm import RMSNorm
from vgraph.layers.linear import SiluAndMul
from vgraph.layers.rotary import RotaryEmbedding

if not load_ext():
    pytest.skip(ext_unavailable_reason(), allow_module_level=True)

CUDA = cuda_param("rms_norm")
DEVICES = ["cpu", CUDA]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# About one unit in the last place of the dtype (the fused op may round once where torch differs
# in float32 summation order or FMA contraction); float32 tight.
TOL = {
    torch.float32: {"rtol": 1e-5, "atol": 1e-5},
    torch.float16: {"rtol": 2**-10, "atol": 2e-3},
    torch.bfloat16: {"rtol": 2**-7, "atol": 1.6e-2},
}
OPS = torch.ops.vgraph_C


def check_close(out: torch.Tensor, ref: torch.Tensor) -> None:
    assert out.dtype == ref.dtype and out.shape == ref.shape
    torch.testing.assert_close(out, ref, **TOL[out.dtype])
    if out.dtype == torch.float32:
        return  # float32 sums in another order: every element may be off by an ulp
    # Same rounding points as the reference: nearly every 16-bit element is bit-identical.
    exact = (out == ref).float().mean().item()
    assert exact > 0.97, f"only {exact:.1%} of the elements match the reference exactly"


def rand(*shape: int, dtype: torch.dtype, device: str, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g) * 2 + 0.5  # never zeros, not centred
    return x.to(dtype=dtype, device=device)


def make_norm(hidden: int, dtype: torch.dtype, device: str, eps: float = 1e-5) -> RMSNorm:
    norm = RMSNorm(hidden, eps).to(device=device, dtype=dtype)
    norm.weight.data.copy_(rand(hidden, dtype=dtype, device=device, seed=7) * 0.3 + 1)
    norm._fused = False  # the torch code, whatever the device
    return norm


# 8448: more 16-byte vectors than a CTA has threads (1024), so threads take a second vector
# after the one they keep in registers between the kernel's passes. Its rows are fewer, so each
# case checks about as many elements as the others (a rare 2-ulp difference from the reference's
# float32 summation order grows likelier with the count).
HIDDEN = [576, 1536, 64, 100, 8448]


def rows_for(hidden: int, rows: int) -> int:
    return 2 if hidden > 4096 else rows


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rms_norm(dtype: torch.dtype, hidden: int, strided: bool, device: str) -> None:
    norm = make_norm(hidden, dtype, device)
    rows = rows_for(hidden, 13)
    wide = rand(rows, hidden + 24, dtype=dtype, device=device, seed=hidden)
    x = wide[:, 8 : 8 + hidden] if strided else wide[:, :hidden].contiguous()  # [rows, hidden]
    out = torch.empty(rows, hidden, dtype=dtype, device=device)
    OPS.rms_norm(out, x, norm.weight, norm.eps)
    check_close(out, norm._norm(x))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_add_rms_norm(dtype: torch.dtype, hidden: int, device: str) -> None:
    norm = make_norm(hidden, dtype, device)
    rows = rows_for(hidden, 9)
    x = rand(rows, hidden, dtype=dtype, device=device, seed=1)  # [rows, hidden]
    residual = rand(rows, hidden, dtype=dtype, device=device, seed=2)  # [rows, hidden]
    ref_out, ref_sum = norm(x, residual)
    OPS.fused_add_rms_norm(x, residual, norm.weight, norm.eps)
    assert torch.equal(residual, ref_sum)  # the add rounds exactly as torch's
    check_close(x, ref_out)


def make_rope(head_dim: int, device: str) -> RotaryEmbedding:
    rope = RotaryEmbedding(head_dim, max_position=300, base=10000.0).to(device)
    rope._fused = False
    return rope


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pos_dtype", [torch.int64, torch.int32], ids=str)
# "wide": more rotation items a token than a CTA has threads (512), so threads take a second item
# after the one whose cos / sin they load before the PDL wait.
@pytest.mark.parametrize("heads", [(9, 3), (4, 4), (64, 8)], ids=["gqa", "mha", "wide"])
@pytest.mark.parametrize("head_dim", [64, 128, 40])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rotary_embedding_on_fused_qkv_views(
    dtype: torch.dtype, head_dim: int, heads: tuple[int, int], pos_dtype: torch.dtype, device: str
) -> None:
    num_heads, num_kv_heads = heads
    q_size, kv_size, num_tokens = num_heads * head_dim, num_kv_heads * head_dim, 11
    rope = make_rope(head_dim, device)
    qkv = rand(num_tokens, q_size + 2 * kv_size, dtype=dtype, device=device, seed=head_dim)
    before = qkv.clone()
    q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)  # strided row views
    positions = torch.randint(0, 300, (num_tokens,), generator=torch.Generator().manual_seed(3))
    positions = positions.to(device=device, dtype=pos_dtype)
    ref_q, ref_k = rope(positions.long(), q.clone(), k.clone())
    OPS.rotary_embedding(positions, q, k, head_dim, rope.cos_sin_cache, True)
    check_close(q, ref_q)
    check_close(k, ref_k)
    assert torch.equal(v, before[:, q_size + kv_size :])  # v untouched


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
@pytest.mark.parametrize("d", [1536, 576, 64, 100])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_silu_and_mul(dtype: torch.dtype, d: int, strided: bool, device: str) -> None:
    act = SiluAndMul()
    act._fused = False
    wide = rand(7, 2 * d + 16, dtype=dtype, device=device, seed=d)
    x = wide[:, : 2 * d] if strided else wide[:, : 2 * d].contiguous()  # [7, 2 * d]
    out = torch.empty(7, d, dtype=dtype, device=device)
    OPS.silu_and_mul(out, x)
    check_close(out, act(x))


def embedding_ref(ids: torch.Tensor, weight: torch.Tensor, start: int, end: int) -> torch.Tensor:
    mine = (ids >= start) & (ids < end)
    rows = torch.nn.functional.embedding(torch.where(mine, ids - start, 0), weight)
    return torch.where(mine.unsqueeze(-1), rows, torch.zeros((), dtype=weight.dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("start", "end"), [(0, 300), (100, 250)], ids=["whole", "shard"])
@pytest.mark.parametrize("id_dtype", [torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("hidden", [576, 100])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_embedding(
    dtype: torch.dtype, hidden: int, id_dtype: torch.dtype, start: int, end: int, device: str
) -> None:
    """The rows of ids in [start, end) of a 300-token vocabulary, zeros for the others (another
    rank's rows), bit for bit; strided out rows."""
    weight = rand(end - start, hidden, dtype=dtype, device=device, seed=hidden)
    ids = torch.randint(0, 300, (17,), generator=torch.Generator().manual_seed(3)).to(device)
    ids[:3] = torch.tensor([start, end - 1, 299])
    wide = torch.full((17, hidden + 8), float("nan"), dtype=dtype, device=device)
    out = wide[:, :hidden]
    OPS.embedding(out, ids.to(id_dtype), weight, start, end, 300)
    assert torch.equal(out, embedding_ref(ids, weight, start, end))


def test_embedding_bad_arguments_are_rejected() -> None:
    weight, ids = torch.randn(10, 8), torch.tensor([1, 2])
    with pytest.raises(RuntimeError, match=r"ids must be in \[0, 10\)"):
        OPS.embedding(torch.empty(2, 8), torch.tensor([1, 10]), weight, 0, 10, 10)
    with pytest.raises(RuntimeError, match="end - start <= weight rows"):
        OPS.embedding(torch.empty(2, 8), ids, weight, 0, 11, 11)
    with pytest.raises(RuntimeError, match="out must be"):
        OPS.embedding(torch.empty(3, 8), ids, weight, 0, 10, 10)
    with pytest.raises(RuntimeError, match="int64 or int32"):
        OPS.embedding(torch.empty(2, 8), ids.float(), weight, 0, 10, 10)


def test_bad_arguments_are_rejected() -> None:
    x = torch.randn(3, 64)
    with pytest.raises(RuntimeError, match="weight dtype"):
        OPS.rms_norm(torch.empty_like(x), x, torch.ones(64, dtype=torch.bfloat16), 1e-6)
    with pytest.raises(RuntimeError, match="weight must be"):
        OPS.rms_norm(torch.empty_like(x), x, torch.ones(32), 1e-6)
    with pytest.raises(RuntimeError, match="float32, float16 or bfloat16"):
        OPS.silu_and_mul(torch.empty(3, 32, dtype=torch.int32), x.int())
    with pytest.raises(RuntimeError, match="out must be"):
        OPS.silu_and_mul(torch.empty(3, 64), x)
    cache = make_rope(16, "cpu").cos_sin_cache
    q, k, pos = torch.randn(3, 64), torch.randn(3, 32), torch.arange(3)
    with pytest.raises(RuntimeError, match="is_neox=True"):
        OPS.rotary_embedding(pos, q, k, 16, cache, False)
    with pytest.raises(RuntimeError, match="outside the cos_sin_cache"):
        OPS.rotary_embedding(torch.tensor([0, 1, 300]), q, k, 16, cache, True)
    with pytest.raises(RuntimeError, match="contiguous last dim"):
        OPS.rotary_embedding(pos, torch.randn(64, 3).t(), k, 16, cache, True)


class Block(torch.nn.Module):
    """The decoder layer's use of the three layers: add+norm, rope on qkv views, silu*mul."""

    def __init__(self, fused: bool) -> None:
        super().__init__()
        self.norm, self.rope, self.act = (
            make_norm(64, torch.float32, "cpu"),
            make_rope(16, "cpu"),
            SiluAndMul(),
        )
        self.norm._fused = self.rope._fused = self.act._fused = fused

    def forward(self, positions, x, residual):  # [T], [T, 64], [T, 64]
        h, residual = self.norm(x, residual)
        q, k = self.rope(positions, h[:, :32], h[:, 32:48])
        return self.act(torch.cat([q, k, h[:, 48:]], dim=-1)), residual


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_layers_fused_path_matches_torch_path_under_compile(backend: str) -> None:
    """The fused ops (their CPU impls) wired into the layers, traced with their fake impls."""
    positions = torch.tensor([0, 5, 17, 299])
    x, residual = torch.randn(4, 64) + 0.5, torch.randn(4, 64) + 0.5
    ref = Block(fused=False)(positions, x.clone(), residual.clone())
    block = Block(fused=True)
    compiled = (
        block if backend == "eager" else torch.compile(block, fullgraph=True, backend=backend)
    )
    out = compiled(positions, x.clone(), residual.clone())
    torch.testing.assert_close(out[0], ref[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out[1], ref[1], rtol=0, atol=0)


def test_cpu_tensors_keep_the_torch_code() -> None:
    norm, rope, act = RMSNorm(64), RotaryEmbedding(16, 32, 10000.0), SiluAndMul()
    x = torch.randn(2, 64)
    norm(x), rope(torch.arange(2), x[:, :32], x[:, 32:48]), act(x)
    assert (norm._fused, rope._fused, act._fused) == (False, False, False)


@pytest.mark.parametrize("device", [CUDA])
@pytest.mark.parametrize("pdl_layers", ["", "0"], ids=["pdl", "plain"])
def test_cuda_graph_replay_with_new_inputs(
    device: str, pdl_layers: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One captured graph of all four ops stays correct when its input buffers change: each reads
    what the one before wrote, launched with programmatic stream serialization (the default) or
    plainly (VGRAPH_PDL_LAYERS=0)."""
    monkeypatch.setenv("VGRAPH_PDL_LAYERS", pdl_layers)
    dtype, hidden, head_dim, num_tokens = torch.bfloat16, 576, 64, 5
    norm, rope, act = make_norm(hidden, dtype, device), make_rope(head_dim, device), SiluAndMul()
    act._fused = False
    x = torch.empty(num_tokens, hidden, dtype=dtype, device=device)
    residual, positions = (
        torch.empty_like(x),
        torch.zeros(num_tokens, dtype=torch.long, device=device),
    )
    normed, act_out = (
        torch.empty_like(x),
        torch.empty(num_tokens, hidden // 2, dtype=dtype, device=device),
    )

    def step() -> None:
        OPS.rms_norm(normed, x, norm.weight, norm.eps)
        OPS.fused_add_rms_norm(x, residual, norm.weight, norm.eps)
        OPS.rotary_embedding(
            positions, normed[:, :192], normed[:, 192:384], head_dim, rope.cos_sin_cache, True
        )
        OPS.silu_and_mul(act_out, x)

    def fill(seed: int) -> tuple[torch.Tensor, ...]:
        x.copy_(rand(num_tokens, hidden, dtype=dtype, device=device, seed=seed))
        residual.copy_(rand(num_tokens, hidden, dtype=dtype, device=device, seed=seed + 1))
        positions.copy_(
            torch.randint(0, 300, (num_tokens,), generator=torch.Generator().manual_seed(seed))
        )
        n = norm._norm(x)
        s = x + residual
        n_sum = norm._norm(s)
        q, k = rope(positions, n[:, :192].clone(), n[:, 192:384].clone())
        return torch.cat([q, k, n[:, 384:]], -1), n_sum, s, act(n_sum)

    fill(0)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for seed in (10, 20):
        want = fill(seed)
        graph.replay()
        torch.cuda.synchronize()
        for got, ref in zip((normed, x, residual, act_out), want):
            check_close(got, ref)


@pytest.mark.parametrize("device", [CUDA])
def test_cuda_pdl_switch_rejects_bad_values(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    x = rand(2, 64, dtype=torch.bfloat16, device=device, seed=1)
    monkeypatch.setenv("VGRAPH_PDL_LAYERS", "2")
    with pytest.raises(RuntimeError, match="VGRAPH_PDL_LAYERS must be an integer in"):
        OPS.rms_norm(torch.empty_like(x), x, torch.ones(64, dtype=x.dtype, device=device), 1e-5)


@pytest.mark.parametrize("device", [CUDA])
def test_cuda_embedding_in_a_graph_follows_new_ids(device: str) -> None:
    """The embedding module's CUDA op (chosen at its first call) captured in a graph: replays
    look up the ids in its buffer, as F.embedding does."""
    from vgraph.layers.vocab_parallel_embedding import VocabParallelEmbedding

    emb = VocabParallelEmbedding(300, 576).to(device=device, dtype=torch.bfloat16)
    emb.weight.data.copy_(rand(300, 576, dtype=torch.bfloat16, device=device, seed=5))
    ids = torch.zeros(16, dtype=torch.long, device=device)
    emb(ids)  # warm-up outside the capture
    assert emb._fused
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = emb(ids)
    for seed in (1, 2):
        ids.copy_(torch.randint(0, 300, (16,), generator=torch.Generator().manual_seed(seed)))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, torch.nn.functional.embedding(ids, emb.weight))
