"""The CPU graph backend: a recorder that freezes what a CUDA graph freezes, in the memory one uses.

Capture runs the callable under a TorchDispatchMode that records every ATen op with the exact
tensors it touched; replay re-issues that op list against the same tensors. Like a CUDA graph it
freezes shapes, addresses and every Python-side value of the capture run: a runner that forgets
to copy new inputs into its static buffers, or bakes a length into a slice, gets stale results on
the CPU too. Python custom ops (the attention op) are recorded through, so what their Python body
decided at capture is frozen as well; the collectives (vgraph::all_reduce, all_gather) are the
exception, recorded as one op each (`record_as_one_op`). It exists for correctness, not speed.

Memory, as a CUDA graph pool (one pool per backend, shared by all its graphs):
  - inputs (tensors that existed before the capture: weights, static buffers, the KV cache) stay
    where they are;
  - intermediates (tensors made inside the capture that are not outputs) move into one scratch
    buffer shared by every graph, packed by lifetime within a graph: no two graphs ever run at
    the same time, and an intermediate is dead outside its own graph's replay;
  - outputs move into pool buffers that go back to the pool once the capturing forward lets go
    of them (the wrapper keeps only aliases), so later captures (smaller sizes, later pieces)
    reuse them, as CUDA's pool memory is reused.
So a backend holds about one forward's outputs plus the largest graph's live intermediates, not
every tensor of every capture.
"""

from __future__ import annotations

import enum
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from vgraph.cudagraph.backends import GraphBackend
from vgraph.torch_internals import (
    OpOverload,
    TorchDispatchMode,
    custom_op_body,
    op_schema,
    tree_map_only,
)

_ALIGN = 64  # bytes; every relocated storage starts at a multiple of this


class _Replay(enum.Enum):
    SKIP = 0  # views and allocations: the captured tensor already is the result
    MUTATE = 1  # in-place / out= ops (and kernels such as vgraph_C's): re-run on the tensors
    COPY_OUT = 2  # functional ops: re-run, copy the result into the captured output


_NO_CAPTURE = {"_local_scalar_dense", "nonzero", "masked_select", "item"}
_RECORD_WHOLE: set[str] = set()  # Python custom ops recorded as one op (the collectives)


def record_as_one_op(*names: str) -> None:
    """Record these Python custom ops ('ns::name') as one op each instead of through their
    bodies: a collective's body calls gloo outside the dispatcher, so only the op itself can be
    re-issued on replay (as a CUDA graph re-issues the captured NCCL kernel)."""
    _RECORD_WHOLE.update(names)


_ALLOCATIONS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}


@dataclass
class _Op:
    func: OpOverload
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
                for dst, src in zip(op.outputs, _tensors(result)):
                    dst.copy_(src)


def _replay_kind(func: OpOverload, args: tuple[Any, ...], outputs: list[torch.Tensor]) -> _Replay:
    schema = op_schema(func)
    if schema.name.split("::")[-1] in _ALLOCATIONS:
        return _Replay.SKIP
    if schema.is_mutable:
        return _Replay.MUTATE
    if any(r.alias_info is not None for r in schema.returns):
        # Tensor(a) means "may alias": contiguous / reshape / to (seen undecomposed under
        # inference_mode) return a copy when they must; a copy has to be re-run on replay
        inputs = {_key(t) for t in _tensors(args)}
        if all(_key(o) in inputs for o in outputs):
            return _Replay.SKIP
    return _Replay.COPY_OUT


class _RecordMode(TorchDispatchMode):
    def __init__(self, graph: RecordedGraph) -> None:
        super().__init__()
        self.graph = graph

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = op_schema(func).name
        body = None
        if func.namespace not in ("aten", "prims") and name not in _RECORD_WHOLE:
            body = custom_op_body(name)
        if body is not None:
            # a Python custom op: record what its body issues, as a CUDA graph would
            with self:
                return body(*args, **kwargs)
        if name.split("::")[-1] in _NO_CAPTURE:
            raise RuntimeError(
                f"{func} reads device data on the host; not allowed inside graph capture"
            )
        out = func(*args, **kwargs)
        outputs = _tensors(out)
        self.graph.ops.append(_Op(func, args, kwargs, outputs, _replay_kind(func, args, outputs)))
        return out


