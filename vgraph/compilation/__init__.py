"""Piecewise compilation: a torch.compile backend that splits the model at the attention op.

split.py (FX graph -> pieces), backend.py (the torch.compile backend), piece.py (a captured piece
at run time), cache.py (compiled artifacts on disk), piecewise.py (compile_piecewise, called by
the model runner). This file stays import-light: vgraph/config imports it.
"""

from __future__ import annotations

from typing import Any


def piecewise_available(compilation_config: Any) -> bool:
    """Whether PIECEWISE graphs can be built: splitting ops are configured (None means the
    default, the attention op) and torch.compile (Dynamo) works in this Python."""
    ops = getattr(compilation_config, "splitting_ops", None)
    if ops is not None and len(ops) == 0:
        return False
    try:
        from torch._dynamo import is_dynamo_supported
    except ImportError:
        return False
    return bool(is_dynamo_supported())
