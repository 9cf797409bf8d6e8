"""rms_norm_mlp_residual, a decoder layer's MLP on the residual stream in one op: against a float32
torch reference (relative norm) on the shapes of the three shipped configs and an odd one; on CUDA
its one-kernel path at one token (csrc/decode_mlp.cu) against the two fused ops it replaces, at
every grid, ring depth and trigger point, deterministic (bit-equal call after call, its barrier's
count back to zero), inside a captured CUDA graph replayed with new inputs, and the table that
picks it (fused_mlp_tokens). CPU always, CUDA under the `gpu` marker.
"""

from __future__ import annotations

import pytest
import torch

from tests.kernels.devices import cuda_param
from tests.kernels.test_decode_ops import EPS, PATH_TOL, REL_TOL, SHAPES, dtypes_for, rand, rel_err
from vgraph._ext import ext_unavailable_reason, load_ext

if not load_ext():
    pytest.skip(ext_unavailable_reason(), allow_module_level=True)
if not torch._C._dispatch_has_kernel("vgraph_C::rms_norm_mlp_residual"):
    pytest.skip("vgraph._C predates rms_norm_mlp_residual: rebuild it", allow_module_level=True)

OPS = torch.ops.vgraph_C
CUDA = cuda_param("rms_norm_mlp_residual")
DEVICES = ["cpu", CUDA]
# The one-kernel path's hidden sizes (H = 256 P, P = 4 or 8); others take the two ops.
ONE_KERNEL = ("Llama-3.2-1B", "Qwen3-0.6B")