class RecorderPool:
    """The memory a recorder backend's graphs share (see the module docstring)."""

    def __init__(self) -> None:
        self.scratch: torch.Tensor | None = None  # [nbytes] uint8, intermediates of any graph
        self.free: dict[int, torch.Tensor] = {}  # data_ptr -> buffer no forward holds
        self.buffers: dict[int, torch.Tensor] = {}  # data_ptr -> every output buffer made
        self.live: dict[int, int] = {}  # data_ptr -> aliases the capturing forward still holds

    def scratch_of(self, nbytes: int, device: torch.device) -> torch.Tensor:
        if self.scratch is None or self.scratch.numel() < nbytes:
            # graphs captured earlier keep the old buffer alive through their tensors
            self.scratch = torch.empty(nbytes, dtype=torch.uint8, device=device)
        return self.scratch

    def output_buffer(self, nbytes: int, device: torch.device) -> torch.Tensor:
        """The smallest free buffer that fits, else a new one; taken until released."""
        fits = [b for b in self.free.values() if b.numel() >= nbytes and b.device == device]
        if fits:
            buf = min(fits, key=torch.Tensor.numel)
            del self.free[buf.data_ptr()]
        else:
            buf = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=device)
            self.buffers[buf.data_ptr()] = buf
        self.live[buf.data_ptr()] = 0
        return buf

    def hand_out(self, out: Any, targets: dict[int, tuple[torch.Tensor, int]]) -> Any:
        """out as the capturing forward gets it: aliases of the pool buffers in targets that
        nothing else holds, so each buffer returns to the pool once the forward drops them."""
        handed = _relocate(out, targets, {})
        taken = {buf.data_ptr() for buf, _ in targets.values()}
        for t in _tensors(handed):
            ptr = _key(t)
            if ptr in taken:
                self.live[ptr] += 1
                weakref.finalize(t, self._release, ptr)
        return handed

    def _release(self, ptr: int) -> None:
        self.live[ptr] -= 1
        if self.live[ptr] == 0:
            self.free[ptr] = self.buffers[ptr]

    def take_outputs(
        self, out: Any, new: dict[int, torch.UntypedStorage]
    ) -> dict[int, tuple[torch.Tensor, int]]:
        """A pool buffer for each storage of out made in the capture, holding its bytes ->
        {storage key: (buffer, 0)}."""
        targets: dict[int, tuple[torch.Tensor, int]] = {}
        for t in _tensors(out):
            k = _key(t)
            if k in new and k not in targets:
                storage = new[k]
                buf = self.output_buffer(storage.nbytes(), t.device)
                buf[: storage.nbytes()].copy_(_bytes_of(storage))
                targets[k] = (buf, 0)
        return targets


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in value (nested tuples, lists, dicts), in order. A plain walk: pytree's
    generic one was a fifth of the CPU's capture time."""
    found: list[torch.Tensor] = []
    _collect(value, found)
    return found


def _collect(value: Any, found: list[torch.Tensor]) -> None:
    if isinstance(value, torch.Tensor):
        found.append(value)
    elif isinstance(value, (tuple, list)):
        for v in value:
            _collect(v, found)
    elif isinstance(value, dict):
        for v in value.values():
            _collect(v, found)


def _map_tensors(fn: Callable[[torch.Tensor], torch.Tensor], value: Any) -> Any:
    """value with fn applied to each tensor in it; containers are rebuilt (pytree's generic
    map only for tuple subclasses, e.g. named tuples, that hold tensors)."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    kind = type(value)
    if kind is tuple or kind is list:
        return kind(_map_tensors(fn, v) for v in value)
    if kind is dict:
        return {k: _map_tensors(fn, v) for k, v in value.items()}
    if isinstance(value, tuple) and _tensors(value):
        return tree_map_only(torch.Tensor, fn, value)
    return value


def _key(t: torch.Tensor) -> int:
    """Identifies t's storage (0 for storages without memory)."""
    return t.untyped_storage().data_ptr()


def _bytes_of(storage: torch.UntypedStorage) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


def _alias(t: torch.Tensor, buf: torch.Tensor, byte_offset: int) -> torch.Tensor:
    """A new tensor with t's geometry whose storage begins byte_offset into buf."""
    start = byte_offset + buf.storage_offset()  # buf is uint8: its offset is in bytes
    assert start % t.element_size() == 0
    alias = torch.empty(0, dtype=t.dtype, device=t.device)
    offset = start // t.element_size() + t.storage_offset()
    return alias.set_(buf.untyped_storage(), offset, t.size(), t.stride())


def _relocate(
    value: Any,
    targets: dict[int, tuple[torch.Tensor, int]],
    made: dict[int, tuple[torch.Tensor, torch.Tensor]],
) -> Any:
    """value with every tensor over a storage in targets replaced by an alias at its target;
    made (id of a tensor -> its alias) gives one alias per distinct tensor object."""

    def move(t: torch.Tensor) -> torch.Tensor:
        target = targets.get(_key(t))
        if target is None:
            return t
        if id(t) not in made:
            made[id(t)] = (t, _alias(t, *target))  # t kept: its id stays unique meanwhile
        return made[id(t)][1]

    return _map_tensors(move, value)


