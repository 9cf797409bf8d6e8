"""Small helpers with no vgraph imports, shared by every layer of the package."""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """Ceiling of a / b for positive b (blocks needed for a tokens, and the like)."""
    return -(-a // b)