class Mlp:
    """One layer's MLP weights and a residual stream of num_tokens rows."""

    def __init__(self, shape: str, num_tokens: int, dtype: torch.dtype, device: str) -> None:
        hidden, _, _, _, inter = SHAPES[shape]
        kw = {"device": device, "dtype": dtype}
        self.hidden, self.inter = hidden, inter
        self.w_gu = rand(2 * inter, hidden, seed=4, scale=hidden**-0.5, **kw)  # [2 I, H]
        self.w_down = rand(hidden, inter, seed=5, scale=inter**-0.5, **kw)  # [H, I]
        self.norm_w = rand(hidden, seed=6, scale=0.2, **kw) + 1.0
        self.residual = rand(num_tokens, hidden, seed=10 + num_tokens, scale=4.0, **kw)
        self.state = torch.zeros((inter + 3) // 4 + 2, dtype=torch.int64, device=device)

    def run(self, max_fused_tokens: int | None = None, one_kernel: bool = True) -> torch.Tensor:
        residual = self.residual.clone()
        OPS.rms_norm_mlp_residual(
            residual, self.norm_w, EPS, self.w_gu, self.w_down,
            state=self.state if one_kernel else None, max_fused_tokens=max_fused_tokens,
        )  # fmt: skip
        return residual

    def scratch_clear(self) -> bool:
        """The barrier's arrival count (the scratch's word after the activations) is zero again."""
        return bool(self.state[-2] == 0)

    def two_ops(self) -> torch.Tensor:
        """The fused ops the model called before: rms_norm_gate_up_silu, linear_add_residual."""
        residual = self.residual.clone()
        act = torch.empty(residual.shape[0], self.inter, dtype=residual.dtype,
                          device=residual.device)  # fmt: skip
        OPS.rms_norm_gate_up_silu(act, residual, self.norm_w, EPS, self.w_gu)
        OPS.linear_add_residual(residual, act, self.w_down)
        return residual

    def ref(self) -> torch.Tensor:  # float32, no rounding
        x = self.residual.float()
        normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * self.norm_w.float()
        g, u = (normed @ self.w_gu.float().T).chunk(2, -1)
        return x + (torch.nn.functional.silu(g) * u) @ self.w_down.float().T


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_tokens", [1, 3])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_mlp_matches_float32_reference(shape: str, num_tokens: int, device: str) -> None:
    """Every path: the one kernel (one token, max_fused_tokens=1, on the hidden sizes it takes),
    the two ops (more tokens, no state, other hidden sizes) and the CPU's unfused sequence."""
    for dtype in dtypes_for(device):
        m = Mlp(shape, num_tokens, dtype, device)
        ref = m.ref()
        for max_fused, one_kernel in ((1, True), (0, True), (None, False)):
            err = rel_err(m.run(max_fused, one_kernel), ref)
            assert err < REL_TOL[dtype], (dtype, max_fused, one_kernel, err)
        assert m.scratch_clear()


@pytest.mark.parametrize("device", [CUDA])
@pytest.mark.parametrize("shape", ONE_KERNEL)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_one_kernel_agrees_with_the_two_ops(
    shape: str, dtype: torch.dtype, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At one token the kernel's result is the two ops' within the path tolerance (other fp32
    orders, the same roundings) at every grid (1 CTA, an odd count, one short of the SMs, the
    default: one an SM), ring depth and trigger point; each call writes the same bits (every sum
    has one order) and leaves its barrier's count at zero."""
    m = Mlp(shape, 1, dtype, device)
    want = m.two_ops()
    sms = str(torch.cuda.get_device_properties(device).multi_processor_count - 1)
    grids = [("", "", ""), ("1", "", ""), ("7", "4", "0"), ("", "4", ""), ("", "5", "0"),
             ("", "", "9"), (sms, "5", "1")]  # fmt: skip
    for ctas, stages, trigger in grids:
        monkeypatch.setenv("VGRAPH_MLP_CTAS", ctas)
        monkeypatch.setenv("VGRAPH_MLP_STAGES", stages)
        monkeypatch.setenv("VGRAPH_MLP_TRIGGER_LEFT", trigger)
        msg = f"ctas {ctas} stages {stages} trigger {trigger}"
        first = m.run(1)
        assert rel_err(first, want) < PATH_TOL[dtype], msg
        assert m.scratch_clear(), msg
        for _ in range(3):
            torch.testing.assert_close(m.run(1), first, rtol=0, atol=0, msg=msg)
    monkeypatch.setenv("VGRAPH_MLP_CTAS", "")
    monkeypatch.setenv("VGRAPH_MLP_STAGES", "")
    monkeypatch.setenv("VGRAPH_MLP_TRIGGER_LEFT", "")
    # the path the table does not take (two tokens, or max_fused_tokens=0): the two ops' bits
    torch.testing.assert_close(m.run(0), want, rtol=0, atol=0)
    two = Mlp(shape, 2, dtype, device)
    torch.testing.assert_close(two.run(1), two.two_ops(), rtol=0, atol=0)


@pytest.mark.parametrize("device", [CUDA])
def test_one_kernel_switches_are_checked(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel refuses a grid past one CTA an SM (its CTAs must all be resident at the barrier)
    and a ring deeper than its shared memory holds, naming the switch."""
    m = Mlp("Llama-3.2-1B", 1, torch.bfloat16, device)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    monkeypatch.setenv("VGRAPH_MLP_CTAS", str(sms + 1))
    with pytest.raises(RuntimeError, match=f"VGRAPH_MLP_CTAS must be an integer in \\[1, {sms}\\]"):
        m.run(1)
    monkeypatch.setenv("VGRAPH_MLP_CTAS", "")
    monkeypatch.setenv("VGRAPH_MLP_STAGES", "7")
    with pytest.raises(RuntimeError, match="VGRAPH_MLP_STAGES must be an integer in \\[4, 6\\]"):
        m.run(1)


@pytest.mark.parametrize("device", [CUDA])
def test_one_kernel_replays_in_a_cuda_graph(device: str) -> None:
    """Two layers' MLPs sharing one scratch, captured in one CUDA graph (PDL between them) and
    replayed with new residual values: each replay equals the eager calls."""
    a = Mlp("Llama-3.2-1B", 1, torch.bfloat16, device)
    b = Mlp("Llama-3.2-1B", 1, torch.bfloat16, device)
    b.w_gu, b.w_down = a.w_gu.flip(0).contiguous(), a.w_down.flip(0).contiguous()
    b.state = a.state
    residual = a.residual.clone()

    def step() -> None:
        for m in (a, b):
            OPS.rms_norm_mlp_residual(residual, m.norm_w, EPS, m.w_gu, m.w_down, state=m.state,
                                      max_fused_tokens=1)  # fmt: skip

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()  # warm-up: the launchers' attributes
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for seed in range(3):
        start = rand(1, a.hidden, seed=100 + seed, scale=4.0, device=device, dtype=torch.bfloat16)
        residual.copy_(start)
        step()
        want = residual.clone()
        residual.copy_(start)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(residual, want, rtol=0, atol=0, msg=str(seed))
        assert a.scratch_clear()


@pytest.mark.parametrize("device", [CUDA])
def test_fused_mlp_tokens_reads_the_table(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """fused_mlp_tokens: 1 for Llama-3.2-1B's gate/up shape on sm_80 and later, 0 for shapes not
    measured, hidden sizes the kernel has no instantiation for and intermediate sizes that are no
    multiple of the hidden size; VGRAPH_FUSED_MLP_TOKENS replaces the table where the kernel
    fits, and is checked."""
    major = torch.cuda.get_device_capability()[0]
    llama, qwen, smol = (Mlp(s, 1, torch.bfloat16, device) for s in
                         ("Llama-3.2-1B", "Qwen3-0.6B", "SmolLM2-135M"))  # fmt: skip
    assert OPS.fused_mlp_tokens(llama.w_gu) == (1 if major >= 8 else 0)
    assert OPS.fused_mlp_tokens(qwen.w_gu) == 0
    monkeypatch.setenv("VGRAPH_FUSED_MLP_TOKENS", "1")
    assert OPS.fused_mlp_tokens(qwen.w_gu) == (1 if major >= 8 else 0)
    assert OPS.fused_mlp_tokens(smol.w_gu) == 0  # hidden 576: no instantiation
    odd_inter = torch.empty(2 * 1000, 1024, dtype=torch.bfloat16, device=device)
    assert OPS.fused_mlp_tokens(odd_inter) == 0  # I = 1,000: a down row is no whole stages
    monkeypatch.setenv("VGRAPH_FUSED_MLP_TOKENS", "0")
    assert OPS.fused_mlp_tokens(llama.w_gu) == 0
    monkeypatch.setenv("VGRAPH_FUSED_MLP_TOKENS", "2")
    with pytest.raises(RuntimeError, match="VGRAPH_FUSED_MLP_TOKENS must be an integer in"):
        OPS.fused_mlp_tokens(llama.w_gu)


def test_fused_mlp_tokens_is_zero_on_the_cpu() -> None:
    assert OPS.fused_mlp_tokens(Mlp("Llama-3.2-1B", 1, torch.float32, "cpu").w_gu) == 0


def test_bad_arguments_are_rejected() -> None:
    m = Mlp("odd", 3, torch.float32, "cpu")
    residual = m.residual.clone()

    def call(**kw) -> None:
        args = {"norm_weight": m.norm_w, "eps": EPS, "gate_up_weight": m.w_gu,
                "down_weight": m.w_down, "state": m.state}  # fmt: skip
        args.update(kw)
        OPS.rms_norm_mlp_residual(residual, **args)

    with pytest.raises(RuntimeError, match="down_weight must be \\[H = 200, I = 264\\]"):
        call(down_weight=m.w_down.t().contiguous())
    with pytest.raises(RuntimeError, match="down_weight must be contiguous"):
        call(down_weight=m.w_down.t().contiguous().t())
    with pytest.raises(RuntimeError, match="int64 \\[>= \\(I \\+ 3\\) / 4 \\+ 2 = 68\\]"):
        call(state=torch.zeros(67, dtype=torch.int64))
    with pytest.raises(RuntimeError, match="state must be contiguous int64"):
        call(state=torch.zeros(68, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="gate_up_weight rows 263 must be even"):
        call(gate_up_weight=m.w_gu[:263])
    with pytest.raises(RuntimeError, match="down_weight must have residual's dtype"):
        call(down_weight=m.w_down.double())


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_op_traces_under_compile(backend: str) -> None:
    """The op in a compiled function of a dynamic token count writes what the eager call does."""
    m = Mlp("odd", 5, torch.float32, "cpu")

    def mlp(residual: torch.Tensor) -> torch.Tensor:
        OPS.rms_norm_mlp_residual(residual, m.norm_w, EPS, m.w_gu, m.w_down)
        return residual * 1.0

    want = mlp(m.residual.clone())
    compiled = torch.compile(mlp, fullgraph=True, backend=backend, dynamic=True)
    torch.testing.assert_close(compiled(m.residual.clone()), want, rtol=0, atol=0)
