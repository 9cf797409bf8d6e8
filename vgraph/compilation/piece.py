"""PiecewisePiece: one captured piece at run time (a compiled piece + one graph per capture size).

A replayed piece reads its inputs at the addresses they had at capture. For the default split
that holds by construction: input_ids/positions are views of the runner's static buffers, the
weights never move, and every other input is an output of the previous captured piece (the
attention output buffer included: it is allocated inside the piece before the op). An input that
comes straight from an eager splitting op would be a fresh tensor each run, so such inputs are
copied into a static buffer per capture size before the graph runs. In debug mode
(VGRAPH_DEBUG_GRAPHS=1, or DEBUG logging) every replay checks the input addresses, as vLLM does.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import torch

from vgraph.config.modes import CUDAGraphMode
from vgraph.cudagraph.backends import GraphBackend
from vgraph.cudagraph.dispatcher import BatchDescriptor
from vgraph.cudagraph.wrapper import CUDAGraphWrapper
from vgraph.forward_context import get_forward_context

logger = logging.getLogger(__name__)


def debug_graphs() -> bool:
    return os.environ.get("VGRAPH_DEBUG_GRAPHS", "0") == "1" or logger.isEnabledFor(logging.DEBUG)


class PiecewisePiece:
    def __init__(
        self,
        name: str,
        runnable: Callable[..., Any],
        graph_backend: GraphBackend,
        eager_inputs: tuple[int, ...] = (),
        debug: bool = False,
    ) -> None:
        self.name = name
        self.runnable = runnable  # the piece: an FX GraphModule or its Inductor-compiled form
        self.graph = CUDAGraphWrapper(runnable, CUDAGraphMode.PIECEWISE, graph_backend)
        self.eager_inputs = eager_inputs
        self.debug = debug
        self.static_inputs: dict[BatchDescriptor, list[torch.Tensor]] = {}
        self.input_addresses: dict[BatchDescriptor, list[int]] = {}

    def __call__(self, *args: Any) -> Any:
        ctx = get_forward_context()
        if ctx.runtime_mode is not CUDAGraphMode.PIECEWISE:
            return self.runnable(*args)
        key = ctx.batch_descriptor
        if not (self.eager_inputs or self.debug):  # the default split: a plain replay
            replayed, output = self.graph.replay(key)
            return output if replayed else self.graph.capture(key, ctx.capturing, args, {})
        captured = key in self.graph.entries
        if self.eager_inputs:
            args = self._use_static_inputs(key, args)
        if self.debug:
            self._check_addresses(key, args, captured)
        return self.graph(*args)

    def _use_static_inputs(self, key: BatchDescriptor, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """Copy inputs made by eager ops into this key's static buffers (made at capture)."""
        static = self.static_inputs.get(key)
        if static is None:
            static = [args[i].clone() for i in self.eager_inputs]  # outside the capture
            self.static_inputs[key] = static
        else:
            for buf, i in zip(static, self.eager_inputs):
                buf.copy_(args[i])
        out = list(args)
        for buf, i in zip(static, self.eager_inputs):
            out[i] = buf
        return tuple(out)

    def _check_addresses(self, key: BatchDescriptor, args: tuple[Any, ...], captured: bool) -> None:
        addresses = [a.data_ptr() if isinstance(a, torch.Tensor) else None for a in args]
        if not captured:
            self.input_addresses[key] = addresses
            return
        expected = self.input_addresses.get(key)
        if expected is None:  # captured before debug mode was on
            return
        moved = [i for i, (a, b) in enumerate(zip(addresses, expected)) if a != b]
        if moved:
            raise AssertionError(
                f"{self.name} {key}: input(s) {moved} are not at their captured addresses; a "
                f"replayed graph would read stale memory"
            )
