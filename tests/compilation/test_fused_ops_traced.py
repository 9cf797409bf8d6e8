"""The fused vgraph._C layer ops (rms_norm, fused_add_rms_norm, rotary_embedding, silu_and_mul)
survive Dynamo, the split and Inductor.

On CUDA every layer calls them; on the CPU the layers keep the torch code (the float32 oracle).
Their CPU kernels let this test force the CUDA path here: the ops mutate their arguments in
place, which Dynamo functionalizes and Inductor must write back, across piece boundaries for
the residual. Piecewise greedy tokens must equal eager ones with the same ops.
"""

from __future__ import annotations

import pytest

from tests.e2e.test_piecewise import run_workload
from vgraph._ext import load_ext
from vgraph.layers import layernorm, linear, rotary

pytestmark = pytest.mark.skipif(not load_ext(), reason="vgraph._C is not built")


@pytest.fixture
def fused_ops_everywhere(monkeypatch):
    for module in (layernorm, linear, rotary):
        monkeypatch.setattr(module, "use_cuda_op", lambda x, op: True)


@pytest.mark.slow
@pytest.mark.parametrize("use_inductor", [False, True])
def test_piecewise_with_fused_ops_equals_eager(
    use_inductor, fused_ops_everywhere, tiny_checkpoint, tmp_path
):
    folder = tiny_checkpoint("llama", num_hidden_layers=2)
    ref, c_ref, _ = run_workload(folder, "NONE")
    got, c, _ = run_workload(
        folder, "FULL_AND_PIECEWISE", use_inductor=use_inductor, cache_dir=str(tmp_path)
    )
    assert got == ref
    assert c.steps["PIECEWISE"] >= 3 and c.steps["FULL"] >= 5


def test_the_traced_pieces_call_the_fused_ops(fused_ops_everywhere, tiny_checkpoint, tmp_path):
    from tests.compilation.runner_utils import load_runner

    folder = tiny_checkpoint("llama", num_hidden_layers=2)
    backend = load_runner(folder, tmp_path).model_fn.backend
    code = [item.module.code for item in backend.items if not item.is_splitting]
    assert "vgraph_C.rms_norm" in code[0] and "vgraph_C.rotary_embedding" in code[0]
    for middle in code[1:-1]:
        for op in ("fused_add_rms_norm", "silu_and_mul", "rotary_embedding"):
            assert f"vgraph_C.{op}" in middle
    assert "vgraph_C.fused_add_rms_norm" in code[-1]
