"""The model runner's paged KV cache: how many blocks, and the tensors of every attention layer.

The block count is cache_config.num_gpu_blocks_override when set; else, on CUDA, what the memory
budget (memory.kv_cache_budget, after a profiling run of the largest step) leaves; else
cpu_kv_cache_bytes. Then the smallest count of any tensor-parallel rank, since every rank holds
the same blocks. A block holds K and V of this rank's KV heads in every layer; the tensor layout
is the attention backend's, with one spare block (the write target of pad tokens for backends
that need one). It runs once, after load_model and before capture; it must not load weights or
touch the graphs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import torch

from vgraph.attention.backend import AttentionBackend
from vgraph.config import CacheConfig, ModelConfig
from vgraph.distributed.parallel_state import min_over_ranks
from vgraph.forward_context import ForwardContext, set_forward_context
from vgraph.layers.linear import num_kv_heads_per_rank
from vgraph.worker.memory import DeviceMemory, kv_cache_budget

logger = logging.getLogger(__name__)


def allocate_kv_cache(
    mc: ModelConfig,
    cc: CacheConfig,
    backend: type[AttentionBackend],
    layer_names: Iterable[str],
    device: torch.device,
    cuda_budget_bytes: Callable[[], int],
) -> tuple[int, dict[str, torch.Tensor]]:
    """-> (usable blocks, layer name -> its cache of usable blocks + 1). cuda_budget_bytes: the
    bytes the cache may take on CUDA (called only there, and only without an override)."""
    num_kv_heads = num_kv_heads_per_rank(mc.num_kv_heads)  # this rank's
    per_block = 2 * mc.num_layers * cc.block_size * num_kv_heads * mc.head_dim * mc.dtype.itemsize
    if cc.num_gpu_blocks_override is not None:
        num_blocks = cc.num_gpu_blocks_override
    elif device.type == "cuda":
        num_blocks = cuda_budget_bytes() // per_block
    else:
        num_blocks = cc.cpu_kv_cache_bytes // per_block
    num_blocks = min_over_ranks(num_blocks)  # every rank holds the same blocks
    if num_blocks < 1:
        raise ValueError(
            "no memory is left for the KV cache; raise gpu_memory_utilization / "
            "cpu_kv_cache_bytes or lower max_num_batched_tokens (on CUDA the cache is also "
            "capped at the memory the device has free)"
        )
    shape = backend.kv_cache_shape(num_blocks + 1, cc.block_size, num_kv_heads, mc.head_dim)
    caches = {name: torch.zeros(shape, dtype=mc.dtype, device=device) for name in layer_names}
    logger.info(
        "KV cache: %d blocks of %d tokens (%.2f GiB)",
        num_blocks,
        cc.block_size,
        num_blocks * per_block / 2**30,
    )
    return num_blocks, caches


def profile_free_bytes(
    model: torch.nn.Module,
    device: torch.device,
    num_tokens: int,
    num_reqs: int,
    memory_before_load: DeviceMemory,
    model_bytes: int,
    gpu_memory_utilization: float,
) -> int:
    """Run the largest step (num_tokens tokens; logits of up to num_reqs rows, sorted as the
    sampler's worst case) without a KV cache; what is left of this engine's share of the device
    (gpu_memory_utilization) after weights, activations and CUDA libraries is the cache. Other
    engines and processes on the device only cap it at what is free (CUDA only)."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    baseline = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    ids = torch.zeros(num_tokens, dtype=torch.int64, device=device)  # [num_tokens]
    with set_forward_context(ForwardContext(attn_metadata=None)):
        hidden = model(ids, ids)  # [num_tokens, hidden_size]
    logits = model.compute_logits(hidden[: min(num_tokens, num_reqs)])
    logits.float().sort(dim=-1)  # the sampler works on float32 (widened from the model's dtype)
    del hidden, logits
    torch.cuda.synchronize()
    activations = torch.cuda.max_memory_allocated() - baseline
    torch.cuda.empty_cache()
    return kv_cache_budget(
        memory_before_load,
        DeviceMemory.now(device),
        gpu_memory_utilization,
        model_bytes,
        activations,
    )
