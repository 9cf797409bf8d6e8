"""BatchDescriptor and the dispatcher: which runtime mode and graph key each step uses.

The dispatcher is the single source of truth: the valid keys per runtime mode are decided once at
start-up from the resolved mode, the attention backend's support and the capture sizes; each step
asks `dispatch()` and the graph wrappers obey what it put in the forward context.
"""

from __future__ import annotations

import bisect
import enum
from typing import NamedTuple

from vgraph.config.modes import AttentionCGSupport, CUDAGraphMode


class BatchDescriptor(NamedTuple):
    """A graph key. num_tokens is padded to a capture size; PIECEWISE keys and relaxed FULL keys
    have num_reqs None and uniform False (they do not care how tokens split into requests)."""

    num_tokens: int
    num_reqs: int | None = None
    uniform: bool = False

    def relaxed(self) -> BatchDescriptor:
        return BatchDescriptor(self.num_tokens)


class EagerReason(enum.Enum):
    """Why a step ran eagerly although the mode has graphs."""

    ABOVE_MAX_SIZE = "above_max_size"
    CASCADE = "cascade"  # a cascade attention step would have run FULL: PIECEWISE or NONE
    UNSUPPORTED = "unsupported"  # the mode (or backend) has no graph for this kind of step
    PROMPT_LOGPROBS = "prompt_logprobs"  # a FULL graph returns last-token logits only


class CudagraphDispatcher:
    def __init__(
        self,
        mode: CUDAGraphMode,
        capture_sizes: list[int] | tuple[int, ...],
        support: AttentionCGSupport,
        max_num_reqs: int,
        piecewise_sizes: list[int] | tuple[int, ...] | None = None,
    ) -> None:
        """capture_sizes: token counts of FULL graphs; piecewise_sizes: of PIECEWISE graphs
        (None: the same list)."""
        self.mode = mode
        self.support = support
        self.max_num_reqs = max_num_reqs
        self.capture_sizes = sorted(capture_sizes)
        self.piecewise_sizes = sorted(capture_sizes if piecewise_sizes is None else piecewise_sizes)
        self.keys: dict[CUDAGraphMode, set[BatchDescriptor]] = {
            CUDAGraphMode.FULL: set(),
            CUDAGraphMode.PIECEWISE: set(),
        }
        if mode is CUDAGraphMode.NONE:
            return
        if mode.needs_piecewise():
            self.keys[CUDAGraphMode.PIECEWISE] = {BatchDescriptor(s) for s in self.piecewise_sizes}
        for size in self.capture_sizes:
            if mode.mixed_mode() is CUDAGraphMode.FULL and support is AttentionCGSupport.ALWAYS:
                self.keys[CUDAGraphMode.FULL].add(BatchDescriptor(size))
            if mode.decode_mode() is CUDAGraphMode.FULL and size <= max_num_reqs:
                self.keys[CUDAGraphMode.FULL].add(BatchDescriptor(size, size, True))

    def restricted(
        self,
        capture_sizes: list[int] | tuple[int, ...],
        piecewise_sizes: list[int] | tuple[int, ...] | None = None,
    ) -> CudagraphDispatcher:
        """A dispatcher over some of this one's sizes: it dispatches every step as an engine
        that captured only those would, and picks only keys captured here. Lets one engine that
        captured several capture lists' union time each list (`vgraph bench sweep`). ValueError
        names a key this dispatcher lacks."""
        sub = CudagraphDispatcher(
            self.mode, capture_sizes, self.support, self.max_num_reqs, piecewise_sizes
        )
        for mode, keys in sub.keys.items():
            missing = sorted(keys - self.keys[mode])
            if missing:
                raise ValueError(
                    f"capture sizes {list(capture_sizes)} (piecewise {piecewise_sizes}) need "
                    f"{mode.name} graphs {missing} that were not captured"
                )
        return sub

    def padded_size(self, num_tokens: int, sizes: list[int] | None = None) -> int | None:
        """Smallest size of `sizes` (default: the FULL capture sizes) >= num_tokens, or None
        above the largest."""
        sizes = self.capture_sizes if sizes is None else sizes
        i = bisect.bisect_left(sizes, num_tokens)
        return sizes[i] if i < len(sizes) else None

    def num_reqs_padded(self, key: BatchDescriptor) -> int:
        """Requests a graph of this key is captured with: a uniform key's own count, a relaxed
        key's most requests its tokens can hold. The one rule for capture and replay: a FULL
        replay pads the step's requests to it (the captured attention launch fixed the count);
        PIECEWISE steps run attention eagerly with their real requests."""
        return key.num_reqs or min(key.num_tokens, self.max_num_reqs)

    def dispatch(
        self, num_tokens: int, uniform_decode: bool, use_cascade: bool = False
    ) -> tuple[CUDAGraphMode, BatchDescriptor | None, EagerReason | None]:
        """-> (runtime mode, key, why not FULL / why eager). FULL (exact key, then relaxed) >
        PIECEWISE > NONE; each mode pads to its own list's smallest size that holds the step.
        A cascade step never runs FULL (its attention is not what the graph captured): it takes
        PIECEWISE where pieces exist, else NONE, with reason CASCADE where FULL was its key."""
        if self.mode is CUDAGraphMode.NONE:
            return CUDAGraphMode.NONE, None, None
        full = self.keys[CUDAGraphMode.FULL]
        padded = self.padded_size(num_tokens)
        cascade_left_full = False
        if padded is not None:
            relaxed = BatchDescriptor(padded)
            exact = BatchDescriptor(padded, padded, True) if uniform_decode else relaxed
            for key in (exact, relaxed):
                if key in full:
                    if not use_cascade:
                        return CUDAGraphMode.FULL, key, None
                    cascade_left_full = True
        padded_pw = self.padded_size(num_tokens, self.piecewise_sizes)
        why = EagerReason.CASCADE if cascade_left_full else None
        if (
            padded_pw is not None
            and BatchDescriptor(padded_pw) in self.keys[CUDAGraphMode.PIECEWISE]
        ):
            return CUDAGraphMode.PIECEWISE, BatchDescriptor(padded_pw), why
        if why is None:
            none_of = padded is None and padded_pw is None
            why = EagerReason.ABOVE_MAX_SIZE if none_of else EagerReason.UNSUPPORTED
        return CUDAGraphMode.NONE, None, why

    def capture_keys(self) -> list[tuple[CUDAGraphMode, BatchDescriptor]]:
        """Every key to capture: FULL first, each mode largest first."""
        out = []
        for mode in (CUDAGraphMode.FULL, CUDAGraphMode.PIECEWISE):
            keys = sorted(self.keys[mode], key=lambda k: (k.num_tokens, k.uniform), reverse=True)
            out.extend((mode, k) for k in keys)
        return out
