"""Graphs of one runner share a CUDA memory pool; a wrapper keeps only non-owning aliases of
what it captured, so outputs of a larger capture size are handed on to smaller ones instead of
holding pool memory for every size, and each size still replays into its own output."""

from __future__ import annotations

import pytest
import torch

from vgraph.config.modes import CUDAGraphMode
from vgraph.cudagraph.backends import CudaGraphBackend, non_owning_alias
from vgraph.cudagraph.dispatcher import BatchDescriptor
from vgraph.cudagraph.wrapper import CUDAGraphWrapper
from vgraph.forward_context import ForwardContext, set_forward_context

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

ROWS, WIDTH = 4096, 4096  # 64 MiB of float32 per output at the largest size


def run(wrapper: CUDAGraphWrapper, n: int, capturing: bool = False) -> torch.Tensor:
    ctx = ForwardContext(
        attn_metadata=None,
        runtime_mode=CUDAGraphMode.PIECEWISE,
        batch_descriptor=BatchDescriptor(n),
        capturing=capturing,
    )
    with set_forward_context(ctx):
        return wrapper(n)


def test_outputs_of_other_sizes_reuse_the_pool_and_replay_correctly():
    x = torch.randn(ROWS, WIDTH, device="cuda")  # the static input
    backend = CudaGraphBackend()
    wrapper = CUDAGraphWrapper(lambda n: x[:n] * 2 + 1, CUDAGraphMode.PIECEWISE, backend)
    sizes = (ROWS, ROWS // 2, ROWS // 4)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for n in sizes:  # largest first, as the runner captures
        out = run(wrapper, n, capturing=True)
        assert out.shape == (n, WIDTH)
        del out  # the capturing forward is over
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated() - before
    # strong references would keep 64 + 32 + 16 MiB allocated
    assert held <= ROWS * WIDTH * 4 * 1.1, f"{held / 2**20:.0f} MiB held by 3 captured outputs"

    for n in (ROWS // 4, ROWS, ROWS // 2, ROWS // 4):  # any order, each in its own output
        x.normal_()
        got = run(wrapper, n)
        torch.testing.assert_close(got, x[:n] * 2 + 1)


def test_a_non_owning_alias_sees_the_memory_without_keeping_it():
    t = torch.randn(1 << 20, device="cuda")[16:]
    alias = non_owning_alias(t)
    assert alias.data_ptr() == t.data_ptr() and alias.shape == t.shape
    t.add_(1)
    torch.testing.assert_close(alias, t)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    del t
    assert torch.cuda.memory_allocated() < before  # the alias did not keep it
