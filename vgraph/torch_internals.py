"""Every private torch API vgraph uses, in one place: a torch upgrade touches this file only.

Each wrapper says what it wraps and why vgraph needs it. Nothing else in vgraph may import from
`torch._C`, `torch._library`, `torch._dynamo`, `torch._inductor`, `torch.utils._python_dispatch`
or `torch.utils._pytree`, nor read an op's `_schema` or a custom op's body. (One exception, on
purpose: vgraph/config imports nothing from vgraph, so its Triton and Dynamo availability probes
in config/compilation.py stay where they are.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._library.custom_ops import OPDEFS
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode
from torch.utils._pytree import tree_flatten, tree_map_only

__all__ = [
    "OpOverload",
    "OpOverloadPacket",
    "TorchDispatchMode",
    "compile_fx",
    "current_dispatch_mode",
    "custom_op_body",
    "dispatch_has_kernel",
    "inductor_cache_counts",
    "mark_dynamic",
    "op_name",
    "op_schema",
    "point_inductor_cache_here",
    "storage_from_data_pointer",
    "tree_flatten",
    "tree_map_only",
]

# The classes of `torch.ops.ns.name` (packet) and `torch.ops.ns.name.overload` (overload).
OpOverload = torch._ops.OpOverload
OpOverloadPacket = torch._ops.OpOverloadPacket


def op_schema(op: OpOverload) -> torch.FunctionSchema:
    """An op overload's schema (name, arguments, alias info): how the recorder and the splitter
    tell views, in-place ops and written arguments apart."""
    return op._schema


def op_name(target: object) -> str | None:
    """'ns::name' of a torch.ops target (packet or overload); None for anything else."""
    if isinstance(target, OpOverloadPacket):
        return target._qualified_op_name
    if isinstance(target, OpOverload):
        return op_schema(target).name
    return None


def custom_op_body(name: str) -> Callable[..., Any] | None:
    """The Python function a `torch.library.custom_op` named 'ns::name' was made from, or None
    for any other op.

    vgraph calls it directly in two places: the piecewise backend's eager attention between
    pieces (the dispatcher round trip of a Python custom op costs 20-40 us, more than a decode
    step's attention kernels), and the CPU recorder, which records what the body issues as a
    CUDA graph would record its kernels.
    """
    opdef = OPDEFS.get(name)
    return None if opdef is None else opdef._init_fn


def storage_from_data_pointer(ptr: int, device: torch.device, nbytes: int) -> torch.UntypedStorage:
    """A storage over memory at ptr that does not own it (no deleter): the non-owning aliases a
    CUDA graph wrapper keeps of its outputs (as vLLM's weak_ref_tensors)."""
    return torch._C._construct_storage_from_data_pointer(ptr, device, nbytes)


def dispatch_has_kernel(op: str, dispatch_key: str | None = None) -> bool:
    """Whether op ('ns::name') is registered, and with dispatch_key whether it has a kernel for
    that key (e.g. 'CUDA'): how vgraph tells a CUDA build of vgraph._C from a CPU-only one."""
    if not torch._C._dispatch_has_kernel(op):
        return False
    return dispatch_key is None or torch._C._dispatch_has_kernel_for_dispatch_key(op, dispatch_key)


def current_dispatch_mode() -> TorchDispatchMode | None:
    """The innermost TorchDispatchMode in effect (the CPU recorder while it captures), or None."""
    return _get_current_dispatch_mode()


def mark_dynamic(t: torch.Tensor, dim: int) -> None:
    """Tell Dynamo dim of t is symbolic (the token dimension of the traced model)."""
    torch._dynamo.mark_dynamic(t, dim)


def compile_fx(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Inductor's compiler for one FX graph (a piece of the split model)."""
    from torch._inductor.compile_fx import compile_fx as _compile_fx

    return _compile_fx(gm, example_inputs)


def inductor_cache_counts() -> tuple[int, int]:
    """(hits, misses) of Inductor's FX graph cache so far in this process."""
    from torch._dynamo.utils import counters

    c = counters["inductor"]
    return c["fxgraph_cache_hit"], c["fxgraph_cache_miss"]


def point_inductor_cache_here() -> None:
    """Turn Inductor's FX graph cache on and drop its in-memory caches, so that the folder in
    TORCHINDUCTOR_CACHE_DIR (set by the caller) is the one used from now on."""
    from torch._inductor import config as inductor_config

    inductor_config.fx_graph_cache = True
    try:
        from torch._inductor.utils import clear_caches
    except ImportError:  # older torch
        return
    clear_caches()
