"""Graph backends behind one interface: CUDA graphs, and a CPU recorder that freezes like one.

The recorder captures by running the callable under a TorchDispatchMode that records every ATen op
with the exact tensors it touched; replay re-issues that op list against the same tensors. Like a
CUDA graph it freezes shapes, addresses and every Python-side value of the capture run: a runner
that forgets to copy new inputs into its static buffers, or bakes a length into a slice, gets
stale results on the CPU too. Python custom ops (the attention op) are recorded through, so what
their Python body decided at capture is frozen as well. It exists for correctness, not speed.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch._library.custom_ops import OPDEFS
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map_only


class GraphBackend(ABC):
    """Capture a callable once, replay it many times; outputs live at fixed addresses."""

    @abstractmethod
    def capture(self, fn: Callable[[], Any]) -> tuple[Any, Any]:
        """Run fn under capture -> (graph, fn's output)."""

    @abstractmethod
    def replay(self, graph: Any) -> None: ...

    def keep_output(self, output: Any) -> Any:
        """What a wrapper keeps of a captured output, to hand back at every replay."""
        return output

    def memory_in_use(self) -> int:
        """Bytes the device has in use now (for the capture log); 0 where unknown."""
        return 0


class CudaGraphBackend(GraphBackend):
    """torch.cuda.CUDAGraph; every graph of a runner shares one memory pool."""

    def __init__(self) -> None:
        self.pool = torch.cuda.graph_pool_handle()

    def capture(self, fn: Callable[[], Any]) -> tuple[Any, Any]:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = fn()
        return graph, out

    def replay(self, graph: torch.cuda.CUDAGraph) -> None:
        graph.replay()

    def keep_output(self, output: Any) -> Any:
        """Non-owning aliases of the output's tensors (as vLLM's weak_ref_tensors).

        Once the capturing forward lets go of its tensors, their pool memory goes to the graphs
        captured after it (smaller sizes, later pieces). That is safe because a step replays
        one size only and consumes its output before the next step: what a graph of one size
        writes there never has to survive a replay of another. Kept strongly, every piece's
        output would hold memory for every capture size.
        """
        return tree_map_only(torch.Tensor, non_owning_alias, output)

    def memory_in_use(self) -> int:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # cached free blocks would hide the pool's new segments
        free, total = torch.cuda.mem_get_info()
        return total - free


def non_owning_alias(t: torch.Tensor) -> torch.Tensor:
    """A tensor over t's memory that does not keep it allocated (no deleter)."""
    storage = torch._C._construct_storage_from_data_pointer(
        t.untyped_storage().data_ptr(), t.device, t.untyped_storage().nbytes()
    )
    alias = torch.empty(0, dtype=t.dtype, device=t.device)
    return alias.set_(storage, t.storage_offset(), t.size(), t.stride())


class _Replay(enum.Enum):
    SKIP = 0  # views and allocations: the captured tensor already is the result
    MUTATE = 1  # in-place / out= ops: re-run, they write the captured tensors
    COPY_OUT = 2  # functional ops: re-run, copy the result into the captured output


_NO_CAPTURE = {"_local_scalar_dense", "nonzero", "masked_select", "item"}
_ALLOCATIONS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}


@dataclass
class _Op:
    func: torch._ops.OpOverload
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    outputs: list[torch.Tensor]
    replay: _Replay


class RecordedGraph:
    def __init__(self) -> None:
        self.ops: list[_Op] = []

    def replay(self) -> None:
        for op in self.ops:
            if op.replay is _Replay.SKIP:
                continue
            result = op.func(*op.args, **op.kwargs)
            if op.replay is _Replay.COPY_OUT:
                fresh, _ = tree_flatten(result)
                for dst, src in zip(op.outputs, fresh):
                    dst.copy_(src)


def _replay_kind(
    func: torch._ops.OpOverload, args: tuple[Any, ...], outputs: list[torch.Tensor]
) -> _Replay:
    name = func._schema.name.split("::")[-1]
    if name in _ALLOCATIONS:
        return _Replay.SKIP
    aliases = [r.alias_info for r in func._schema.returns if r.alias_info is not None]
    if func._schema.is_mutable:
        return _Replay.MUTATE
    if aliases:
        # Tensor(a) means "may alias": contiguous / reshape / to (seen undecomposed under
        # inference_mode) return a copy when they must; a copy has to be re-run on replay
        inputs = {
            t.untyped_storage().data_ptr()
            for t in tree_flatten(args)[0]
            if isinstance(t, torch.Tensor)
        }
        if all(o.untyped_storage().data_ptr() in inputs for o in outputs):
            return _Replay.SKIP
    return _Replay.COPY_OUT


class _RecordMode(TorchDispatchMode):
    def __init__(self, graph: RecordedGraph) -> None:
        super().__init__()
        self.graph = graph

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace not in ("aten", "prims") and func._schema.name in OPDEFS:
            # a Python custom op: record what its body issues, as a CUDA graph would
            with self:
                return OPDEFS[func._schema.name]._init_fn(*args, **kwargs)
        if func._schema.name.split("::")[-1] in _NO_CAPTURE:
            raise RuntimeError(
                f"{func} reads device data on the host; not allowed inside graph capture"
            )
        out = func(*args, **kwargs)
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        self.graph.ops.append(_Op(func, args, kwargs, outputs, _replay_kind(func, args, outputs)))
        return out


class RecorderGraphBackend(GraphBackend):
    def capture(self, fn: Callable[[], Any]) -> tuple[Any, Any]:
        graph = RecordedGraph()
        with _RecordMode(graph):
            out = fn()
        return graph, out

    def replay(self, graph: RecordedGraph) -> None:
        graph.replay()


def make_graph_backend(device: torch.device) -> GraphBackend:
    return CudaGraphBackend() if device.type == "cuda" else RecorderGraphBackend()
