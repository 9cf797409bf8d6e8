"""The CPU recorder graph backend freezes exactly what a CUDA graph freezes."""

from __future__ import annotations

import pytest
import torch

from vgraph.cudagraph.recorder import RecorderGraphBackend


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


def held_bytes(graphs: list, inputs: list[torch.Tensor]) -> int:
    """Bytes of the distinct storages the graphs' op lists reference, inputs left out."""
    skip = {t.untyped_storage().data_ptr() for t in inputs}
    held: dict[int, int] = {}
    for graph in graphs:
        for op in graph.ops:
            for t in [*op.args, *op.kwargs.values(), *op.outputs]:
                if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in skip:
                    held[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(held.values())


def test_graphs_share_one_pool_and_replay_right():
    """Ten sizes hold about what the largest capture's live tensors take, not ten captures'
    worth of every intermediate (the memory a CUDA graph pool would use)."""
    backend = RecorderGraphBackend()
    x, w1, w2 = torch.randn(512, 64), torch.randn(64, 256), torch.randn(256, 64)

    def f(n: int) -> torch.Tensor:
        h = (x[:n] @ w1).relu()  # [n, 256]: two intermediates alive at once at most
        return ((h * 2 + 1) @ w2).tanh()  # [n, 64]

    sizes = [512, 256, 128, 64, 32, 16, 8, 4, 2, 1]
    graphs = {}
    for n in sizes:  # largest first, the capturing caller dropping each output, as the runner
        graph, out = backend.capture(lambda n=n: f(n))
        graphs[n] = (graph, backend.keep_output(out))
        del out
    # largest capture: 4 intermediates of [512, 256] (2 alive at once) and one [512, 64] output
    largest_live = 2 * 512 * 256 * 4 + 512 * 64 * 4
    assert held_bytes([g for g, _ in graphs.values()], [x, w1, w2]) <= 1.25 * largest_live
    for _ in range(2):
        x.copy_(torch.randn(512, 64))
        for n in sizes:  # each size's output read before the next replay, as a step does
            graph, out = graphs[n]
            backend.replay(graph)
            torch.testing.assert_close(out, f(n))


def test_output_held_by_the_caller_feeds_the_next_graph():
    """Like pieces of one forward: graph 2 reads graph 1's output, so a capture may not reuse
    memory the capturing caller still holds."""
    backend = RecorderGraphBackend()
    x = torch.randn(16, 8)
    g1, y = backend.capture(lambda: (x * 2).exp())
    g2, z = backend.capture(lambda: (y + 1).relu() * y)
    z_kept = backend.keep_output(z)
    assert y.data_ptr() != z.data_ptr()
    x.copy_(torch.randn(16, 8))
    backend.replay(g1)
    backend.replay(g2)
    y_ref = (x * 2).exp()
    torch.testing.assert_close(z_kept, (y_ref + 1).relu() * y_ref)
