"""ForwardContext: what one forward step needs beyond its tensors, set around the model call.

Model code stays plain (nano-vllm's Context): the attention op reads its metadata and KV cache from
here instead of through every module's signature. Graph wrappers read the runtime mode and the
batch descriptor from here too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ForwardContext:
    attn_metadata: Any  # the backend's metadata for this step; None in a profile run
    kv_caches: dict[str, Any] = field(default_factory=dict)  # layer name -> its KV cache tensor
    runtime_mode: Any = None  # CUDAGraphMode of this step (NONE when eager)
    batch_descriptor: Any = None  # BatchDescriptor chosen by the dispatcher
    attn_layers: dict[str, Any] = field(default_factory=dict)  # layer name -> Attention module
    capturing: bool = False  # graph wrappers may capture a missing key only while this is set


_forward_context: ForwardContext | None = None


def get_forward_context() -> ForwardContext:
    assert _forward_context is not None, (
        "no forward context: call the model inside set_forward_context"
    )
    return _forward_context


@contextmanager
def set_forward_context(ctx: ForwardContext) -> Iterator[ForwardContext]:
    global _forward_context
    prev, _forward_context = _forward_context, ctx
    try:
        yield ctx
    finally:
        _forward_context = prev
