"""Attention backend registry: names users may pass and the default per device."""

from __future__ import annotations

import importlib

import torch

from vgraph.attention.backend import AttentionBackend

_BACKENDS = {
    "torch": "vgraph.attention.torch_backend:TorchAttentionBackend",
}


def backend_names() -> list[str]:
    return sorted(_BACKENDS)


def get_backend_cls(name: str) -> type[AttentionBackend]:
    module, _, attr = _BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def resolve_backend_name(name: str, device: torch.device) -> str:
    """Map "auto" to the best available backend; reject unknown or unusable names."""
    if name == "auto":
        return "torch"
    if name not in _BACKENDS:
        raise ValueError(
            f"attention_backend={name!r} is not allowed; use 'auto' or one of {backend_names()}"
        )
    why_not = get_backend_cls(name).is_available(device)
    if why_not is not None:
        raise ValueError(f"attention_backend={name!r} is not usable on {device.type}: {why_not}")
    return name
