"""Graph-mode counters, read by the engine's stats (and /metrics): what each step really ran."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from vgraph.cudagraph.dispatcher import EagerReason
from vgraph.cudagraph.modes import CUDAGraphMode


@dataclass
class GraphCounters:
    steps: Counter[str] = field(default_factory=Counter)  # runtime mode name -> steps
    eager_fallbacks: Counter[str] = field(default_factory=Counter)  # EagerReason value -> steps
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

    def as_dict(self) -> dict[str, float]:
        out: dict[str, float] = {
            f"steps_{m.name}": float(self.steps[m.name])
            for m in (CUDAGraphMode.NONE, CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL)
        }
        for reason in EagerReason:
            out[f"eager_fallback_{reason.value}"] = float(self.eager_fallbacks[reason.value])
        out["padded_tokens"] = float(self.padded_tokens)
        out["num_graphs"] = float(self.num_graphs)
        out["capture_seconds"] = self.capture_seconds
        out["graph_memory_bytes"] = float(self.graph_memory_bytes)
        return out
