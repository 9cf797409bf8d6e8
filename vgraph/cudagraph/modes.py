"""CUDAGraphMode and the start-up resolution of a requested mode against what is available.

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
import logging

from vgraph.attention.backend import AttentionCGSupport

logger = logging.getLogger(__name__)


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

    def is_runtime_mode(self) -> bool:
        return self in (CUDAGraphMode.NONE, CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL)


def resolve_cudagraph_mode(
    requested: CUDAGraphMode,
    backend_name: str,
    support: AttentionCGSupport,
    piecewise_available: bool,
) -> CUDAGraphMode:
    """The mode to run, given the backend's graph support and whether piecewise graphs exist.

    Each downgrade logs one WARNING naming the backend, its support level and the mode chosen.
    """
    mode = requested
    why = ""
    M = CUDAGraphMode
    if mode.decode_mode() is M.FULL and support is AttentionCGSupport.NEVER:
        mode = M.PIECEWISE if piecewise_available else M.NONE
        why = "it can't run inside any full graph"
    elif mode is M.FULL and support is not AttentionCGSupport.ALWAYS:
        mode = M.FULL_AND_PIECEWISE if piecewise_available else M.FULL_DECODE_ONLY
        why = "full graphs of mixed prefill+decode steps need support ALWAYS"
    elif mode.mixed_mode() is M.PIECEWISE and not piecewise_available:
        if mode is M.PIECEWISE:
            mode = M.NONE
        else:  # FULL_AND_PIECEWISE: mixed steps go full where the backend allows it
            mode = M.FULL if support is AttentionCGSupport.ALWAYS else M.FULL_DECODE_ONLY
        why = "piecewise compilation is not available (splitting_ops is empty)"
    if mode is not requested:
        logger.warning(
            "cudagraph_mode %s is not available with attention backend %r (support %s): %s; "
            "using %s",
            requested.name,
            backend_name,
            support.name,
            why,
            mode.name,
        )
    return mode
