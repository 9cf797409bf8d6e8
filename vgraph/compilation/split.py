"""Split a Dynamo FX graph at the splitting ops into pieces, keeping the original op order.

Every splitting op (by default the attention op `vgraph::unified_attention_with_output`) gets a
partition of its own; everything between two of them is one piece. For an N-layer decoder that is
N + 1 pieces with N attention calls between them:

    piece 0: embed, norm, qkv, rope, empty_like(q) -> attention 0 -> piece 1: o_proj, mlp, ... ->
    ... -> attention N-1 -> piece N: o_proj, mlp, final norm

The attention output buffer (`torch.empty_like(q)` in Attention.forward) is created before the op
in program order, so it lands in the piece before it: captured, hence at a fixed address.
This module only rewrites graphs; compiling and capturing the pieces is backend.py's job.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.fx
from torch.fx.passes.split_module import split_module

from vgraph.torch_internals import OpOverload, OpOverloadPacket, op_name, op_schema

_VIEW_METHODS = {
    "view",
    "reshape",
    "__getitem__",
    "narrow",
    "flatten",
    "unflatten",
    "transpose",
    "permute",
    "as_strided",
    "squeeze",
    "unsqueeze",
}


@dataclass
class SplitItem:
    """One submodule of the split graph, in execution order."""

    name: str  # attribute of the split module: "submod_<partition id>"
    index: int  # position in execution order
    is_splitting: bool  # a splitting op: runs eagerly, never captured
    module: torch.fx.GraphModule
    # positions of this piece's inputs that are outputs of a splitting op (fresh tensors each run)
    eager_inputs: tuple[int, ...] = field(default_factory=tuple)
    partition_id: int = 0
    # splitting ops only: partition ids that allocated the tensors the op writes into
    buffer_pids: list[int] = field(default_factory=list)

    @property
    def num_ops(self) -> int:
        return sum(
            n.op in ("call_function", "call_method", "call_module") for n in self.module.graph.nodes
        )


def _splitting_name(node: torch.fx.Node, splitting_ops: set[str]) -> str | None:
    if node.op != "call_function":
        return None
    name = op_name(node.target)
    if name is None:
        return None
    if name in splitting_ops:
        return name
    if isinstance(node.target, OpOverload):
        full = f"{name}.{node.target._overloadname}"
        if full in splitting_ops:
            return full
    return None


def split_graph(
    gm: torch.fx.GraphModule, splitting_ops: tuple[str, ...] | list[str]
) -> tuple[torch.fx.GraphModule, list[SplitItem], set[str]]:
    """-> (split module, its submodules in execution order, the splitting ops found)."""
    ops = set(splitting_ops)
    partition: dict[torch.fx.Node, int] = {}
    splitting_pids: set[int] = set()
    buffers: dict[int, list[int]] = {}  # splitting pid -> pids that allocated what it writes
    found: set[str] = set()
    pid = 0
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        name = _splitting_name(node, ops)
        if name is None:
            partition[node] = pid
            continue
        found.add(name)
        pid += 1
        partition[node] = pid
        splitting_pids.add(pid)
        buffers[pid] = [partition.get(base, -1) for base in _written_buffers(node)]
        pid += 1
    split_gm = split_module(gm, None, lambda n: partition[n], keep_original_order=True)

    items: list[SplitItem] = []
    from_splitting: dict[torch.fx.Node, bool] = {}  # split_gm node -> output of a splitting op
    for node in split_gm.graph.nodes:
        if node.op == "call_function" and node.args and node.args[0] in from_splitting:
            from_splitting[node] = from_splitting[node.args[0]]  # getitem of a tuple output
        if node.op != "call_module":
            continue
        assert not node.kwargs, node.kwargs
        pid = int(node.target.rsplit("_", 1)[1])
        eager = tuple(
            i
            for i, a in enumerate(node.args)
            if isinstance(a, torch.fx.Node) and from_splitting.get(a, False)
        )
        items.append(
            SplitItem(
                node.target,
                len(items),
                pid in splitting_pids,
                getattr(split_gm, node.target),
                eager,
                pid,
                buffers.get(pid, []),
            )
        )
        from_splitting[node] = pid in splitting_pids
    for item in items:
        bad = [p for p in item.buffer_pids if p in splitting_pids]
        if bad:  # the buffer would be a fresh tensor each run: no fixed address to capture
            raise RuntimeError(f"{item.name}: writes into a tensor made by splitting op(s) {bad}")
    return split_gm, items, found


def _written_buffers(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes that allocated each tensor argument the op writes into (through views);
    placeholders are graph inputs (static by the runner's contract) and are left out."""
    target = node.target
    if isinstance(target, OpOverloadPacket):
        target = getattr(target, target.overloads()[0])
    out = []
    for i, sarg in enumerate(op_schema(target).arguments):
        if sarg.alias_info is None or not sarg.alias_info.is_write:
            continue
        base = node.args[i] if i < len(node.args) else node.kwargs.get(sarg.name)
        while isinstance(base, torch.fx.Node) and _is_view(base):
            base = base.args[0]
        if isinstance(base, torch.fx.Node) and base.op != "placeholder":
            out.append(base)
    return out


def _is_view(node: torch.fx.Node) -> bool:
    if node.op == "call_method":
        return node.target in _VIEW_METHODS
    return node.op == "call_function" and getattr(node.target, "__name__", "") in _VIEW_METHODS
