"""Attention backend registry: names users may pass and the default per device.

Importing it loads no torch (`vgraph --help` lists backend_names()); a backend's module loads
when it is resolved.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from vgraph.attention.backend import AttentionBackend

logger = logging.getLogger(__name__)

_BACKENDS = {
    "torch": "vgraph.attention.torch_backend:TorchAttentionBackend",
    "csrc": "vgraph.attention.csrc_backend:CsrcAttentionBackend",
    "flashinfer": "vgraph.attention.flashinfer_backend:FlashInferAttentionBackend",
}
# "auto" on CUDA: the first usable of these (docs/architecture.md, "Attention backends", gives
# the measurements behind the order)
_CUDA_PREFERENCE = ("csrc", "flashinfer")


def backend_names() -> list[str]:
    return sorted(_BACKENDS)


def get_backend_cls(name: str) -> type[AttentionBackend]:
    module, _, attr = _BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def resolve_backend_name(name: str, device: torch.device, head_dim: int | None = None) -> str:
    """Map "auto" to the best available backend; reject unknown or unusable names.

    auto: on CUDA csrc when built (full graphs of any step, as fast or faster at the shipped
    models' shapes), else flashinfer when installed, else torch; on the CPU torch, the readable
    reference.
    """
    if name == "auto":
        if device.type == "cuda":
            reasons = []
            for candidate in _CUDA_PREFERENCE:
                why_not = get_backend_cls(candidate).is_available(device, head_dim)
                if why_not is None:
                    return candidate
                reasons.append(f"{candidate}: {why_not}")
            logger.warning("no fast backend is usable (%s); using torch", "; ".join(reasons))
        return "torch"
    if name not in _BACKENDS:
        raise ValueError(
            f"attention_backend={name!r} is not allowed; use 'auto' or one of {backend_names()}"
        )
    why_not = get_backend_cls(name).is_available(device, head_dim)
    if why_not is not None:
        raise ValueError(f"attention_backend={name!r} is not usable on {device.type}: {why_not}")
    return name