def _pack(lifetimes: dict[int, tuple[int, int, int]]) -> tuple[dict[int, int], int]:
    """Offsets for storages {key: (first op, last op, nbytes)} such that two storages alive at
    the same op never overlap -> (key -> byte offset, bytes needed). Greedy first fit."""
    offsets: dict[int, int] = {}
    active: list[tuple[int, int, int]] = []  # (offset, end, last op)
    top = 0
    for key, (first, last, nbytes) in sorted(lifetimes.items(), key=lambda kv: kv[1][0]):
        active = sorted(a for a in active if a[2] >= first)
        size = -(-nbytes // _ALIGN) * _ALIGN
        offset = 0
        for start, end, _ in active:
            if offset + size <= start:
                break
            offset = max(offset, end)
        offsets[key] = offset
        active.append((offset, offset + size, last))
        top = max(top, offset + size)
    return offsets, top


class RecorderGraphBackend(GraphBackend):
    sees_compiled_kernels = False  # it records ATen ops; Inductor's C++ kernels bypass them
    warmup_before_capture = False  # capture is an eager run with a recording dispatch mode

    def __init__(self) -> None:
        self.pool = RecorderPool()

    def capture(self, fn: Callable[[], Any]) -> tuple[Any, Any]:
        graph = RecordedGraph()
        with _RecordMode(graph):
            out = fn()
        return self._move_into_pool(graph, out)

    def replay(self, graph: RecordedGraph) -> None:
        graph.replay()

    def keep_output(self, output: Any) -> Any:
        """Fresh aliases: what the capturing forward got may die and free its pool buffers."""
        return _fresh_aliases(output)

    def for_compiled_code(self) -> GraphBackend:
        return OpaqueRecorderBackend(self.pool)

    def _move_into_pool(self, graph: RecordedGraph, out: Any) -> tuple[RecordedGraph, Any]:
        """Re-point the graph's tensors at pool memory -> (graph, what the capturing forward
        gets). The capture's own storages die with the objects the recorder drops here."""
        pool = self.pool
        inputs: set[int] = set(pool.buffers)  # earlier graphs' outputs feed this one
        new: dict[int, torch.UntypedStorage] = {}
        lifetimes: dict[int, list[int]] = {}  # key -> [first op, last op]
        for i, op in enumerate(graph.ops):
            for t in _tensors((op.args, op.kwargs)):
                k = _key(t)
                if k in new:
                    lifetimes[k][1] = i
                elif k:
                    inputs.add(k)
            for t in op.outputs:
                k = _key(t)
                if k and k not in inputs:
                    new.setdefault(k, t.untyped_storage())
                    lifetimes.setdefault(k, [i, i])[1] = i
        out_targets = pool.take_outputs(out, new)
        inner = {
            k: (first, last, new[k].nbytes())
            for k, (first, last) in lifetimes.items()
            if k not in out_targets
        }
        offsets, nbytes = _pack(inner)
        targets = dict(out_targets)
        if inner:
            scratch = pool.scratch_of(nbytes, next(iter(new.values())).device)
            targets.update((k, (scratch, off)) for k, off in offsets.items())
        # fresh aliases of earlier outputs, so this graph never holds what the forward holds
        targets.update((k, (pool.buffers[k], 0)) for k in inputs if k in pool.buffers)
        made: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        for op in graph.ops:
            op.args, op.kwargs = _relocate((op.args, op.kwargs), targets, made)
            op.outputs = _relocate(op.outputs, targets, made)
        return graph, pool.hand_out(out, out_targets)


class OpaqueRecorderBackend(GraphBackend):
    """The CPU recorder's stand-in for Inductor-compiled pieces.

    Inductor's C++ kernels bypass the ATen dispatcher, so the recorder would freeze only the
    extern calls (mm) and replay stale pointwise results. Instead the whole piece is one opaque
    op: capture runs it once and keeps the call with its inputs; replay runs it again on those
    captured inputs and copies into the captured outputs (pool buffers, shared as the
    recorder's are): frozen shapes and addresses, as a CUDA graph of the same kernels would give.
    """

    sees_compiled_kernels = True  # it never looks inside: the piece is one opaque call

    def __init__(self, pool: RecorderPool) -> None:
        self.pool = pool

    def capture(self, fn: Callable[[], Any]) -> tuple[Any, Any]:
        out = fn()
        new = {_key(t): t.untyped_storage() for t in _tensors(out) if _key(t)}
        targets = self.pool.take_outputs(out, new)
        return (fn, _relocate(out, targets, {})), self.pool.hand_out(out, targets)

    def replay(self, graph: tuple[Callable[[], Any], Any]) -> None:
        fn, out = graph
        for dst, src in zip(_tensors(out), _tensors(fn())):
            dst.copy_(src)

    def keep_output(self, output: Any) -> Any:
        return _fresh_aliases(output)


def _fresh_aliases(value: Any) -> Any:
    """New tensor objects over the same memory as value's."""
    return _map_tensors(lambda t: _alias(t, _bytes_of(t.untyped_storage()), 0), value)
