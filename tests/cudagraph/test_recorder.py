"""The CPU recorder graph backend freezes exactly what a CUDA graph freezes."""

from __future__ import annotations

import pytest
import torch

from vgraph.cudagraph.backends import RecorderGraphBackend


def test_replay_reads_new_values_at_captured_addresses():
    backend = RecorderGraphBackend()
    x = torch.randn(4, 8)
    w = torch.randn(8, 3)
    graph, out = backend.capture(lambda: torch.relu(x @ w).sum(dim=0) * 2)
    x.copy_(torch.randn(4, 8))  # new input written into the static buffer
    backend.replay(graph)
    torch.testing.assert_close(out, torch.relu(x @ w).sum(dim=0) * 2)


def test_fresh_input_tensor_is_not_seen_stale_result():
    backend = RecorderGraphBackend()
    x = torch.randn(4, 8)
    graph, out = backend.capture(lambda: x * 3 + 1)
    captured = out.clone()
    x = torch.randn(4, 8)  # a new tensor, never copied into the captured buffer
    backend.replay(graph)
    assert torch.equal(out, captured)  # like a CUDA graph: the old address is read


def test_python_values_are_frozen():
    backend = RecorderGraphBackend()
    buf = torch.arange(10.0)
    n = 4
    graph, out = backend.capture(lambda: buf[:n].sum())  # n is baked into the slice
    n = 8
    buf.copy_(torch.ones(10))
    backend.replay(graph)
    assert out.item() == 4.0  # still sums 4 elements, as a CUDA graph would


def test_in_place_ops_replay_and_views_alias():
    backend = RecorderGraphBackend()
    cache = torch.zeros(6)
    src = torch.tensor([1.0, 2.0])
    idx = torch.tensor([0, 3])
    graph, _ = backend.capture(lambda: cache.index_copy_(0, idx, src))
    cache.zero_()
    src.copy_(torch.tensor([5.0, 6.0]))
    idx.copy_(torch.tensor([1, 5]))
    backend.replay(graph)
    assert cache.tolist() == [0.0, 5.0, 0.0, 0.0, 0.0, 6.0]


def test_host_read_inside_capture_raises():
    backend = RecorderGraphBackend()
    x = torch.randn(3)
    with pytest.raises(RuntimeError, match="not allowed inside graph capture"):
        backend.capture(lambda: x.sum().item())
    with pytest.raises(RuntimeError, match="not allowed inside graph capture"):
        backend.capture(lambda: x.nonzero())
