"""vgraph: an LLM inference engine built around CUDA graph modes.

The public names are imported on first use, so `vgraph --help` and other light entry points
do not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vgraph.entrypoints.llm import LLM
    from vgraph.outputs import CompletionOutput, RequestOutput
    from vgraph.sampling_params import SamplingParams

__all__ = ["LLM", "CompletionOutput", "RequestOutput", "SamplingParams"]
__version__ = "0.1.0"

_SOURCES = {
    "LLM": "vgraph.entrypoints.llm",
    "CompletionOutput": "vgraph.outputs",
    "RequestOutput": "vgraph.outputs",
    "SamplingParams": "vgraph.sampling_params",
}


def __getattr__(name: str) -> Any:
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module 'vgraph' has no attribute {name!r}")
    value = getattr(importlib.import_module(source), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
