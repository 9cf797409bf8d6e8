"""The fused decode ops of vgraph._C (linear_out, rms_norm_linear_out, linear_add_residual,
rms_norm_qkv_rope, rms_norm_gate_up_silu) against a float32 torch reference (relative norm), on
the shapes of the three shipped configs and odd token counts; on CUDA also the GEMV path against
the op's own unfused cuBLAS path (nearly bit-equal: only the fp32 summation order differs), the
token threshold, a chain of the ops captured in one CUDA graph (programmatic dependent launch
inside) replayed with new inputs, at one token row pairs packed several to a CTA and grids
looping over them (bit-equal to a CTA per pair), above 8 tokens the tensor-core kernel's launch
split by tokens (bit-equal to whole column tiles), the wide tensor-core kernel (splits, tiles a
CTA, the table's picks of it), the LM head ops' greedy tokens (every path, in a CUDA graph too),
the switches' checks, and the ops under torch.compile. CPU always, CUDA under the `gpu` marker.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from tests.kernels.devices import cuda_param
from vgraph._ext import ext_unavailable_reason, load_ext
from vgraph.layers.rotary import RotaryEmbedding

if not load_ext():
    pytest.skip(ext_unavailable_reason(), allow_module_level=True)
if not torch._C._dispatch_has_kernel("vgraph_C::linear_out"):
    pytest.skip("vgraph._C predates the fused decode ops: rebuild it", allow_module_level=True)

OPS = torch.ops.vgraph_C
CUDA = cuda_param("linear_out")
# (hidden, num_heads, num_kv_heads, head_dim, intermediate) of the shipped configs + an odd one.
SHAPES = {
    "SmolLM2-135M": (576, 9, 3, 64, 1536),
    "Llama-3.2-1B": (2048, 32, 8, 64, 8192),
    "Qwen3-0.6B": (1024, 16, 8, 128, 3072),
    "odd": (200, 3, 1, 40, 264),
}
# Relative-norm error against the float32 reference: the 16-bit roundings of the unfused layers.
REL_TOL = {torch.float32: 2e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}
# GEMV path against the unfused path: the same roundings, fp32 sums in another order.
PATH_TOL = {torch.float16: 2e-3, torch.bfloat16: 1.2e-2}
EPS = 1e-5
MAX_POS = 4096


def rand(*shape: int, device: str, dtype: torch.dtype, seed: int, scale: float = 1.0):
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(*shape, generator=g, device=device) * scale + 0.1 * scale  # never zero-centred
    return x.to(dtype)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    assert out.shape == ref.shape and torch.isfinite(out).all()
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def norm_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # float32, no rounding
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w.float()


def rope_ref(x: torch.Tensor, positions: torch.Tensor, cache: torch.Tensor, hd: int):
    t = x.shape[0]
    cos, sin = cache[positions].chunk(2, dim=-1)  # [T, hd / 2]
    x1, x2 = x.view(t, -1, hd).chunk(2, dim=-1)
    cos, sin = cos[:, None], sin[:, None]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).view(t, -1)


def dtypes_for(device: str) -> list[torch.dtype]:
    return [torch.float32] if device == "cpu" else [torch.bfloat16, torch.float16]


class Case:
    """Weights of one layer of a config and a batch of num_tokens rows (strided: views of a wider
    buffer, as the model's qkv / residual views are)."""

    def __init__(self, shape: str, num_tokens: int, dtype: torch.dtype, device: str) -> None:
        hidden, nh, nkv, hd, inter = SHAPES[shape]
        self.hidden, self.nh, self.nkv, self.hd, self.inter = hidden, nh, nkv, hd, inter
        self.n_qkv = (nh + 2 * nkv) * hd
        kw = {"device": device, "dtype": dtype}
        s = hidden**-0.5
        self.w_qkv = rand(self.n_qkv, hidden, seed=1, scale=s, **kw)  # [N_qkv, hidden]
        self.b_qkv = rand(self.n_qkv, seed=2, scale=0.1, **kw)  # [N_qkv]
        self.w_o = rand(hidden, nh * hd, seed=3, scale=(nh * hd) ** -0.5, **kw)
        self.w_gu = rand(2 * inter, hidden, seed=4, scale=s, **kw)  # [2 I, hidden]
        self.w_down = rand(hidden, inter, seed=5, scale=inter**-0.5, **kw)
        self.norm_w = rand(hidden, seed=6, scale=0.2, **kw) + 1.0  # [hidden]
        wide = rand(num_tokens, hidden + 24, seed=7 + num_tokens, **kw)
        self.hidden_x = wide[:, 8 : 8 + hidden]  # [T, hidden], row stride hidden + 24
        self.attn_x = rand(num_tokens, nh * hd, seed=8, **kw)  # [T, nh * hd]
        self.act_x = rand(num_tokens, inter, seed=9, **kw)  # [T, I]
        self.residual = rand(num_tokens, hidden, seed=10, scale=4.0, **kw)  # [T, hidden]
        g = torch.Generator().manual_seed(num_tokens)
        self.positions = torch.randint(0, MAX_POS, (num_tokens,), generator=g).to(device)
        rope = RotaryEmbedding(hd, MAX_POS, 500000.0).to(device)
        self.cache = rope.cos_sin_cache  # [MAX_POS, hd] float32


def run_qkv(
    c: Case,
    max_tokens: int | None,
    bias: bool,
    rope: bool,
    unit_norm: bool = False,
    wide_packed: torch.Tensor | None = None,
) -> torch.Tensor:
    qkv = torch.full(
        (c.hidden_x.shape[0], c.n_qkv),
        float("nan"),
        dtype=c.hidden_x.dtype,
        device=c.hidden_x.device,
    )
    OPS.rms_norm_qkv_rope(
        qkv, c.hidden_x, c.norm_w, EPS, c.w_qkv, c.b_qkv if bias else None,
        c.positions if rope else None, c.cache if rope else None, c.hd, c.nh, c.nkv, max_tokens,
        unit_norm=unit_norm, wide_packed=wide_packed,
    )  # fmt: skip
    return qkv


def ref_qkv(c: Case, bias: bool, rope: bool) -> torch.Tensor:
    y = norm_ref(c.hidden_x, c.norm_w) @ c.w_qkv.float().T
    if bias:
        y = y + c.b_qkv.float()
    if rope:
        q_k = rope_ref(y[:, : (c.nh + c.nkv) * c.hd], c.positions, c.cache, c.hd)
        y = torch.cat([q_k, y[:, (c.nh + c.nkv) * c.hd :]], -1)
    return y


def run_gate_up(
    c: Case, max_tokens: int | None, wide_packed: torch.Tensor | None = None
) -> torch.Tensor:
    out = torch.full((c.hidden_x.shape[0], c.inter), float("nan"), dtype=c.hidden_x.dtype,
                     device=c.hidden_x.device)  # fmt: skip
    OPS.rms_norm_gate_up_silu(out, c.hidden_x, c.norm_w, EPS, c.w_gu, max_tokens, wide_packed)
    return out


def ref_gate_up(c: Case) -> torch.Tensor:
    g, u = (norm_ref(c.hidden_x, c.norm_w) @ c.w_gu.float().T).chunk(2, -1)
    return torch.nn.functional.silu(g) * u


def run_residual(c: Case, x: torch.Tensor, w: torch.Tensor, max_tokens: int | None):
    residual = c.residual.clone()
    OPS.linear_add_residual(residual, x, w, max_tokens)
    return residual


def run_linear_out(c: Case, out_dtype: torch.dtype, max_tokens: int | None) -> torch.Tensor:
    w = c.w_gu[:4096]  # an LM head slice: the op does not care about the vocab size
    out = torch.full((c.hidden_x.shape[0], w.shape[0]), float("nan"), dtype=out_dtype,
                     device=w.device)  # fmt: skip
    OPS.linear_out(out, c.hidden_x, w, max_tokens)
    return out


def run_norm_linear_out(c: Case, out_dtype: torch.dtype, max_tokens: int | None) -> torch.Tensor:
    w = c.w_gu[:4096]  # an LM head slice, after the final norm
    out = torch.full((c.hidden_x.shape[0], w.shape[0]), float("nan"), dtype=out_dtype,
                     device=w.device)  # fmt: skip
    OPS.rms_norm_linear_out(out, c.hidden_x, c.norm_w, EPS, w, max_tokens)
    return out


def path_runs(c: Case) -> list[Callable[[int | None], torch.Tensor]]:
    """Each op of a Case as a function of max_gemv_tokens."""
    return [
        lambda m: run_qkv(c, m, True, True),
        lambda m: run_qkv(c, m, False, False),
        lambda m: run_gate_up(c, m),
        lambda m: run_residual(c, c.attn_x, c.w_o, m),
        lambda m: run_residual(c, c.act_x, c.w_down, m),
        lambda m: run_linear_out(c, torch.float32, m),
        lambda m: run_norm_linear_out(c, torch.float32, m),
        lambda m: run_norm_linear_out(c, c.hidden_x.dtype, m),
    ]


def norm_refs(c: Case) -> dict[int, torch.Tensor]:
    """The float32 references of path_runs' runs with the RMSNorm prologue, by index."""
    head = norm_ref(c.hidden_x, c.norm_w) @ c.w_gu[:4096].float().T
    return {0: ref_qkv(c, True, True), 1: ref_qkv(c, False, False), 2: ref_gate_up(c),
            6: head, 7: head}  # fmt: skip


DEVICES = ["cpu", CUDA]
TOKENS = [1, 3, 8, 16, 17]
NORM_RUNS = (0, 1, 2, 6, 7)  # the runs of path_runs with the RMSNorm prologue


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_tokens", TOKENS)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_ops_match_float32_reference(shape: str, num_tokens: int, device: str) -> None:
    if device == "cpu" and shape != "odd" and num_tokens not in (1, 17):
        pytest.skip("the CPU runs the unfused sequence: two token counts per shape suffice")
    for dtype in dtypes_for(device):
        c = Case(shape, num_tokens, dtype, device)
        tol = REL_TOL[dtype]
        for bias, rope in ((False, True), (True, True), (False, False)):
            err = rel_err(run_qkv(c, None, bias, rope), ref_qkv(c, bias, rope))
            assert err < tol, (dtype, bias, rope, err)
        assert rel_err(run_gate_up(c, None), ref_gate_up(c)) < tol
        for x, w in ((c.attn_x, c.w_o), (c.act_x, c.w_down)):
            ref = x.float() @ w.float().T + c.residual.float()
            assert rel_err(run_residual(c, x, w, None), ref) < tol
        for out_dtype in (dtype, torch.float32):
            ref = c.hidden_x.float() @ c.w_gu[:4096].float().T
            assert rel_err(run_linear_out(c, out_dtype, None), ref) < tol
            ref = norm_ref(c.hidden_x, c.norm_w) @ c.w_gu[:4096].float().T
            assert rel_err(run_norm_linear_out(c, out_dtype, None), ref) < tol


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_tokens", [1, 5, 16, 33])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_qkv_unit_norm_matches_float32_reference(shape: str, num_tokens: int, device: str) -> None:
    """unit_norm: the norm weight folded into the QKV weight (as the model does with
    VGRAPH_FOLD_QKV_NORM=1), ones left. The op's unfused path (max_gemv_tokens=0; 33 tokens: past
    every GEMV) multiplies each row of hidden W^T by 1 / rms, adds the bias and rotates in one
    kernel, in place of a norm kernel before the GEMM; float16 keeps the norm first. Every path,
    the fused kernels (which multiply by the ones) too, within the reference's tolerance, with
    bias and RoPE or neither; on CUDA the unfused path within the path tolerance of the same op
    without unit_norm."""
    for dtype in dtypes_for(device):
        c = Case(shape, num_tokens, dtype, device)
        c.w_qkv = (c.w_qkv.float() * c.norm_w.float()).to(dtype)
        c.norm_w = torch.ones_like(c.norm_w)
        for bias, rope in ((False, True), (True, True), (False, False)):
            ref = ref_qkv(c, bias, rope)
            for max_tokens in (0, None) if device == "cpu" else (0, None, 32):
                out = run_qkv(c, max_tokens, bias, rope, unit_norm=True)
                err = rel_err(out, ref)
                assert err < REL_TOL[dtype], (dtype, bias, rope, max_tokens, err)
            if device != "cpu":
                scaled_after = run_qkv(c, 0, bias, rope, unit_norm=True)
                err = rel_err(scaled_after, run_qkv(c, 0, bias, rope))  # against norm first
                assert err < PATH_TOL[dtype], (dtype, bias, rope, err)


@pytest.mark.parametrize("device", [CUDA])
@pytest.mark.parametrize("kernel", ["cuda_core", "mma", "wide"])
@pytest.mark.parametrize("num_tokens", [1, 2, 5, 8, 13, 16, 32])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_gemv_path_matches_unfused_path(
    shape: str, num_tokens: int, kernel: str, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """max_gemv_tokens=32 forces a fused kernel (VGRAPH_GEMV picks the CUDA-core, the tensor-core
    or the wide tensor-core one; the odd shape does not fit the tensor-core tiling and keeps the
    CUDA-core kernel), 0 the cuBLAS sequence: same roundings, except that cuBLAS adds the
    residual inside the GEMM (beta = 1) without rounding the projection first, so the residual ops
    (runs 3 and 4) agree within tolerance only; so do the norm ops, which round once where RMSNorm
    rounds twice (1 / rms scales the sums; test_norm_scaled_sums_and_plain_launches checks the
    bits of the form that normalizes first)."""
    monkeypatch.setenv("VGRAPH_GEMV", kernel)
    for dtype in dtypes_for(device):
        c = Case(shape, num_tokens, dtype, device)
        tol = PATH_TOL[dtype]
        runs = path_runs(c)
        for i, run in enumerate(runs):
            fast, slow = run(32), run(0)
            assert rel_err(fast, slow) < tol, (i, dtype)
            if i in (3, 4) or i in NORM_RUNS:
                continue
            exact = (fast == slow).float().mean().item()
            assert exact > 0.8, (i, dtype, exact)


@pytest.mark.parametrize("device", [CUDA])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_row_pairs_packed_per_cta_and_looped_are_bit_equal(
    shape: str, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At one token the CUDA-core kernel may give a CTA several row pairs, each on warps of its
    own, and where its CTAs exceed one wave (or cover a small matrix) a smaller grid loops over
    them. Every packing (VGRAPH_GEMV_PAIRS caps it, VGRAPH_GEMV_PACK=1 packs at every shape) and
    loop grid (VGRAPH_GEMV_CTAS_PER_SM caps its CTAs an SM, 0 turns it off; VGRAPH_GEMV_SMALL_MIB
    and VGRAPH_GEMV_SMALL_CTAS_PER_SM set the small matrices' rule, VGRAPH_GEMV_LOOP=1 allows it
    where the per-shape table does not), the launcher's own choices included (the table's packing
    for SmolLM2-135M's shapes), writes the bits of a CTA per pair, also where the last
    CTA has spare pair slots (N = 4101: 2051 pairs), nothing past N, and where K spans several
    chunks, the last one partial."""
    monkeypatch.setenv("VGRAPH_GEMV", "cuda_core")
    dtype = torch.bfloat16
    c = Case(shape, 1, dtype, device)
    w = rand(4101, c.hidden, device=device, dtype=dtype, seed=11, scale=c.hidden**-0.5)

    # K = 12,296: four chunks of 512 vectors at 128 threads, the last one partial
    long_x = rand(1, 12296, device=device, dtype=dtype, seed=12)
    long_w = rand(300, 12296, device=device, dtype=dtype, seed=13, scale=12296**-0.5)

    def run() -> list[torch.Tensor]:
        out = torch.full((1, 4104), float("nan"), dtype=torch.float32, device=device)
        OPS.rms_norm_linear_out(out[:, :4101], c.hidden_x, c.norm_w, EPS, w, 1)
        assert torch.isnan(out[:, 4101:]).all()
        long_res = c.residual[:, :1].expand(1, 300).contiguous()
        OPS.linear_add_residual(long_res, long_x, long_w, 1)
        return [out, long_res] + [r(1) for r in path_runs(c)]

    monkeypatch.setenv("VGRAPH_GEMV_PAIRS", "1")
    monkeypatch.setenv("VGRAPH_GEMV_CTAS_PER_SM", "0")
    one_pair = run()
    ref = norm_ref(c.hidden_x, c.norm_w) @ w.float().T
    assert rel_err(one_pair[0][:, :4101], ref) < REL_TOL[dtype]
    ref = long_x.float() @ long_w.float().T + c.residual[:, :1].float()
    assert rel_err(one_pair[1], ref) < REL_TOL[dtype]
    variants = [(p, c, "", "", "") for p in ("2", "3", "4", "") for c in ("0", "1", "3", "")]
    variants += [("", "", mib, ctas, "") for mib in ("0", "64") for ctas in ("1", "3")]
    variants += [("", c, "", "", "1") for c in ("0", "")]  # packed at every shape
    for pairs, ctas, small_mib, small_ctas, pack in variants:  # "": the launcher's choice
        monkeypatch.setenv("VGRAPH_GEMV_PACK", pack)
        monkeypatch.setenv("VGRAPH_GEMV_PAIRS", pairs)
        monkeypatch.setenv("VGRAPH_GEMV_CTAS_PER_SM", ctas)  # 1: every op with more CTAs than SMs
        monkeypatch.setenv("VGRAPH_GEMV_LOOP", "1" if ctas in ("1", "3") else "")  # every shape
        monkeypatch.setenv("VGRAPH_GEMV_SMALL_MIB", small_mib)
        monkeypatch.setenv("VGRAPH_GEMV_SMALL_CTAS_PER_SM", small_ctas)
        for got, want in zip(run(), one_pair):  # bit-equal (NaN past N in both)
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("device", [CUDA])
@pytest.mark.parametrize(
    ("name", "value"),
    [("VGRAPH_GEMV_PAIRS", "5"), ("VGRAPH_GEMV_PAIRS", "x"), ("VGRAPH_GEMV_CTAS_PER_SM", "33"),
     ("VGRAPH_GEMV_CTAS_PER_SM", "-1"), ("VGRAPH_GEMV_SMALL_MIB", "1025"),
     ("VGRAPH_GEMV_SMALL_CTAS_PER_SM", "0"), ("VGRAPH_GEMV_LOOP", "2"),
     ("VGRAPH_GEMV_PACK", "2"), ("VGRAPH_GEMV_NORM_SCALED", "2"), ("VGRAPH_PDL_MAX_MIB", "-1"),
     ("VGRAPH_GEMV_L2_EVICT_FIRST", "2")],
)  # fmt: skip
def test_gemv_switches_reject_bad_values(
    name: str, value: str, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VGRAPH_GEMV", "cuda_core")
    monkeypatch.setenv(name, value)
    c = Case("SmolLM2-135M", 1, torch.bfloat16, device)
    with pytest.raises(RuntimeError, match=f"{name} must be an integer in"):
        run_gate_up(c, 1)


@pytest.mark.parametrize("device", [CUDA])
@pytest.mark.parametrize("kernel", ["cuda_core", "mma"])
@pytest.mark.parametrize("num_tokens", [1, 5, 16, 29])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_norm_scaled_sums_and_plain_launches(
    shape: str, num_tokens: int, kernel: str, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The norm ops of the CUDA-core and tensor-core kernels take norm_weight * x and scale each
    token's sums by its 1 / rms (one rounding where RMSNorm has two): within the path tolerance
    of the unfused sequence and the float32 reference's, and other bits than with
    VGRAPH_GEMV_NORM_SCALED=0, which normalizes x first (the switch reaches the kernel); the other
    ops write the same bits either way; normalizing first matches the unfused path's bits on most
    entries. At one token the looping grid and a CTA per row pair write the scaled sums' bits
    too. VGRAPH_PDL_MAX_MIB=0 (every GEMV launched without PDL) and unhinted weight loads
    (VGRAPH_GEMV_L2_EVICT_FIRST=0, not evict-first) change no bit."""
    monkeypatch.setenv("VGRAPH_GEMV", kernel)
    for dtype in dtypes_for(device):
        c = Case(shape, num_tokens, dtype, device)
        runs = path_runs(c)
        scaled = [run(32) for run in runs]
        slow = [run(0) for run in runs]
        refs = norm_refs(c)
        monkeypatch.setenv("VGRAPH_GEMV_NORM_SCALED", "0")
        first = [run(32) for run in runs]
        monkeypatch.delenv("VGRAPH_GEMV_NORM_SCALED")
        for i, got in enumerate(scaled):
            assert rel_err(got, slow[i]) < PATH_TOL[dtype], (i, dtype)
            assert rel_err(first[i], slow[i]) < PATH_TOL[dtype], (i, dtype)
            if i in refs:
                assert rel_err(got, refs[i]) < REL_TOL[dtype], (i, dtype)
                assert not torch.equal(got, first[i]), (i, dtype)
                exact = (first[i] == slow[i]).float().mean().item()  # RMSNorm's roundings
                assert exact > 0.8, (i, dtype, exact)
            else:
                torch.testing.assert_close(got, first[i], rtol=0, atol=0)
        variants = [("VGRAPH_PDL_MAX_MIB", "0"), ("VGRAPH_GEMV_L2_EVICT_FIRST", "0")]
        if num_tokens == 1 and kernel == "cuda_core":
            variants += [("VGRAPH_GEMV_LOOP", "1"), ("VGRAPH_GEMV_LOOP", "0"),
                         ("VGRAPH_GEMV_PAIRS", "1")]  # fmt: skip
        for name, value in variants:
            monkeypatch.setenv(name, value)
            for i, run in enumerate(runs):
                got = run(32)
                torch.testing.assert_close(got, scaled[i], rtol=0, atol=0, msg=f"{name} {i}")
            monkeypatch.delenv(name)


@pytest.mark.parametrize("device", [CUDA])
@pytest.mark.parametrize("num_tokens", [9, 13, 16, 17, 29, 32])
@pytest.mark.parametrize("shape", ["SmolLM2-135M", "Llama-3.2-1B", "Qwen3-0.6B", "odd"])
def test_mma_split_by_tokens_is_bit_equal(
    shape: str, num_tokens: int, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above 8 tokens the tensor-core kernel may run a launch as CTAs of 8 tokens each, a grid row
    per 8 (VGRAPH_MMA_SPLIT=1 always, 0 never, "" where its launcher picks: small matrices whose
    split grid fits the GPU), else CTAs of 2 or 4 column tiles: every op writes the same bits
    either way (the odd shape keeps the CUDA-core kernel, whose bits the switch must not change
    either)."""
    monkeypatch.setenv("VGRAPH_GEMV", "mma")
    c = Case(shape, num_tokens, torch.bfloat16, device)
    monkeypatch.setenv("VGRAPH_MMA_SPLIT", "0")
    whole = [run(32) for run in path_runs(c)]
    for split in ("", "1"):
        monkeypatch.setenv("VGRAPH_MMA_SPLIT", split)
        for got, want in zip([run(32) for run in path_runs(c)], whole):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    if shape == "odd":
        return
    monkeypatch.setenv("VGRAPH_MMA_SPLIT", "2")
    with pytest.raises(RuntimeError, match="VGRAPH_MMA_SPLIT must be an integer in"):
        run_gate_up(c, 32)


# path_runs' runs of each op name of the VGRAPH_..._<OP> switches
OP_RUNS = {"QKV": (0, 1), "GATE_UP": (2,), "RESIDUAL": (3, 4), "OUT": (5,), "NORM_OUT": (6, 7)}


@pytest.mark.parametrize("device", [CUDA])
@pytest.mark.parametrize("num_tokens", [4, 8, 16, 29])
def test_mma_warp_per_chunk_per_op(
    num_tokens: int, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """VGRAPH_MMA_WARP_PER_CHUNK_<OP>=1: the tensor-core kernel gives each chunk of K a warp where
    the grid fits (SmolLM2-135M's QKV and O: 9 chunks of K = 576; its gate/up grid and its down
    projection's 24 chunks keep the rule). Each op stays within the unfused path's tolerance and
    the float32 reference's, the other ops write the same bits as without the switch, and a bad
    value is refused. (A warp per chunk sums the same fp32 partials in another order, which
    rarely changes a bfloat16 result: the bits are no sign that the switch took.) Without the
    switch the QKV and O projections take a warp per chunk up to 8 tokens: the same bits as with
    it =1 there, as with it =0 above."""
    monkeypatch.setenv("VGRAPH_GEMV", "mma")
    dtype = torch.bfloat16
    c = Case("SmolLM2-135M", num_tokens, dtype, device)
    runs = path_runs(c)
    rule = [run(32) for run in runs]
    slow = [run(0) for run in runs]
    refs = norm_refs(c)
    for op in ("QKV", "RESIDUAL"):
        name = f"VGRAPH_MMA_WARP_PER_CHUNK_{op}"
        monkeypatch.setenv(name, "1" if num_tokens <= 8 else "0")
        for i in OP_RUNS[op]:
            torch.testing.assert_close(runs[i](32), rule[i], rtol=0, atol=0, msg=f"{op} {i}")
        monkeypatch.delenv(name)
    for op, mine in OP_RUNS.items():
        name = f"VGRAPH_MMA_WARP_PER_CHUNK_{op}"
        monkeypatch.setenv(name, "1")
        for i, run in enumerate(runs):
            got = run(32)
            if i not in mine:
                torch.testing.assert_close(got, rule[i], rtol=0, atol=0)
                continue
            assert rel_err(got, slow[i]) < PATH_TOL[dtype], (op, i)
            if i in refs:
                assert rel_err(got, refs[i]) < REL_TOL[dtype], (op, i)
        monkeypatch.setenv(name, "2")
        with pytest.raises(RuntimeError, match=f"{name} must be an integer in"):
            runs[mine[0]](32)
        monkeypatch.delenv(name)


@pytest.mark.parametrize("device", [CUDA])
@pytest.mark.parametrize("num_tokens", [1, 2, 5, 9, 16, 29])
@pytest.mark.parametrize("shape", ["SmolLM2-135M", "Llama-3.2-1B", "odd", "deep"])
def test_gathered_activations_are_bit_equal(
    shape: str, num_tokens: int, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tensor-core kernel up to 16 tokens copies a chunk's activations to shared memory ahead
    of its products (GemvArgs::gather_x) where its table allows (SmolLM2-135M's O and down up to
    8 tokens); VGRAPH_GEMV_GATHER=0 loads each vector where it is used, =1 copies them at every
    shape. Every op writes the same bits either way: one chunk of K and several (Llama-3.2-1B's down
    projection, "deep"), split launches and whole column tiles, the size without gathering (29
    tokens). The same with VGRAPH_GEMV_GATHER_<OP> turning one op's back on. A bad value is
    refused."""
    monkeypatch.setitem(SHAPES, "deep", (5120, 8, 2, 64, 1024))
    monkeypatch.setenv("VGRAPH_GEMV", "mma")
    c = Case(shape, num_tokens, torch.bfloat16, device)
    runs = path_runs(c)
    refs = norm_refs(c)
    for split in ("", "0"):
        monkeypatch.setenv("VGRAPH_MMA_SPLIT", split)
        gathered = [run(32) for run in runs]
        for value in ("1", "0"):
            monkeypatch.setenv("VGRAPH_GEMV_GATHER", value)
            for i, run in enumerate(runs):
                got = run(32)
                torch.testing.assert_close(got, gathered[i], rtol=0, atol=0, msg=f"{split} {i}")
        monkeypatch.setenv("VGRAPH_GEMV_GATHER_RESIDUAL", "1")
        for i in OP_RUNS["RESIDUAL"]:
            torch.testing.assert_close(runs[i](32), gathered[i], rtol=0, atol=0, msg=f"{split} {i}")
        monkeypatch.delenv("VGRAPH_GEMV_GATHER_RESIDUAL")
        monkeypatch.delenv("VGRAPH_GEMV_GATHER")
        for i, ref in refs.items():
            assert rel_err(gathered[i], ref) < REL_TOL[torch.bfloat16], (split, i)
    for name, run in (("VGRAPH_GEMV_GATHER", runs[3]), ("VGRAPH_GEMV_GATHER_QKV", runs[0])):
        monkeypatch.setenv(name, "2")
        with pytest.raises(RuntimeError, match=f"{name} must be an integer in"):
            run(32)
        monkeypatch.delenv(name)


@pytest.mark.parametrize("device", [CUDA])
@pytest.mark.parametrize("num_tokens", [1, 7, 9, 16, 29])
@pytest.mark.parametrize("shape", ["SmolLM2-135M", "Llama-3.2-1B", "Qwen3-0.6B"])
def test_wide_kernel_splits_and_warps(
    shape: str, num_tokens: int, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wide tensor-core kernel at every split of K over a cluster that divides the shape's
    chunks (VGRAPH_WIDE_SPLIT; the norm ops add the cluster's sums of squares) and several tiles a
    CTA (VGRAPH_WIDE_WARPS: 3 leaves the last CTA with warps past the last tile) stays within the
    path tolerance of the unfused sequence, the norm ops also within that of the float32
    reference, the others exact on most entries (a split whose shared memory does not fit, e.g.
    none of Llama-3.2-1B's down projection, sends the call to the tensor-core kernel); also past
    N's last whole tile (N = 4101) nothing beyond N is written. The weight loads' L2 hint and the
    ring's depth (VGRAPH_WIDE_STAGES) and its first refill ahead of the activations
    (VGRAPH_WIDE_EARLY_REFILL) leave the bits as they are."""
    monkeypatch.setenv("VGRAPH_GEMV", "wide")
    dtype = torch.bfloat16
    c = Case(shape, num_tokens, dtype, device)
    runs = path_runs(c)
    slow = [run(0) for run in runs]
    refs = norm_refs(c)
    w = rand(4101, c.hidden, device=device, dtype=dtype, seed=11, scale=c.hidden**-0.5)
    ref = c.hidden_x.float() @ w.float().T
    chunks = c.hidden // 64
    for split in ["", *(str(s) for s in (1, 2, 3, 4, 8) if chunks % s == 0)]:
        for warps in ("", "1", "3", "8"):
            monkeypatch.setenv("VGRAPH_WIDE_SPLIT", split)
            monkeypatch.setenv("VGRAPH_WIDE_WARPS", warps)
            for i, (run, want) in enumerate(zip(runs, slow)):
                got = run(32)
                assert rel_err(got, want) < PATH_TOL[dtype], (split, warps, i)
                if i in refs:  # the norm ops: against the float32 reference
                    assert rel_err(got, refs[i]) < REL_TOL[dtype], (split, warps, i)
                elif i not in (3, 4):
                    exact = (got == want).float().mean().item()
                    assert exact > 0.8, (split, warps, i, exact)
            out = torch.full((num_tokens, 4104), float("nan"), dtype=torch.float32, device=device)
            OPS.linear_out(out[:, :4101], c.hidden_x, w, 32)
            assert torch.isnan(out[:, 4101:]).all()
            assert rel_err(out[:, :4101], ref) < REL_TOL[dtype], (split, warps)
    # the weight loads unhinted instead of evict-first: the same bits
    monkeypatch.setenv("VGRAPH_WIDE_SPLIT", "")
    monkeypatch.setenv("VGRAPH_WIDE_WARPS", "")
    first = [run(32) for run in runs]
    monkeypatch.setenv("VGRAPH_GEMV_L2_EVICT_FIRST", "0")
    for i, run in enumerate(runs):
        torch.testing.assert_close(run(32), first[i], rtol=0, atol=0, msg=str(i))
    # a deeper ring (11 stages at 1-8 tokens, 9 at 9-16 where shared memory allows; 29 tokens and
    # shapes that do not fit keep 8) and the ring's chunk D - 1 issued right after the wait, at
    # every depth and with a split: each warp takes its chunks in the same order, the same bits
    monkeypatch.setenv("VGRAPH_GEMV_L2_EVICT_FIRST", "")
    for stages in ("9", "11"):
        for refill in ("0", "1"):
            monkeypatch.setenv("VGRAPH_WIDE_STAGES", stages)
            monkeypatch.setenv("VGRAPH_WIDE_EARLY_REFILL", refill)
            for i, run in enumerate(runs):
                msg = f"stages {stages}, refill {refill}, op {i}"
                torch.testing.assert_close(run(32), first[i], rtol=0, atol=0, msg=msg)
    monkeypatch.setenv("VGRAPH_WIDE_STAGES", "")
    for split in ("", "2") if chunks % 2 == 0 else ("",):
        monkeypatch.setenv("VGRAPH_WIDE_SPLIT", split)
        monkeypatch.setenv("VGRAPH_WIDE_EARLY_REFILL", "0")
        want = [run(32) for run in runs]
        monkeypatch.setenv("VGRAPH_WIDE_EARLY_REFILL", "1")
        for i, run in enumerate(runs):
            torch.testing.assert_close(run(32), want[i], rtol=0, atol=0, msg=f"split {split} {i}")


@pytest.mark.parametrize("device", [CUDA])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("num_tokens", [1, 7, 16, 29])
@pytest.mark.parametrize("shape", ["SmolLM2-135M", "Llama-3.2-1B", "Qwen3-0.6B"])
def test_wide_kernel_packed_weight(
    shape: str, num_tokens: int, dtype: torch.dtype, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The norm ops given their weight packed for the wide kernel (pack_wide_weight): the wide
    kernel reads the packed copy and writes the same bits as from the row-major weight, at every
    split of K over a cluster, with tiles a CTA past the last tile, at both ring depths; every
    other kernel (tensor-core, CUDA-core, cuBLAS above the threshold) ignores it, and
    VGRAPH_WIDE_PACKED=0 makes the wide kernel ignore it too (29 tokens: four column tiles)."""
    c = Case(shape, num_tokens, dtype, device)
    qkv_packed = OPS.pack_wide_weight(c.w_qkv, "qkv", c.hd)
    gu_packed = OPS.pack_wide_weight(c.w_gu, "gate_up")
    assert qkv_packed.shape == (c.w_qkv.numel(),) and gu_packed.shape == (c.w_gu.numel(),)
    runs = [
        lambda p: run_qkv(c, 32, True, True, wide_packed=qkv_packed if p else None),
        lambda p: run_qkv(c, 32, False, False, wide_packed=qkv_packed if p else None),
        lambda p: run_gate_up(c, 32, gu_packed if p else None),
    ]
    chunks = c.hidden // 64
    wide_runs = [(s, w, d) for s in ("", "2", "4") if not s or chunks % int(s) == 0
                 for w, d in (("", ""), ("3", ""), ("", "11"))]  # fmt: skip
    for kernel in ("wide", "mma", "cuda_core"):
        monkeypatch.setenv("VGRAPH_GEMV", kernel)
        for split, warps, stages in wide_runs if kernel == "wide" else [("", "", "")]:
            monkeypatch.setenv("VGRAPH_WIDE_SPLIT", split)
            monkeypatch.setenv("VGRAPH_WIDE_WARPS", warps)
            monkeypatch.setenv("VGRAPH_WIDE_STAGES", stages)
            for i, run in enumerate(runs):
                msg = f"{kernel} split {split} warps {warps} stages {stages} op {i}"
                want = run(False)
                assert not torch.isnan(want).any(), msg
                torch.testing.assert_close(run(True), want, rtol=0, atol=0, msg=msg)
    # the switch that makes the wide kernel read the row-major weight: the same bits again
    for name in ("VGRAPH_WIDE_SPLIT", "VGRAPH_WIDE_WARPS", "VGRAPH_WIDE_STAGES"):
        monkeypatch.setenv(name, "")
    monkeypatch.setenv("VGRAPH_GEMV", "wide")
    want = [run(True) for run in runs]
    monkeypatch.setenv("VGRAPH_WIDE_PACKED", "0")
    for i, run in enumerate(runs):
        torch.testing.assert_close(run(True), want[i], rtol=0, atol=0, msg=str(i))


@pytest.mark.parametrize("device", [CUDA])
def test_wide_packed_weight_is_checked(device: str) -> None:
    """pack_wide_weight refuses an unknown epilogue, a shape the tensor-core tiling does not take
    and a float32 weight, naming them; the norm ops refuse a packed weight of another weight's
    size or dtype."""
    c = Case("SmolLM2-135M", 3, torch.bfloat16, device)
    with pytest.raises(RuntimeError, match="epilogue must be 'gate_up', 'qkv' or 'plain'"):
        OPS.pack_wide_weight(c.w_gu, "down")
    with pytest.raises(RuntimeError, match="no tensor-core tiling"):
        OPS.pack_wide_weight(c.w_gu[:, :100].contiguous(), "plain")
    with pytest.raises(RuntimeError, match="no tensor-core tiling"):
        OPS.pack_wide_weight(c.w_qkv, "qkv", 8)
    with pytest.raises(RuntimeError, match="float16 or bfloat16"):
        OPS.pack_wide_weight(c.w_gu.float(), "gate_up")
    with pytest.raises(RuntimeError, match="wide_packed must be pack_wide_weight's output"):
        run_gate_up(c, 32, OPS.pack_wide_weight(c.w_qkv, "qkv", c.hd))
    with pytest.raises(RuntimeError, match="wide_packed must have weight's dtype"):
        run_gate_up(c, 32, OPS.pack_wide_weight(c.w_gu.half(), "gate_up"))


@pytest.mark.parametrize("device", [CUDA])
def test_wide_gemv_from_reads_the_table(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """wide_gemv_from: the token count from which the fused op of a shape runs the wide kernel,
    as the per-shape table (or VGRAPH_GEMV_WIDE_FROM_<OP>) says; 0 where it never does."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the wide kernel needs sm_90")
    llama, smol = (
        Case("Llama-3.2-1B", 1, torch.bfloat16, device),
        Case("SmolLM2-135M", 1, torch.bfloat16, device),
    )
    assert OPS.wide_gemv_from(llama.w_gu, "gate_up") == 1
    assert OPS.wide_gemv_from(llama.w_qkv, "qkv", llama.hd) == 2
    assert OPS.wide_gemv_from(llama.w_o, "plain") == 0
    assert OPS.wide_gemv_from(smol.w_gu, "gate_up") == 0
    monkeypatch.setenv("VGRAPH_GEMV_WIDE_FROM_GATE_UP", "0")
    assert OPS.wide_gemv_from(llama.w_gu, "gate_up") == 0
    monkeypatch.setenv("VGRAPH_GEMV_WIDE_FROM_GATE_UP", "33")  # past every fused limit
    with pytest.raises(RuntimeError, match="VGRAPH_GEMV_WIDE_FROM_GATE_UP"):
        OPS.wide_gemv_from(llama.w_gu, "gate_up")
    with pytest.raises(RuntimeError, match="epilogue must be"):
        OPS.wide_gemv_from(llama.w_gu, "silu")


@pytest.mark.parametrize("device", [CUDA])
@pytest.mark.parametrize(
    ("name", "value"),
    [("VGRAPH_WIDE_SPLIT", "9"), ("VGRAPH_WIDE_SPLIT", "5"), ("VGRAPH_WIDE_WARPS", "9"),
     ("VGRAPH_WIDE_WARPS", "0x"), ("VGRAPH_WIDE_LATE_TRIGGER", "2"),
     ("VGRAPH_WIDE_TRIGGER_LEFT", "-1"), ("VGRAPH_GEMV", "tensor"),
     ("VGRAPH_WIDE_STAGES", "7"), ("VGRAPH_WIDE_STAGES", "12"),
     ("VGRAPH_WIDE_EARLY_REFILL", "2")],
)  # fmt: skip
def test_wide_switches_reject_bad_values(
    name: str, value: str, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of range, a split that does not divide K's chunks (576 / 64 = 9 chunks: 5 does not)
    and an unknown kernel name are refused, naming the switch."""
    monkeypatch.setenv("VGRAPH_GEMV", "wide")
    monkeypatch.setenv(name, value)
    c = Case("SmolLM2-135M", 4, torch.bfloat16, device)
    with pytest.raises(RuntimeError, match=name):
        run_gate_up(c, 32)


@pytest.mark.parametrize("device", [CUDA])
def test_max_tokens_switch_replaces_the_table(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """VGRAPH_GEMV_MAX_TOKENS_GATE_UP=0 sends the op's calls without max_gemv_tokens to the unfused
    sequence at every shape (one token is fused by the table), =16 to a fused kernel."""
    c = Case("Llama-3.2-1B", 1, torch.bfloat16, device)
    unfused, fused = run_gate_up(c, 0), run_gate_up(c, 1)
    assert not torch.equal(unfused, fused)  # the two paths sum in different orders
    monkeypatch.setenv("VGRAPH_GEMV_MAX_TOKENS_GATE_UP", "0")
    torch.testing.assert_close(run_gate_up(c, None), unfused, rtol=0, atol=0)
    monkeypatch.setenv("VGRAPH_GEMV_MAX_TOKENS_GATE_UP", "16")
    torch.testing.assert_close(run_gate_up(c, None), fused, rtol=0, atol=0)
    monkeypatch.setenv("VGRAPH_GEMV_MAX_TOKENS_GATE_UP", "33")
    with pytest.raises(RuntimeError, match="VGRAPH_GEMV_MAX_TOKENS_GATE_UP must be an integer in"):
        run_gate_up(c, None)


@pytest.mark.parametrize("device", [CUDA])
@pytest.mark.parametrize(
    ("shape", "num_tokens"),
    [("Llama-3.2-1B", 1), ("Llama-3.2-1B", 4), ("Llama-3.2-1B", 16), ("Qwen3-0.6B", 8)],
)
def test_table_sends_norm_projections_to_wide_kernel(
    shape: str, num_tokens: int, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table's wide_from: Llama-3.2-1B's and Qwen3-0.6B's gate/up calls without
    max_gemv_tokens run the wide kernel (bit-equal to VGRAPH_GEMV=wide, not to =mma, whose sums
    run in another order), within tolerance of the float32 reference; where the kernel lets the
    next one start (VGRAPH_WIDE_LATE_TRIGGER, VGRAPH_WIDE_TRIGGER_LEFT) changes no bit."""
    c = Case(shape, num_tokens, torch.bfloat16, device)
    table = run_gate_up(c, None)
    assert rel_err(table, ref_gate_up(c)) < REL_TOL[torch.bfloat16]
    for name, value in [
        ("VGRAPH_WIDE_LATE_TRIGGER", "0"),
        ("VGRAPH_WIDE_TRIGGER_LEFT", "0"),
        ("VGRAPH_WIDE_TRIGGER_LEFT", "7"),
        ("VGRAPH_WIDE_TRIGGER_LEFT", "99"),
    ]:
        monkeypatch.setenv(name, value)
        torch.testing.assert_close(run_gate_up(c, None), table, rtol=0, atol=0, msg=name + value)
        monkeypatch.delenv(name)
    monkeypatch.setenv("VGRAPH_GEMV", "wide")
    torch.testing.assert_close(run_gate_up(c, 16), table, rtol=0, atol=0)
    monkeypatch.setenv("VGRAPH_GEMV", "mma")
    assert not torch.equal(run_gate_up(c, 16), table)


@pytest.mark.parametrize("device", [CUDA])
@pytest.mark.parametrize("num_tokens", [1, 7, 16, 29])
def test_mma_partial_row_tile(
    num_tokens: int, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tensor-core kernel's last tile of 16 rows is partial when N is not a multiple of 16:
    rows past N are neither read beyond the weight nor written; a float32 reference decides."""
    monkeypatch.setenv("VGRAPH_GEMV", "mma")
    dtype = torch.bfloat16
    c = Case("SmolLM2-135M", num_tokens, dtype, device)
    w = rand(4101, c.hidden, device=device, dtype=dtype, seed=11, scale=c.hidden**-0.5)
    # [4101, hidden]: 256 whole tiles and one of 5 rows
    out = torch.full((num_tokens, 4104), float("nan"), dtype=torch.float32, device=device)
    OPS.linear_out(out[:, :4101], c.hidden_x, w, 32)
    assert torch.isnan(out[:, 4101:]).all()  # past the view: untouched
    assert rel_err(out[:, :4101], c.hidden_x.float() @ w.float().T) < REL_TOL[dtype]
    residual = c.residual[:, :200].clone()  # [T, 200]: N = 200, 12 whole tiles and one of 8 rows
    ref = c.attn_x.float() @ c.w_o[:200].float().T + residual.float()
    OPS.linear_add_residual(residual, c.attn_x, c.w_o[:200], 32)
    assert rel_err(residual, ref) < REL_TOL[dtype]


@pytest.mark.parametrize("device", [CUDA])
@pytest.mark.parametrize("kernel", ["", "wide"])
def test_cuda_graph_chain_with_pdl_replays_new_inputs(
    kernel: str, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decoder layer's chain of the four ops (each launched with programmatic stream
    serialization, waiting on its predecessor) in one CUDA graph, replayed with new inputs; with
    the wide kernel also launched as clusters (Llama-3.2-1B's shapes split K) at 13 tokens."""
    monkeypatch.setenv("VGRAPH_GEMV", kernel)
    dtype, num_tokens = torch.bfloat16, 4 if kernel == "" else 13
    shape = "SmolLM2-135M" if kernel == "" else "Llama-3.2-1B"
    if kernel:  # every op fused at 13 tokens
        for op in ("QKV", "RESIDUAL", "GATE_UP", "OUT", "NORM_OUT"):
            monkeypatch.setenv(f"VGRAPH_GEMV_MAX_TOKENS_{op}", "32")
    c = Case(shape, num_tokens, dtype, device)
    residual = torch.empty_like(c.residual)  # [T, hidden], the stream every op reads or writes
    positions = torch.empty_like(c.positions)
    qkv = torch.empty(num_tokens, c.n_qkv, dtype=dtype, device=device)
    act = torch.empty(num_tokens, c.inter, dtype=dtype, device=device)
    lm_head = c.w_gu[:4096]  # [<= 4096, hidden]: an LM head slice
    logits = torch.empty(num_tokens, lm_head.shape[0], dtype=torch.float32, device=device)
    head = torch.empty_like(logits)  # the final norm + LM head

    def layer() -> None:
        OPS.rms_norm_qkv_rope(qkv, residual, c.norm_w, EPS, c.w_qkv, None, positions, c.cache,
                              c.hd, c.nh, c.nkv)  # fmt: skip
        OPS.linear_add_residual(residual, qkv[:, : c.nh * c.hd], c.w_o)
        OPS.rms_norm_gate_up_silu(act, residual, c.norm_w, EPS, c.w_gu)
        OPS.linear_add_residual(residual, act, c.w_down)
        OPS.linear_out(logits, residual, lm_head)
        OPS.rms_norm_linear_out(head, residual, c.norm_w, EPS, lm_head)

    residual.copy_(c.residual), positions.copy_(c.positions)
    layer()  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(3):  # three layers back to back: each waits on the one before
            layer()
    for seed in (11, 12):
        residual.copy_(rand(num_tokens, c.hidden, device=device, dtype=dtype, seed=seed))
        positions.copy_(torch.randint(0, MAX_POS, (num_tokens,), device=device))
        start = residual.clone()
        want = []
        for _ in range(3):
            layer()
            want = [t.clone() for t in (qkv, act, residual, logits, head)]
        residual.copy_(start)
        graph.replay()
        torch.cuda.synchronize()
        for got, ref in zip((qkv, act, residual, logits, head), want):
            assert torch.equal(got, ref)  # same kernels, same order: bit-equal


GREEDY_STATE = 128  # csrc/decode_common.h: kGreedyStateSize


def head_with_greedy(
    x: torch.Tensor, norm_w: torch.Tensor | None, w: torch.Tensor, out_dtype: torch.dtype,
    max_tokens: int | None, state: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """The LM head op (with the final norm where norm_w is given) with its greedy tokens."""
    out = torch.empty(x.shape[0], w.shape[0], dtype=out_dtype, device=x.device)
    greedy = torch.full((x.shape[0],), -7, dtype=torch.int64, device=x.device)
    if norm_w is None:
        OPS.linear_out(out, x, w, max_tokens, greedy=greedy, greedy_state=state)
    else:
        OPS.rms_norm_linear_out(out, x, norm_w, EPS, w, max_tokens, greedy=greedy,
                                greedy_state=state)  # fmt: skip
    return out, greedy


def head_weight(rows: int, x: torch.Tensor, nan: bool) -> torch.Tensor:
    """[rows, hidden] LM head weights whose best rows for the first token tie: rows 7 and rows - 3
    (in different CTAs of every kernel) are equal and far above the rest; with `nan` row
    1 + rows // 2 holds a NaN, every token's argmax (torch ranks NaN above every number)."""
    hidden = x.shape[1]
    w = rand(rows, hidden, device=x.device.type, dtype=x.dtype, seed=21, scale=hidden**-0.5)
    top = (x[0].float() / x[0].float().norm() * 4.0).to(x.dtype)  # aligned with token 0
    w[7], w[rows - 3] = top, top
    if nan:
        w[1 + rows // 2, 5] = float("nan")
    return w


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("atomic", ["0", "1"])
@pytest.mark.parametrize("num_tokens", [1, 2, 3, 16, 17])
@pytest.mark.parametrize("shape", ["SmolLM2-135M", "Llama-3.2-1B", "odd"])
def test_head_greedy_tokens_are_the_argmax_of_its_logits(
    shape: str, num_tokens: int, atomic: str, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """linear_out / rms_norm_linear_out with greedy: each token's index of its largest written
    logit, as torch.argmax picks it (ties to the lowest index across CTAs, NaN first), the
    logits bit-equal to the call without it, on every path: the looping CUDA-core kernel's
    epilogue (one token), the argmax after a CTA per row pair and after the tensor-core kernel,
    cuBLAS with the widening argmax, 16-bit or float32 logits, the argmax's CTAs meeting in a
    cluster or through the state's atomics (VGRAPH_ARGMAX_ATOMIC; 4,101 entries: two CTAs a
    row, the tied rows and the NaN in different ones); twice in a row with other inputs (the
    state is left zeroed)."""
    if device == "cpu" and atomic == "1":
        pytest.skip("the CPU takes torch.argmax")
    monkeypatch.setenv("VGRAPH_ARGMAX_ATOMIC", atomic)
    c = Case(shape, num_tokens, torch.float32 if device == "cpu" else torch.bfloat16, device)
    state = None if device == "cpu" else torch.zeros(GREEDY_STATE, dtype=torch.int64, device=device)
    variants = [("", "", "", None)]
    if device != "cpu":
        variants += [("cuda_core", "1", "", 32), ("cuda_core", "", "1", 32), ("mma", "", "", 32),
                     ("", "", "", 0)]  # fmt: skip
    for kernel, pairs, ctas, max_tokens in variants:
        monkeypatch.setenv("VGRAPH_GEMV", kernel)
        monkeypatch.setenv("VGRAPH_GEMV_PAIRS", pairs)
        monkeypatch.setenv("VGRAPH_GEMV_CTAS_PER_SM", ctas)
        monkeypatch.setenv("VGRAPH_GEMV_LOOP", "1" if ctas else "")
        for seed, nan in ((31, False), (32, True)):
            x = rand(num_tokens, c.hidden, device=device, dtype=c.hidden_x.dtype, seed=seed)
            w = head_weight(4101, x, nan)
            for norm_w in (None, c.norm_w):
                for out_dtype in {torch.float32, x.dtype}:
                    out, greedy = head_with_greedy(x, norm_w, w, out_dtype, max_tokens, state)
                    assert torch.equal(greedy, out.float().argmax(dim=-1)), (kernel, pairs, ctas)
                    plain = torch.empty_like(out)
                    if norm_w is None:
                        OPS.linear_out(plain, x, w, max_tokens)
                    else:
                        OPS.rms_norm_linear_out(plain, x, norm_w, EPS, w, max_tokens)
                    torch.testing.assert_close(out, plain, rtol=0, atol=0, equal_nan=True)
                    if nan:
                        assert (greedy == 1 + 4101 // 2).all()
                    elif norm_w is None:  # token 0's best rows tie: the first wins
                        assert greedy[0].item() == 7
                if state is not None:
                    assert not state.any()  # zeroed for the next call


@pytest.mark.parametrize("device", [CUDA])
@pytest.mark.parametrize("atomic", ["0", "1"])
@pytest.mark.parametrize("num_tokens", [1, 16])
def test_head_greedy_replays_in_a_cuda_graph(
    num_tokens: int, atomic: str, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The final norm + LM head with its greedy tokens (SmolLM2-135M's vocabulary: the looping
    CUDA-core kernel's epilogue at one token, cuBLAS and the widening argmax at 16, its CTAs in
    a cluster or meeting through the state's atomics) captured in a CUDA graph and replayed with
    new inputs: each replay's tokens are its logits' argmax."""
    monkeypatch.setenv("VGRAPH_ARGMAX_ATOMIC", atomic)
    c = Case("SmolLM2-135M", num_tokens, torch.bfloat16, device)
    w = rand(49152, c.hidden, device=device, dtype=torch.bfloat16, seed=22, scale=c.hidden**-0.5)
    state = torch.zeros(GREEDY_STATE, dtype=torch.int64, device=device)
    x = torch.empty(num_tokens, c.hidden, dtype=torch.bfloat16, device=device)
    out = torch.empty(num_tokens, w.shape[0], dtype=torch.float32, device=device)
    greedy = torch.empty(num_tokens, dtype=torch.int64, device=device)

    def head() -> None:
        OPS.rms_norm_linear_out(out, x, c.norm_w, EPS, w, greedy=greedy, greedy_state=state)

    x.copy_(c.hidden_x)
    head()  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        head()
    seen = set()
    for seed in (41, 42, 43):
        x.copy_(rand(num_tokens, c.hidden, device=device, dtype=torch.bfloat16, seed=seed))
        graph.replay()
        torch.cuda.synchronize()
        want = (norm_ref(x, c.norm_w) @ w.float().T).argmax(dim=-1)
        assert torch.equal(greedy, out.argmax(dim=-1))
        assert (greedy == want).float().mean().item() >= 0.5  # the logits are the head's
        seen.add(tuple(greedy.tolist()))
    assert len(seen) == 3 and not state.any()


class Layer(torch.nn.Module):
    """The fused decoder-layer chain, as the model calls it, for torch.compile."""

    def __init__(self, c: Case, unit_norm: bool = False) -> None:
        super().__init__()
        self.c, self.unit_norm = c, unit_norm

    def forward(self, positions: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        c, t = self.c, residual.shape[0]
        qkv = torch.empty(t, c.n_qkv, dtype=residual.dtype, device=residual.device)
        OPS.rms_norm_qkv_rope(qkv, residual, c.norm_w, EPS, c.w_qkv, c.b_qkv, positions, c.cache,
                              c.hd, c.nh, c.nkv, unit_norm=self.unit_norm)  # fmt: skip
        OPS.linear_add_residual(residual, qkv[:, : c.nh * c.hd], c.w_o)
        act = torch.empty(t, c.inter, dtype=residual.dtype, device=residual.device)
        OPS.rms_norm_gate_up_silu(act, residual, c.norm_w, EPS, c.w_gu)
        OPS.linear_add_residual(residual, act, c.w_down)
        return residual


@pytest.mark.parametrize("unit_norm", [False, True])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_ops_trace_under_compile(backend: str, unit_norm: bool) -> None:
    c = Case("odd", 5, torch.float32, "cpu")
    if unit_norm:  # the weights a folded model passes
        c.w_qkv, c.norm_w = c.w_qkv * c.norm_w, torch.ones_like(c.norm_w)
    ref = Layer(c, unit_norm)(c.positions, c.residual.clone())
    compiled = torch.compile(Layer(c, unit_norm), fullgraph=True, backend=backend, dynamic=True)
    torch.testing.assert_close(compiled(c.positions, c.residual.clone()), ref, rtol=0, atol=0)


def test_bad_arguments_are_rejected() -> None:
    c = Case("odd", 3, torch.float32, "cpu")
    qkv = torch.empty(3, c.n_qkv)
    with pytest.raises(RuntimeError, match="weight must be"):
        OPS.rms_norm_qkv_rope(qkv, c.hidden_x, c.norm_w, EPS, c.w_o, None, None, None, c.hd,
                              c.nh, c.nkv)  # fmt: skip
    with pytest.raises(RuntimeError, match="both or neither"):
        OPS.rms_norm_qkv_rope(qkv, c.hidden_x, c.norm_w, EPS, c.w_qkv, None, c.positions, None,
                              c.hd, c.nh, c.nkv)  # fmt: skip
    for unit_norm in (False, True):
        with pytest.raises(RuntimeError, match="outside the cos_sin_cache"):
            OPS.rms_norm_qkv_rope(qkv, c.hidden_x, c.norm_w, EPS, c.w_qkv, None,
                                  c.positions + MAX_POS, c.cache, c.hd, c.nh, c.nkv,
                                  unit_norm=unit_norm)  # fmt: skip
    with pytest.raises(RuntimeError, match="out must be"):
        OPS.rms_norm_gate_up_silu(torch.empty(3, 7), c.hidden_x, c.norm_w, EPS, c.w_gu)
    with pytest.raises(RuntimeError, match="residual must be"):
        OPS.linear_add_residual(torch.empty(3, 7), c.attn_x, c.w_o)
    with pytest.raises(RuntimeError, match="out dtype"):
        OPS.linear_out(torch.empty(3, c.inter * 2, dtype=torch.int32), c.hidden_x, c.w_gu)
    with pytest.raises(RuntimeError, match="weight must be \\[hidden = 200\\]"):
        OPS.rms_norm_linear_out(torch.empty(3, c.inter * 2), c.hidden_x, c.norm_w[:7], EPS, c.w_gu)
    with pytest.raises(RuntimeError, match="out must be \\[3, 528\\]"):
        OPS.rms_norm_linear_out(torch.empty(3, 7), c.hidden_x, c.norm_w, EPS, c.w_gu)
    logits = torch.empty(3, c.inter * 2)
    with pytest.raises(RuntimeError, match="greedy must be a contiguous int64 \\[3\\]"):
        OPS.linear_out(logits, c.hidden_x, c.w_gu, greedy=torch.empty(3, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="greedy must be a contiguous int64 \\[3\\]"):
        OPS.rms_norm_linear_out(logits, c.hidden_x, c.norm_w, EPS, c.w_gu,
                                greedy=torch.empty(4, dtype=torch.int64))  # fmt: skip
    with pytest.raises(RuntimeError, match="greedy_state is given without greedy"):
        OPS.linear_out(logits, c.hidden_x, c.w_gu, greedy_state=torch.zeros(2, dtype=torch.int64))
    with pytest.raises(RuntimeError, match="greedy_state must be a contiguous int64 \\[>= 128\\]"):
        OPS.linear_out(logits, c.hidden_x, c.w_gu, greedy=torch.empty(3, dtype=torch.int64),
                       greedy_state=torch.zeros(1, dtype=torch.int64))  # fmt: skip


@pytest.mark.parametrize("device", [CUDA])
def test_cuda_bad_arguments_raise(device: str) -> None:
    """A rejected CUDA call raises (checked in a child process: a crash must not end the run)."""
    import subprocess
    import sys

    code = (
        "import torch\n"
        "from vgraph._ext import load_ext\n"
        "load_ext()\n"
        "x = torch.randn(4, 576, device='cuda', dtype=torch.bfloat16)\n"
        "w = torch.randn(3072, 576, device='cuda', dtype=torch.bfloat16)\n"
        "try:\n"
        "    torch.ops.vgraph_C.linear_out(torch.empty(4, 4096, device='cuda'), x, w)\n"
        "except RuntimeError as e:\n"
        "    print('raised:', str(e).splitlines()[0])\n"
        "g = torch.empty(4, dtype=torch.int64, device='cuda')\n"
        "try:\n"
        "    torch.ops.vgraph_C.linear_out(torch.empty(4, 3072, device='cuda'), x, w, greedy=g)\n"
        "except RuntimeError as e:\n"
        "    print('raised:', str(e).splitlines()[0])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "raised: out must be [4, 3072]" in proc.stdout
    assert "raised: greedy_state is required with greedy on CUDA" in proc.stdout
