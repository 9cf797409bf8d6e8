"""CUDAGraphWrapper: captures a callable per batch descriptor, then replays it.

Bound to one runtime mode (FULL around the whole model, PIECEWISE around each compiled piece).
When the forward context's runtime mode is not its own it just calls through, so wrappers nest
safely. Capture happens only while the runner's capture phase says so; a key never captured at
replay time is a bug in the dispatcher and raises.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vgraph.config.modes import CUDAGraphMode
from vgraph.cudagraph.backends import GraphBackend
from vgraph.cudagraph.dispatcher import BatchDescriptor
from vgraph.forward_context import get_forward_context


@dataclass
class _Entry:
    graph: Any
    output: Any


class CUDAGraphWrapper:
    def __init__(
        self, runnable: Callable[..., Any], runtime_mode: CUDAGraphMode, backend: GraphBackend
    ) -> None:
        assert runtime_mode in (CUDAGraphMode.FULL, CUDAGraphMode.PIECEWISE)
        self.runnable = runnable
        self.runtime_mode = runtime_mode
        self.backend = backend
        self.entries: dict[BatchDescriptor, _Entry] = {}

    def __getattr__(self, name: str) -> Any:  # the model's own methods (compute_logits, ...)
        return getattr(self.__dict__["runnable"], name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        ctx = get_forward_context()
        if ctx.runtime_mode is not self.runtime_mode:
            return self.runnable(*args, **kwargs)
        replayed, output = self.replay(ctx.batch_descriptor)
        if replayed:
            return output
        return self.capture(ctx.batch_descriptor, ctx.capturing, args, kwargs)

    def replay(self, key: BatchDescriptor) -> tuple[bool, Any]:
        """-> (True, output) after replaying key's graph; (False, None) when none was captured."""
        entry = self.entries.get(key)
        if entry is None:
            return False, None
        self.backend.replay(entry.graph)
        return True, entry.output

    def capture(
        self, key: BatchDescriptor, capturing: bool, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Capture key's graph (only while the runner's capture phase says so)."""
        if not capturing:
            raise RuntimeError(f"no {self.runtime_mode.name} graph was captured for {key}")
        graph, output = self.backend.capture(lambda: self.runnable(*args, **kwargs))
        self.entries[key] = _Entry(graph, self.backend.keep_output(output))
        return output  # the capturing forward holds the real tensors until it ends
