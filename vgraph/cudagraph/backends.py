"""Graph backends behind one interface: CUDA graphs here, the CPU recorder in recorder.py.

The interface states what a backend can capture (`sees_compiled_kernels`), so compilation code
asks it for a backend fit for compiled code (`for_compiled_code()`) instead of testing its class.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import torch

from vgraph.torch_internals import storage_from_data_pointer, tree_map_only


class GraphBackend(ABC):
    """Capture a callable once, replay it many times; outputs live at fixed addresses."""

    # whether capture sees kernels that bypass the ATen dispatcher (Inductor's compiled code)
    sees_compiled_kernels: ClassVar[bool]
    # whether eager runs must precede a capture: on CUDA they settle lazy state (library
    # handles, workspaces, autotuning) that must not be captured; a backend whose capture is an
    # ordinary eager run needs none
    warmup_before_capture: ClassVar[bool] = True

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

    def for_compiled_code(self) -> GraphBackend:
        """The backend to capture compiled (Inductor) code with: self when it sees such
        kernels; a backend that can only see ATen ops returns a stand-in that can."""
        assert self.sees_compiled_kernels, f"{type(self).__name__} must override this"
        return self


class CudaGraphBackend(GraphBackend):
    """torch.cuda.CUDAGraph; every graph of a runner shares one memory pool."""

    sees_compiled_kernels = True  # a CUDA graph records every kernel launched, Triton's too

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
    storage = storage_from_data_pointer(
        t.untyped_storage().data_ptr(), t.device, t.untyped_storage().nbytes()
    )
    alias = torch.empty(0, dtype=t.dtype, device=t.device)
    return alias.set_(storage, t.storage_offset(), t.size(), t.stride())


def make_graph_backend(device: torch.device) -> GraphBackend:
    if device.type == "cuda":
        return CudaGraphBackend()
    from vgraph.cudagraph.recorder import RecorderGraphBackend  # it imports this module

    return RecorderGraphBackend()
