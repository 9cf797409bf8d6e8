"""create_engine_config: user arguments -> the frozen VGraphConfig (vLLM's EngineArgs role).

Resolves every "auto" before anything is frozen: the model folder (the built-in default model
when none is given), dtype, max_model_len, device, the attention backend, and the graph mode
against that backend's graph support. It sits above vgraph/config (which imports nothing from
vgraph) because it needs the attention backends and the default model. Raises ValueError naming
the argument on bad input.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from vgraph.attention.cascade import CASCADE_DEFAULT
from vgraph.attention.selector import get_backend_cls, resolve_backend_name
from vgraph.config import (
    LOAD_FORMATS,
    CacheConfig,
    CompilationConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    VGraphConfig,
)
from vgraph.config.engine import (
    derive_max_model_len,
    load_hf_config,
    resolve_device,
    resolve_dtype,
    resolve_model_path,
)


def create_engine_config(
    model: str | None = None,
    *,
    dtype: str = "auto",
    max_model_len: int | None = None,
    load_format: str = "auto",
    seed: int = 0,
    tokenizer: str | None = None,
    served_model_name: str | None = None,
    device: str = "auto",
    attention_backend: str = "auto",
    block_size: int = 16,
    gpu_memory_utilization: float = 0.9,
    cpu_kv_cache_bytes: int = 1 << 30,
    num_gpu_blocks_override: int | None = None,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int | None = None,
    compilation_config: CompilationConfig | dict[str, Any] | str | None = None,
    enforce_eager: bool = False,
    tensor_parallel_size: int = 1,
    enable_prefix_caching: bool = True,
    enable_cascade_attention: bool | None = None,
) -> VGraphConfig:
    """Resolve every "auto" and build the frozen config. Raises ValueError on bad input."""
    if model is None:
        from vgraph.models.default_model import ensure_default_model

        model = ensure_default_model()
    model = resolve_model_path(model)
    hf_config = load_hf_config(model)
    if load_format not in LOAD_FORMATS:
        raise ValueError(f"load_format={load_format!r} is not allowed; use one of {LOAD_FORMATS}")
    dev = resolve_device(device)
    model_max = derive_max_model_len(hf_config)
    if max_model_len is None:
        max_model_len = model_max
    elif not 1 <= max_model_len <= model_max:
        raise ValueError(
            f"max_model_len={max_model_len} is not allowed; use 1..{model_max} "
            f"(the model's max_position_embeddings)"
        )
    if max_num_batched_tokens is None:
        max_num_batched_tokens = 8192
    if seed < 0:
        raise ValueError(f"seed={seed} must be >= 0")
    model_config = ModelConfig(
        model=model,
        hf_config=hf_config,
        dtype=resolve_dtype(dtype, hf_config, dev),
        max_model_len=max_model_len,
        load_format=load_format,
        seed=seed,
        tokenizer=tokenizer,
        served_model_name=served_model_name,
    )
    scheduler_config = SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
    )
    parallel_config = ParallelConfig(tensor_parallel_size)
    parallel_config.check_model(hf_config, dev)
    backend = resolve_backend_name(attention_backend, dev, model_config.head_dim)
    comp = CompilationConfig.parse(compilation_config)
    if enforce_eager:
        comp = dataclasses.replace(comp, enforce_eager=True, cudagraph_mode=None)
    comp = comp.resolve(
        dev,
        max_num_seqs,
        max_num_batched_tokens,
        backend,
        get_backend_cls(backend).cudagraph_support,
    )
    return VGraphConfig(
        model_config=model_config,
        cache_config=CacheConfig(
            block_size=block_size,
            gpu_memory_utilization=gpu_memory_utilization,
            cpu_kv_cache_bytes=cpu_kv_cache_bytes,
            num_gpu_blocks_override=num_gpu_blocks_override,
            enable_prefix_caching=enable_prefix_caching,
            enable_cascade_attention=(
                CASCADE_DEFAULT if enable_cascade_attention is None else enable_cascade_attention
            ),
        ),
        scheduler_config=scheduler_config,
        parallel_config=parallel_config,
        compilation_config=comp,
        device=dev,
        attention_backend=backend,
    )
