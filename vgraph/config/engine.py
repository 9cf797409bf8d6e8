"""The engine's configs (model, cache, scheduler, parallel) and VGraphConfig, which holds them.

Owns the user-facing knobs, their validation and the pure resolution helpers (device, dtype,
model folder, max_model_len). Building a VGraphConfig from user arguments, which needs the
attention backends and the default model, is vgraph/engine/arg_utils.py's job; this package
imports nothing else from vgraph. The graph-mode settings live in compilation.py.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vgraph.config.compilation import CompilationConfig

logger = logging.getLogger(__name__)

_DTYPES = {
    "float32": torch.float32,
    "float": torch.float32,
    "float16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
}
LOAD_FORMATS = ("auto", "safetensors", "dummy")


@dataclass(frozen=True)
class ModelConfig:
    """What to load and how: the checkpoint folder, its HF config.json and the compute dtype."""

    model: str  # folder holding config.json (+ *.safetensors and tokenizer unless dummy)
    hf_config: dict[str, Any]
    dtype: torch.dtype
    max_model_len: int
    load_format: str = "auto"
    seed: int = 0
    tokenizer: str | None = None  # folder; defaults to `model`
    served_model_name: str | None = None  # the name in responses
    # every name a request may use (--served-model-name with several names); () = just `name`
    served_model_names: tuple[str, ...] = ()
    max_logprobs: int = 20  # most logprobs / top_logprobs a request may ask for
    # sampling defaults: "auto" (the model's generation_config.json), "vllm" (none) or a folder
    generation_config: str = "auto"

    @property
    def architecture(self) -> str:
        return self.hf_config["architectures"][0]

    @property
    def vocab_size(self) -> int:
        return self.hf_config["vocab_size"]

    @property
    def num_layers(self) -> int:
        return self.hf_config["num_hidden_layers"]

    @property
    def num_kv_heads(self) -> int:
        return self.hf_config.get("num_key_value_heads") or self.hf_config["num_attention_heads"]

    @property
    def head_dim(self) -> int:
        cfg = self.hf_config
        return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]

    @property
    def name(self) -> str:
        return self.served_model_name or Path(self.model).name

    @property
    def names(self) -> tuple[str, ...]:
        """Every name a request may give as `model`; the first is the one responses carry."""
        return self.served_model_names or (self.name,)


@dataclass(frozen=True)
class CacheConfig:
    """Paged KV cache: block size, how much memory the cache may take, prefix caching."""

    block_size: int = 16
    gpu_memory_utilization: float = 0.9  # CUDA: share of the device this engine may use
    cpu_kv_cache_bytes: int = 1 << 30  # CPU: fixed byte budget for the KV cache
    num_gpu_blocks_override: int | None = None  # force a block count (tests of preemption)
    enable_prefix_caching: bool = True  # reuse cached KV of equal prompt prefixes
    # cascade attention over a prefix shared by a whole decode batch, where the cost rule
    # (vgraph/attention/cascade.py) says it pays
    enable_cascade_attention: bool = False

    def __post_init__(self) -> None:
        if self.block_size not in (16, 32):
            raise ValueError(f"block_size={self.block_size} is not allowed; use 16 or 32")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(
                f"gpu_memory_utilization={self.gpu_memory_utilization} must be in (0, 1]"
            )
        if self.cpu_kv_cache_bytes < 1:
            raise ValueError(f"cpu_kv_cache_bytes={self.cpu_kv_cache_bytes} must be >= 1")
        if self.num_gpu_blocks_override is not None and self.num_gpu_blocks_override < 1:
            raise ValueError(f"num_gpu_blocks_override={self.num_gpu_blocks_override} must be >= 1")


@dataclass(frozen=True)
class SchedulerConfig:
    """Token budget per step and the batch limits; chunked prefill is always on.
    async_scheduling: the engine core schedules and launches step N + 1 while step N runs on the
    device, its decodes reading step N's tokens on the device (vgraph/engine/core.py)."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 8192
    async_scheduling: bool = False

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")


@dataclass(frozen=True)
class ParallelConfig:
    """Tensor parallelism: tp ranks, each a process holding 1/tp of every layer (rank 0 in the
    engine core, ranks 1.. in worker processes it starts; vgraph/distributed)."""

    tensor_parallel_size: int = 1

    def __post_init__(self) -> None:
        if self.tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size={self.tensor_parallel_size} must be >= 1")

    def check_model(self, hf_config: dict[str, Any], device: torch.device) -> None:
        """The model's heads and MLP must split evenly over the ranks, and CUDA needs a GPU
        per rank. Raises ValueError naming what does not divide."""
        tp = self.tensor_parallel_size
        if tp == 1:
            return
        heads = hf_config["num_attention_heads"]
        kv_heads = hf_config.get("num_key_value_heads") or heads
        inter = hf_config["intermediate_size"]
        if heads % tp:
            raise ValueError(
                f"tensor_parallel_size={tp} must divide the model's num_attention_heads={heads}"
            )
        if kv_heads % tp and tp % kv_heads:
            raise ValueError(
                f"tensor_parallel_size={tp} and the model's num_key_value_heads={kv_heads}: "
                f"one must divide the other (KV heads are split, or replicated when fewer)"
            )
        if inter % tp:
            raise ValueError(
                f"tensor_parallel_size={tp} must divide the model's intermediate_size={inter}"
            )
        if device.type == "cuda" and torch.cuda.device_count() < tp:
            raise ValueError(
                f"tensor_parallel_size={tp} needs {tp} GPUs; torch sees {torch.cuda.device_count()}"
            )


