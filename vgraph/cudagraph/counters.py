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
# EagerReason values (a test ties them)
EAGER_REASONS = ("above_max_size", "cascade", "unsupported", "prompt_logprobs")
# /metrics histogram edges for decode batch sizes: every size to 32, then the default capture
# list's steps (8 to 256, 16 to 512), so each default capture size is an edge
BATCH_SIZE_BUCKETS = tuple(range(1, 33)) + tuple(range(40, 257, 8)) + tuple(range(272, 513, 16))


def histogram_buckets(counts: dict[int, int]) -> list[tuple[str, int]]:
    """Per-size counts -> Prometheus cumulative buckets (le, count) over BATCH_SIZE_BUCKETS."""
    out, total = [], 0
    ordered = sorted(counts.items())
    i = 0
    for edge in BATCH_SIZE_BUCKETS:
        while i < len(ordered) and ordered[i][0] <= edge:
            total += ordered[i][1]
            i += 1
        out.append((str(edge), total))
    out.append(("+Inf", sum(counts.values())))
    return out


def _zeros(names: tuple[str, ...]) -> dict[str, int]:
    return dict.fromkeys(names, 0)


class GraphStats(msgspec.Struct, array_like=True):
    # steps per runtime mode name (NONE, PIECEWISE, FULL)
    steps: dict[str, int] = msgspec.field(default_factory=lambda: _zeros(RUNTIME_MODE_NAMES))
    # steps run eagerly although the mode has graphs, per EagerReason value; "cascade" counts
    # cascade attention steps kept off a FULL graph (they ran PIECEWISE, or NONE without pieces)
    eager_fallbacks: dict[str, int] = msgspec.field(default_factory=lambda: _zeros(EAGER_REASONS))
    padded_tokens: int = 0  # pad tokens added to reach capture sizes, summed over steps
    num_graphs: int = 0
    capture_seconds: float = 0.0
    graph_memory_bytes: int = 0
    # uniform decode steps per batch size (requests), and per size they ran at (padded)
    decode_batch_sizes: dict[int, int] = msgspec.field(default_factory=dict)
    padded_decode_batch_sizes: dict[int, int] = msgspec.field(default_factory=dict)
    # device memory each capture size's graphs added (num_tokens -> bytes); captured largest
    # first into one pool, so the pool's activations land on the largest size
    graph_memory_bytes_per_size: dict[int, int] = msgspec.field(default_factory=dict)

    def record_step(
        self,
        mode: CUDAGraphMode,
        why_eager: EagerReason | None,
        num_tokens: int,
        num_tokens_padded: int,
        uniform_decode: bool,
    ) -> None:
        self.steps[mode.name] += 1
        if why_eager is not None:
            self.eager_fallbacks[why_eager.value] += 1
        self.padded_tokens += num_tokens_padded - num_tokens
        if uniform_decode:
            sizes, padded = self.decode_batch_sizes, self.padded_decode_batch_sizes
            sizes[num_tokens] = sizes.get(num_tokens, 0) + 1
            padded[num_tokens_padded] = padded.get(num_tokens_padded, 0) + 1

    def snapshot(self) -> GraphStats:
        """A copy that later steps do not change (the in-process client shares objects)."""
        return GraphStats(
            dict(self.steps),
            dict(self.eager_fallbacks),
            self.padded_tokens,
            self.num_graphs,
            self.capture_seconds,
            self.graph_memory_bytes,
            dict(self.decode_batch_sizes),
            dict(self.padded_decode_batch_sizes),
            dict(self.graph_memory_bytes_per_size),
        )
