"""The attention custom ops exist for Dynamo only: eager forwards run their bodies directly."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from vgraph.forward_context import ForwardContext, set_forward_context
from vgraph.layers.attention import Attention


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func._schema.name)
        return func(*args, **(kwargs or {}))


def test_eager_attention_skips_the_dispatcher():
    layer = Attention(num_heads=4, head_dim=8, scale=8**-0.5, num_kv_heads=2, prefix="attn0")
    q, k = torch.randn(3, 32), torch.randn(3, 16)
    with set_forward_context(ForwardContext(attn_metadata=None)), _Ops() as ops:
        out = layer(q, k, k.clone())
    assert "aten::zero_" in ops.names  # the body ran (no metadata: zeros)
    assert "vgraph::unified_attention_with_output" not in ops.names
    assert "vgraph::kv_cache_update" not in ops.names
    assert out.shape == (3, 32) and not out.any()


def test_traced_attention_is_one_opaque_op():
    layer = Attention(num_heads=4, head_dim=8, scale=8**-0.5, num_kv_heads=2, prefix="attn0")
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    compiled = torch.compile(layer, backend=backend, fullgraph=True)
    with set_forward_context(ForwardContext(attn_metadata=None)):
        compiled(torch.randn(3, 32), torch.randn(3, 16), torch.randn(3, 16))
    (gm,) = graphs
    code = gm.code
    write = code.index("torch.ops.vgraph.kv_cache_update")
    attend = code.index("torch.ops.vgraph.unified_attention_with_output")
    assert write < attend
    # the cache write's token is an argument of attention: Inductor can't drop or move it
    token = code[:write].rsplit("\n", 1)[1].split("=")[0].strip()
    assert token in code[attend:].split("\n", 1)[0]
    assert "zero_" not in gm.code  # the body stays out of the graph
