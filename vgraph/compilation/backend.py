"""PiecewiseBackend: the torch.compile backend that turns the traced model into captured pieces.

Given Dynamo's FX graph (dynamic in the token dimension) it:
  1. splits it at the splitting ops (split.py), keeping the original op order;
  2. compiles each non-splitting piece with Inductor when `use_inductor` (symbolic shapes, so one
     compiled piece serves every token count), else runs the piece's FX code as it is;
  3. wraps each non-splitting piece in a PiecewisePiece (graph per capture size, shared pool);
  4. makes each splitting op a plain call: a Python custom op runs its body directly, since its
     dispatcher round trip (20-40 us) costs more than a decode step's attention kernels;
  5. returns (a weak handle to) the split module: pieces and eager splitting ops called in the
     original order.
It must not decide which steps replay: the dispatcher does, through the forward context.
"""

from __future__ import annotations

import hashlib
import logging
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from vgraph.compilation.piece import PiecewisePiece, debug_graphs
from vgraph.compilation.split import SplitItem, split_graph
from vgraph.cudagraph.backends import GraphBackend
from vgraph.torch_internals import compile_fx, custom_op_body, op_name

logger = logging.getLogger(__name__)


class PiecewiseBackend:
    def __init__(
        self,
        splitting_ops: Sequence[str],
        use_inductor: bool,
        graph_backend: GraphBackend,
    ) -> None:
        self.splitting_ops = tuple(splitting_ops)
        self.use_inductor = use_inductor
        self.graph_backend = graph_backend
        # filled by the one call Dynamo makes
        self.split_gm: torch.fx.GraphModule | None = None
        self.items: list[SplitItem] = []
        self.pieces: list[PiecewisePiece] = []
        self.inductor_seconds = 0.0
        self.missing_ops: list[str] = []  # splitting ops that do not occur in the traced model

    def __call__(
        self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
    ) -> Callable[..., Any]:
        assert self.split_gm is None, "the model was traced twice (a Dynamo guard failed?)"
        split_gm, items, found = split_graph(gm, self.splitting_ops)
        # an op that is not in the model leaves attention inside the captured pieces, which
        # then replay stale sequence lengths: compile_piecewise turns this into a ValueError
        # (raised here, Dynamo would wrap it)
        self.missing_ops = sorted(set(self.splitting_ops) - found)
        debug = debug_graphs()
        # Dynamo's fake value of every node, by name: the example inputs of each piece
        fakes = {n.name: n.meta.get("example_value") for n in gm.graph.nodes}
        t0 = time.perf_counter()
        for item in items:
            if item.is_splitting:
                split_gm.__dict__[item.name] = direct_call(item.module)
                continue
            runnable: Callable[..., Any] = item.module
            graph_backend = self.graph_backend
            if self.use_inductor:
                runnable = compile_with_inductor(item.module, fakes)
                graph_backend = graph_backend.for_compiled_code()
            piece = PiecewisePiece(item.name, runnable, graph_backend, item.eager_inputs, debug)
            split_gm.__dict__[item.name] = piece  # instance attribute: the forward finds it first
            self.pieces.append(piece)
        self.inductor_seconds = time.perf_counter() - t0 if self.use_inductor else 0.0
        self.split_gm, self.items = split_gm, items
        # Dynamo keeps what a backend returns alive for as long as the process (through guards
        # on global objects), so it gets a weak handle: the pieces and graphs die with the engine
        ref = weakref.ref(split_gm)
        return lambda *args: ref()(*args)

    @property
    def num_pieces(self) -> int:
        """Captured (non-splitting) pieces."""
        return len(self.pieces)

    def graph_hashes(self) -> list[str]:
        """A hash of each submodule's code, in order: what the compile cache's manifest records."""
        return [hashlib.sha256(item.module.code.encode()).hexdigest()[:16] for item in self.items]

    def describe(self) -> str:
        return " | ".join(
            f"{'eager ' if i.is_splitting else ''}{i.name} ({i.num_ops} ops)" for i in self.items
        )


def direct_call(module: torch.fx.GraphModule) -> Callable[..., Any]:
    """module's forward (skipping nn.Module's call machinery) with each Python custom op in it
    replaced by the op's Python body: what the op would run, without the dispatcher."""
    for node in module.graph.nodes:
        name = op_name(node.target) if node.op == "call_function" else None
        body = custom_op_body(name) if name is not None else None
        if body is not None:
            node.target = body
    module.recompile()
    return module.forward


def compile_with_inductor(piece: torch.fx.GraphModule, fakes: dict[str, Any]) -> Callable[..., Any]:
    """Inductor on one piece, for symbolic token counts: its inputs are Dynamo's fake values
    (shape [s0, ...]), so the code serves every size. split_module copies them onto the
    piece's placeholders; older torch does not, so fall back to the original node's."""
    example_inputs = []
    for node in piece.graph.nodes:
        if node.op != "placeholder":
            continue
        value = node.meta.get("example_value", fakes.get(node.name))
        assert value is not None, f"piece input {node.name} has no example value"
        example_inputs.append(value)
    return compile_fx(piece, example_inputs)
