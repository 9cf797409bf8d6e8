"""GraphStats: what each step really ran, counted by the model runner and sent to the frontend.

A msgspec Struct, so it travels inside SchedulerStats as typed fields (no string keys to parse
back by prefix); /metrics and the benchmarks read the fields. It imports no torch: the frontend
decodes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from vgraph.config.modes import CUDAGraphMode
    from vgraph.cudagraph.dispatcher import EagerReason

RUNTIME_MODE_NAMES = ("NONE", "PIECEWISE", "FULL")
EAGER_REASONS = ("above_max_size", "unsupported")  # EagerReason values (a test ties them)


def _zeros(names: tuple[str, ...]) -> dict[str, int]:
    return dict.fromkeys(names, 0)


class GraphStats(msgspec.Struct, array_like=True):
    # steps per runtime mode name (NONE, PIECEWISE, FULL)
    steps: dict[str, int] = msgspec.field(default_factory=lambda: _zeros(RUNTIME_MODE_NAMES))
    # steps run eagerly although the mode has graphs, per EagerReason value
    eager_fallbacks: dict[str, int] = msgspec.field(default_factory=lambda: _zeros(EAGER_REASONS))
    padded_tokens: int = 0  # pad tokens added to reach capture sizes, summed over steps
    num_graphs: int = 0
    capture_seconds: float = 0.0
    graph_memory_bytes: int = 0

    def record_step(
        self, mode: CUDAGraphMode, why_eager: EagerReason | None, num_padded: int
    ) -> None:
        self.steps[mode.name] += 1
        if why_eager is not None:
            self.eager_fallbacks[why_eager.value] += 1
        self.padded_tokens += num_padded

    def snapshot(self) -> GraphStats:
        """A copy that later steps do not change (the in-process client shares objects)."""
        return GraphStats(
            dict(self.steps),
            dict(self.eager_fallbacks),
            self.padded_tokens,
            self.num_graphs,
            self.capture_seconds,
            self.graph_memory_bytes,
        )
