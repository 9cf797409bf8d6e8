"""The graph-mode vocabulary shared by config, runner and attention backends: CUDAGraphMode and
AttentionCGSupport. A leaf module: it imports nothing from vgraph (config is the ground floor).

A mode is a pair (decode half, mixed half) of runtime modes, each NONE, PIECEWISE or FULL:
    NONE               (NONE, NONE)
    PIECEWISE          (PIECEWISE, PIECEWISE)
    FULL               (FULL, FULL)
    FULL_DECODE_ONLY   (FULL, NONE)
    FULL_AND_PIECEWISE (FULL, PIECEWISE)
Runtime modes (what one step runs with) are only NONE, PIECEWISE and FULL.
"""

from __future__ import annotations

import enum


class CUDAGraphMode(enum.Enum):
    NONE = 0
    PIECEWISE = 1
    FULL = 2
    FULL_DECODE_ONLY = (FULL, NONE)
    FULL_AND_PIECEWISE = (FULL, PIECEWISE)

    @classmethod
    def parse(cls, name: object) -> CUDAGraphMode:
        if isinstance(name, CUDAGraphMode):
            return name
        if isinstance(name, str) and name.upper() in cls.__members__:
            return cls[name.upper()]
        raise ValueError(
            f"cudagraph_mode={name!r} is not allowed; use one of {list(cls.__members__)} "
            f"(case-insensitive)"
        )

    def decode_mode(self) -> CUDAGraphMode:
        """Runtime mode for uniform-decode steps."""
        return CUDAGraphMode(self.value[0]) if isinstance(self.value, tuple) else self

    def mixed_mode(self) -> CUDAGraphMode:
        """Runtime mode for mixed and prefill steps."""
        return CUDAGraphMode(self.value[1]) if isinstance(self.value, tuple) else self

    def has_mode(self, runtime: CUDAGraphMode) -> bool:
        return runtime in (self.decode_mode(), self.mixed_mode())

    def needs_piecewise(self) -> bool:
        return self.has_mode(CUDAGraphMode.PIECEWISE)

    def has_full(self) -> bool:
        return self.has_mode(CUDAGraphMode.FULL)


RUNTIME_MODES = (CUDAGraphMode.NONE, CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL)


class AttentionCGSupport(enum.IntEnum):
    """How much of a step an attention backend can run inside a captured CUDA graph."""

    NEVER = 0
    UNIFORM_SINGLE_TOKEN_DECODE = 1  # only batches where every request has one query token
    ALWAYS = 2  # any batch, mixed prefill + decode included
