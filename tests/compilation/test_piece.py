"""Captured pieces read their inputs at the captured addresses: an input made fresh by an eager
splitting op is copied into a static buffer, and debug mode catches an input that moved."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vgraph.compilation.backend import PiecewiseBackend
from vgraph.config.modes import CUDAGraphMode
from vgraph.cudagraph.dispatcher import BatchDescriptor
from vgraph.cudagraph.recorder import RecorderGraphBackend
from vgraph.forward_context import ForwardContext, set_forward_context


@torch.library.custom_op("vgraph_test::double", mutates_args=())
def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2  # a fresh tensor every call, unlike the attention op


@double.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class Toy(nn.Module):
    """linear -> eager op -> linear: the second piece's input comes straight from the eager op."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [T, 8] -> [T, 8]
        return self.b(torch.ops.vgraph_test.double(self.a(x)))


def compile_toy(debug: bool, monkeypatch) -> tuple[Toy, PiecewiseBackend, torch.Tensor, object]:
    monkeypatch.setenv("VGRAPH_DEBUG_GRAPHS", "1" if debug else "0")
    torch.manual_seed(0)
    toy = Toy()
    backend = PiecewiseBackend(["vgraph_test::double"], False, RecorderGraphBackend())
    compiled = torch.compile(toy.forward, backend=backend, fullgraph=True, dynamic=False)
    x = torch.randn(4, 8)  # the static input buffer
    torch._dynamo.mark_dynamic(x, 0)
    with torch.inference_mode(), set_forward_context(ForwardContext(None)):
        compiled(x)  # trace
    return toy, backend, x, compiled


def run(compiled, x: torch.Tensor, capturing: bool = False) -> torch.Tensor:
    ctx = ForwardContext(
        None,
        runtime_mode=CUDAGraphMode.PIECEWISE,
        batch_descriptor=BatchDescriptor(4),
        capturing=capturing,
    )
    with torch.inference_mode(), set_forward_context(ctx):
        return compiled(x).clone()


def test_split_marks_the_eager_op_output_as_an_eager_input(monkeypatch):
    _, backend, _, _ = compile_toy(False, monkeypatch)
    assert [i.is_splitting for i in backend.items] == [False, True, False]
    assert backend.items[0].eager_inputs == ()
    assert len(backend.items[2].eager_inputs) == 1


def test_eager_inputs_are_copied_into_static_buffers(monkeypatch):
    toy, _, x, compiled = compile_toy(False, monkeypatch)
    run(compiled, x, capturing=True)
    for _ in range(3):
        x.copy_(torch.randn(4, 8))  # new step, same buffer
        with torch.inference_mode():
            ref = toy(x)
        torch.testing.assert_close(run(compiled, x), ref)


def test_without_the_copy_a_replay_reads_stale_memory(monkeypatch):
    """The failure the static buffers prevent, shown on the recorder; debug mode names it."""
    toy, backend, x, compiled = compile_toy(False, monkeypatch)
    backend.pieces[1].eager_inputs = ()  # as if the split had not noticed the eager input
    run(compiled, x, capturing=True)
    x.copy_(torch.randn(4, 8))
    with torch.inference_mode():
        ref = toy(x)
    assert not torch.allclose(run(compiled, x), ref)

    toy, backend, x, compiled = compile_toy(True, monkeypatch)
    backend.pieces[1].eager_inputs = ()
    run(compiled, x, capturing=True)
    with pytest.raises(AssertionError, match="not at their captured addresses"):
        run(compiled, x)


def test_debug_mode_accepts_the_static_inputs(monkeypatch):
    _, backend, x, compiled = compile_toy(True, monkeypatch)
    assert all(p.debug for p in backend.pieces)
    run(compiled, x, capturing=True)
    run(compiled, x)  # no AssertionError: every piece input is where it was at capture
