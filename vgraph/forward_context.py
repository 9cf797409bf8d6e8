"""ForwardContext: what one forward step needs beyond its tensors, set around the model call.

Model code stays plain (nano-vllm's Context): the attention op reads its metadata and KV cache from
here instead of through every module's signature. Graph wrappers read the runtime mode and the
batch descriptor from here too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vgraph.config.modes import CUDAGraphMode

if TYPE_CHECKING:
    import torch

    from vgraph.attention.backend import CommonAttentionMetadata
    from vgraph.cudagraph.dispatcher import BatchDescriptor
    from vgraph.layers.attention import Attention


@dataclass
class ForwardContext:
    attn_metadata: CommonAttentionMetadata | None  # this step's; None in a profile/trace run
    # layer name -> its KV cache [2, num_blocks, block_size, num_kv_heads, head_dim]
    kv_caches: dict[str, torch.Tensor] = field(default_factory=dict)
    runtime_mode: CUDAGraphMode = CUDAGraphMode.NONE  # of this step (NONE when eager)
    batch_descriptor: BatchDescriptor | None = None  # chosen by the dispatcher
    attn_layers: dict[str, Attention] = field(default_factory=dict)  # layer name -> module
    capturing: bool = False  # graph wrappers may capture a missing key only while this is set
    # while a FULL graph is captured: the step's host-to-device input copy, which the graph
    # records as its first node (replays then leave it out of input preparation); else None
    copy_inputs: Callable[[], None] | None = None


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
