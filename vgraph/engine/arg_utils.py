"""create_engine_config: EngineArgs -> the frozen VGraphConfig (vLLM's EngineArgs role).

Resolves every "auto" before anything is frozen: the model folder (the built-in default model
when none is given; a Hugging Face Hub id through huggingface_hub), dtype, max_model_len,
device, the attention backend, and the graph mode against that backend's graph support. It
sits above vgraph/config (which imports nothing from vgraph) because it needs the attention
backends and the default model. Raises ValueError naming the argument on bad input. The
arguments themselves are declared once, in vgraph/engine/engine_args.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from vgraph.attention.cascade import CASCADE_DEFAULT
from vgraph.attention.selector import get_backend_cls, resolve_backend_name
from vgraph.config import (
    LOAD_FORMATS,
    CacheConfig,
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
    resolve_tokenizer_path,
)
from vgraph.engine.engine_args import ENGINE_ARG_NAMES, EngineArgs

__all__ = ["EngineArgs", "build_engine_config", "create_engine_config"]


def build_engine_config(args: EngineArgs) -> VGraphConfig:
    """Resolve every "auto" and build the frozen config. Raises ValueError on bad input."""
    args.check_types()
    args.check_unsupported()
    comp = args.compilation()  # before the model: a bad -cc fails without touching it
    model_id = args.model
    if model_id is None:
        from vgraph.models.default_model import ensure_default_model

        model_id = ensure_default_model()
    model = resolve_model_path(model_id, args.revision, args.download_dir)
    hf_config = load_hf_config(model)
    if args.load_format not in LOAD_FORMATS:
        raise ValueError(
            f"load_format={args.load_format!r} is not allowed; use one of {LOAD_FORMATS}"
        )
    dev = resolve_device(args.device)
    model_max = derive_max_model_len(hf_config)
    max_model_len = args.max_model_len
    if max_model_len is None:
        max_model_len = model_max
    elif not 1 <= max_model_len <= model_max:
        raise ValueError(
            f"max_model_len={max_model_len} is not allowed; use 1..{model_max} "
            f"(the model's max_position_embeddings)"
        )
    max_num_batched_tokens = args.max_num_batched_tokens
    if max_num_batched_tokens is None:
        max_num_batched_tokens = 8192
    if args.seed < 0:
        raise ValueError(f"seed={args.seed} must be >= 0")
    names = args.served_names()
    model_config = ModelConfig(
        model=model,
        hf_config=hf_config,
        dtype=resolve_dtype(args.dtype, hf_config, dev),
        max_model_len=max_model_len,
        load_format=args.load_format,
        seed=args.seed,
        tokenizer=(
            None
            if args.tokenizer is None
            else resolve_tokenizer_path(args.tokenizer, download_dir=args.download_dir)
        ),
        served_model_name=names[0] if names else None,
        served_model_names=names,
        max_logprobs=args.max_logprobs,
        generation_config=args.generation_config,
    )
    scheduler_config = SchedulerConfig(
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        async_scheduling=resolve_async_scheduling(args, dev),
    )
    parallel_config = ParallelConfig(args.tensor_parallel_size)
    parallel_config.check_model(hf_config, dev)
    backend = resolve_backend_name(args.attention_backend, dev, model_config.head_dim)
    if args.enforce_eager:
        comp = dataclasses.replace(comp, enforce_eager=True, cudagraph_mode=None)
    comp = comp.resolve(
        dev,
        args.max_num_seqs,
        max_num_batched_tokens,
        backend,
        get_backend_cls(backend).cudagraph_support,
    )
    return VGraphConfig(
        model_config=model_config,
        cache_config=CacheConfig(
            block_size=args.block_size,
            gpu_memory_utilization=args.gpu_memory_utilization,
            cpu_kv_cache_bytes=args.cpu_kv_cache_bytes,
            num_gpu_blocks_override=args.num_gpu_blocks_override,
            enable_prefix_caching=args.enable_prefix_caching,
            enable_cascade_attention=(
                CASCADE_DEFAULT
                if args.enable_cascade_attention is None
                else args.enable_cascade_attention
            ),
        ),
        scheduler_config=scheduler_config,
        parallel_config=parallel_config,
        compilation_config=comp,
        device=dev,
        attention_backend=backend,
    )


def resolve_async_scheduling(args: EngineArgs, device: torch.device) -> bool:
    """None (the default): on where it pays and works, CUDA with one rank (on the CPU the host
    computes every step itself: there is nothing to overlap)."""
    tp = args.tensor_parallel_size
    if args.async_scheduling is None:
        return device.type == "cuda" and tp == 1
    if args.async_scheduling and tp > 1:
        raise ValueError(
            f"async_scheduling=True is not supported with tensor_parallel_size={tp}: the worker "
            f"ranks take each step's token ids from rank 0's host; use tensor_parallel_size=1 "
            f"or leave async_scheduling off"
        )
    return args.async_scheduling


def create_engine_config(model: str | None = None, **kwargs: Any) -> VGraphConfig:
    """EngineArgs(model, **kwargs) -> VGraphConfig; a keyword that is no engine argument is a
    ValueError naming it."""
    unknown = sorted(set(kwargs) - ENGINE_ARG_NAMES)
    if unknown:
        raise ValueError(
            f"unknown engine argument(s) {unknown}; allowed: {sorted(ENGINE_ARG_NAMES)}"
        )
    return build_engine_config(EngineArgs(model=model, **kwargs))
