"""non_owning_alias: what a CUDA graph wrapper keeps of a captured output (here on the CPU)."""

from __future__ import annotations

import torch

from vgraph.cudagraph.backends import non_owning_alias


def test_alias_views_the_same_memory_with_the_same_geometry():
    base = torch.arange(24.0).view(4, 6)
    t = base[1:, 2:5]  # offset and strides
    alias = non_owning_alias(t)
    assert (alias.data_ptr(), alias.shape, alias.stride()) == (t.data_ptr(), t.shape, t.stride())
    base.mul_(2)
    torch.testing.assert_close(alias, t)


def test_alias_of_an_inference_tensor():
    with torch.inference_mode():
        t = torch.ones(3, 5)
        alias = non_owning_alias(t)
        t.add_(1)
    assert alias.is_inference() and bool((alias == 2).all())