@dataclass(frozen=True)
class VGraphConfig:
    model_config: ModelConfig
    cache_config: CacheConfig
    scheduler_config: SchedulerConfig
    parallel_config: ParallelConfig
    compilation_config: CompilationConfig
    device: torch.device
    attention_backend: str = "torch"

    def replace(self, **changes: Any) -> VGraphConfig:
        return dataclasses.replace(self, **changes)


def resolve_model_path(
    model: str, revision: str | None = None, download_dir: str | None = None
) -> str:
    """A model is a local folder, the name of a config shipped in vgraph/models/configs, or a
    Hugging Face Hub id ("org/name"), resolved to its snapshot folder in the Hub cache."""
    path = Path(model).expanduser()
    if path.is_dir():
        return str(path.resolve())
    configs = Path(__file__).resolve().parent.parent / "models" / "configs"
    if not path.is_absolute() and (configs / model).is_dir():
        return str(configs / model)
    if model.count("/") == 1 and not model.startswith((".", "/", "~")):
        from vgraph.config.hub import resolve_hub_model

        return resolve_hub_model(model, revision, download_dir)
    raise ValueError(
        f"model={model!r} is not a folder nor a Hugging Face Hub id (org/name); pass a "
        f"checkpoint folder (config.json, *.safetensors, tokenizer files), a Hub id or one of "
        f"the shipped configs: {sorted(p.name for p in configs.iterdir() if p.is_dir())}"
    )


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")
TOKENIZER_PATTERNS = ["*.json", "*.model", "*.txt", "*.jinja", "*.tiktoken"]  # no weights


def resolve_tokenizer_path(
    tokenizer: str, revision: str | None = None, download_dir: str | None = None
) -> str:
    """An explicit tokenizer: a folder holding tokenizer files, or a Hub id whose tokenizer
    files (not its weights) are fetched. Raises ValueError naming `tokenizer`."""
    path = Path(tokenizer).expanduser()
    if path.is_dir():
        folder = str(path.resolve())
    elif tokenizer.count("/") == 1 and not tokenizer.startswith((".", "/", "~")):
        from vgraph.config.hub import resolve_hub_model

        folder = resolve_hub_model(
            tokenizer, revision, download_dir, "tokenizer", TOKENIZER_PATTERNS
        )
    else:
        raise ValueError(
            f"tokenizer={tokenizer!r} is not a folder nor a Hugging Face Hub id (org/name)"
        )
    if not any((Path(folder) / f).is_file() for f in TOKENIZER_FILES):
        raise ValueError(
            f"tokenizer={tokenizer!r}: {folder} holds none of the tokenizer files "
            f"{', '.join(TOKENIZER_FILES)}"
        )
    return folder


def load_hf_config(model: str) -> dict[str, Any]:
    path = Path(model) / "config.json"
    if not path.is_file():
        raise ValueError(f"model={model!r} has no config.json; a checkpoint folder needs one")
    try:
        cfg = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"model={model!r}: config.json is not valid JSON ({e})") from None
    for key in (
        "architectures",
        "hidden_size",
        "num_attention_heads",
        "num_hidden_layers",
        "vocab_size",
        "intermediate_size",
    ):
        if key not in cfg:
            raise ValueError(f"model={model!r}: config.json lacks the required key {key!r}")
    return cfg


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device={device!r} is not allowed; use 'auto', 'cpu' or 'cuda'")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was asked for but torch sees no CUDA device")
    return torch.device(device)


def resolve_dtype(dtype: str, hf_config: dict[str, Any], device: torch.device) -> torch.dtype:
    """auto: float32 on the CPU (the oracle runs there); the checkpoint's half type on CUDA."""
    if dtype == "auto":
        if device.type == "cpu":
            return torch.float32
        ckpt = hf_config.get("torch_dtype") or hf_config.get("dtype") or "bfloat16"
        return torch.float16 if ckpt == "float16" else torch.bfloat16
    if dtype not in _DTYPES:
        raise ValueError(f"dtype={dtype!r} is not allowed; use 'auto' or one of {sorted(_DTYPES)}")
    return _DTYPES[dtype]


def derive_max_model_len(hf_config: dict[str, Any]) -> int:
    return int(hf_config.get("max_position_embeddings", 2048))
