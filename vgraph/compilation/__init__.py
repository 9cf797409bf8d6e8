"""Piecewise compilation: a torch.compile backend that splits the model at the attention op."""

from __future__ import annotations

from typing import Any


def piecewise_available(compilation_config: Any) -> bool:
    """Whether PIECEWISE graphs can be built: needs splitting ops and the piecewise backend."""
    return False
