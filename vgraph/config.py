"""Engine configuration: frozen dataclasses resolved once at start-up.

Owns the user-facing knobs and their validation. "auto" values (dtype, max_model_len, device) are
resolved by `VGraphConfig.create` before anything is frozen; no other module reads raw user input.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vgraph.compilation import piecewise_available
from vgraph.cudagraph.modes import CUDAGraphMode, resolve_cudagraph_mode

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
    served_model_name: str | None = None

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


@dataclass(frozen=True)
class CacheConfig:
    """Paged KV cache: block size and how much memory the cache may take."""

    block_size: int = 16
    gpu_memory_utilization: float = 0.9  # CUDA: fraction of device memory for the whole engine
    cpu_kv_cache_bytes: int = 1 << 30  # CPU: fixed byte budget for the KV cache
    num_gpu_blocks_override: int | None = None  # force a block count (tests of preemption)

    def __post_init__(self) -> None:
        if self.block_size not in (16, 32):
            raise ValueError(f"block_size={self.block_size} is not allowed; use 16 or 32")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(
                f"gpu_memory_utilization={self.gpu_memory_utilization} must be in (0, 1]"
            )
        if self.num_gpu_blocks_override is not None and self.num_gpu_blocks_override < 1:
            raise ValueError(f"num_gpu_blocks_override={self.num_gpu_blocks_override} must be >= 1")


@dataclass(frozen=True)
class SchedulerConfig:
    """Token budget per step and the batch limits; chunked prefill is always on."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 8192

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")


@dataclass(frozen=True)
class ParallelConfig:
    """Single device for now; the field exists so tensor parallelism has a home."""

    tensor_parallel_size: int = 1

    def __post_init__(self) -> None:
        if self.tensor_parallel_size != 1:
            raise ValueError(
                f"tensor_parallel_size={self.tensor_parallel_size} is not supported; use 1"
            )


ATTENTION_OP = "vgraph::unified_attention_with_output"


@dataclass(frozen=True)
class CompilationConfig:
    """Graph-mode settings, as `--compilation-config` JSON or `LLM(compilation_config=...)`.

    None means "auto": resolved by `resolve()` at start-up (mode FULL_AND_PIECEWISE on CUDA and
    NONE on the CPU, default capture sizes, Inductor on CUDA only).
    """

    cudagraph_mode: CUDAGraphMode | None = None
    cudagraph_capture_sizes: tuple[int, ...] | None = None
    max_cudagraph_capture_size: int | None = None
    cudagraph_num_of_warmups: int = 1
    splitting_ops: tuple[str, ...] | None = None
    use_inductor: bool | None = None
    enforce_eager: bool = False
    cache_dir: str | None = None  # compiled-artifact cache; default ~/.cache/vgraph/compile

    @staticmethod
    def parse(value: str | dict[str, Any] | CompilationConfig | None) -> CompilationConfig:
        """From a JSON string, a dict or a CompilationConfig; ValueError names the bad key."""
        if value is None:
            return CompilationConfig()
        if isinstance(value, CompilationConfig):
            return value
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as e:
                raise ValueError(f"compilation config is not valid JSON: {e}") from None
        if not isinstance(value, dict):
            raise ValueError(
                f"compilation config must be a JSON object, got {type(value).__name__}"
            )
        allowed = [f.name for f in dataclasses.fields(CompilationConfig)]
        unknown = sorted(set(value) - set(allowed))
        if unknown:
            raise ValueError(
                f"compilation config: unknown key(s) {unknown}; allowed keys: {allowed}"
            )
        kw: dict[str, Any] = {}
        for key, v in value.items():
            if v is None:
                continue
            if key == "cudagraph_mode":
                kw[key] = CUDAGraphMode.parse(v)
            elif key == "cudagraph_capture_sizes":
                if not isinstance(v, list) or not all(_is_int(x) for x in v):
                    raise ValueError(f"compilation config: {key}={v!r} must be a list of integers")
                if any(x < 1 for x in v):
                    raise ValueError(f"compilation config: {key}={v!r}: every size must be >= 1")
                kw[key] = tuple(v)
            elif key in ("max_cudagraph_capture_size", "cudagraph_num_of_warmups"):
                low = 1 if key == "max_cudagraph_capture_size" else 0
                if not _is_int(v) or v < low:
                    raise ValueError(f"compilation config: {key}={v!r} must be an integer >= {low}")
                kw[key] = v
            elif key == "splitting_ops":
                if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                    raise ValueError(f"compilation config: {key}={v!r} must be a list of op names")
                kw[key] = tuple(v)
            elif key in ("use_inductor", "enforce_eager"):
                if not isinstance(v, bool):
                    raise ValueError(f"compilation config: {key}={v!r} must be true or false")
                kw[key] = v
            elif key == "cache_dir":
                if not isinstance(v, str):
                    raise ValueError(f"compilation config: {key}={v!r} must be a string")
                kw[key] = v
        if (
            kw.get("enforce_eager")
            and kw.get("cudagraph_mode", CUDAGraphMode.NONE) is not CUDAGraphMode.NONE
        ):
            raise ValueError(
                f"compilation config: enforce_eager=true contradicts "
                f"cudagraph_mode={kw['cudagraph_mode'].name}; drop one of them"
            )
        return CompilationConfig(**kw)

    def resolve(self, device: torch.device, sched: SchedulerConfig) -> CompilationConfig:
        """Fill every "auto" field for this device and scheduler (mode not yet vs. backend)."""
        mode = self.cudagraph_mode
        if self.enforce_eager:
            mode = CUDAGraphMode.NONE
        elif mode is None:
            mode = CUDAGraphMode.FULL_AND_PIECEWISE if device.type == "cuda" else CUDAGraphMode.NONE
        return dataclasses.replace(
            self,
            cudagraph_mode=mode,
            cudagraph_capture_sizes=tuple(resolve_capture_sizes(self, sched)),
            splitting_ops=(ATTENTION_OP,) if self.splitting_ops is None else self.splitting_ops,
            use_inductor=_resolve_use_inductor(self.use_inductor, device),
        )

    @property
    def max_capture_size(self) -> int:
        return max(self.cudagraph_capture_sizes or (0,))


def _resolve_use_inductor(use_inductor: bool | None, device: torch.device) -> bool:
    """Auto: on for CUDA when Triton (Inductor's GPU code generator) is installed."""
    if device.type != "cuda":
        return bool(use_inductor)
    from torch.utils._triton import has_triton

    if has_triton():
        return use_inductor is not False
    if use_inductor:
        raise ValueError(
            "compilation config: use_inductor=true needs Triton on CUDA, and it is not "
            "installed; install triton or set use_inductor to false"
        )
    if use_inductor is None:
        logger.warning(
            "Triton is not installed: piecewise pieces run uncompiled (use_inductor off)"
        )
    return False


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def resolve_capture_sizes(cc: CompilationConfig, sched: SchedulerConfig) -> list[int]:
    """Default [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16), max = min(2 * seqs, 512);
    a user list is deduplicated and sorted. Sizes above max_num_batched_tokens (or the user's
    max_cudagraph_capture_size) are dropped, each with a warning."""
    limit = sched.max_num_batched_tokens
    if cc.max_cudagraph_capture_size is not None:
        limit = min(limit, cc.max_cudagraph_capture_size)
    if cc.cudagraph_capture_sizes is None:
        top = cc.max_cudagraph_capture_size or min(2 * sched.max_num_seqs, 512)
        sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, top + 1, 16))
        return [s for s in sizes if s <= min(top, limit)]
    kept = []
    for s in sorted(set(cc.cudagraph_capture_sizes)):
        if s > limit:
            logger.warning(
                "cudagraph capture size %d dropped: above the limit %d (max_num_batched_tokens=%d,"
                " max_cudagraph_capture_size=%s)",
                s,
                limit,
                sched.max_num_batched_tokens,
                cc.max_cudagraph_capture_size,
            )
        else:
            kept.append(s)
    return kept


@dataclass(frozen=True)
class VGraphConfig:
    model_config: ModelConfig
    cache_config: CacheConfig
    scheduler_config: SchedulerConfig
    parallel_config: ParallelConfig
    compilation_config: CompilationConfig
    device: torch.device
    attention_backend: str = "torch"

    @staticmethod
    def create(
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
    ) -> VGraphConfig:
        """Resolve every "auto" and build the frozen config. Raises ValueError on bad input."""
        if model is None:
            from vgraph.models.default_model import ensure_default_model

            model = ensure_default_model()
        model = resolve_model_path(model)
        hf_config = load_hf_config(model)
        if load_format not in LOAD_FORMATS:
            raise ValueError(
                f"load_format={load_format!r} is not allowed; use one of {LOAD_FORMATS}"
            )
        dev = resolve_device(device)
        torch_dtype = resolve_dtype(dtype, hf_config, dev)
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
            dtype=torch_dtype,
            max_model_len=max_model_len,
            load_format=load_format,
            seed=seed,
            tokenizer=tokenizer,
            served_model_name=served_model_name,
        )
        from vgraph.attention.selector import get_backend_cls, resolve_backend_name

        scheduler_config = SchedulerConfig(
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            max_model_len=max_model_len,
        )
        backend = resolve_backend_name(attention_backend, dev, model_config.head_dim)
        comp = CompilationConfig.parse(compilation_config)
        if enforce_eager:
            comp = dataclasses.replace(comp, enforce_eager=True, cudagraph_mode=None)
        comp = comp.resolve(dev, scheduler_config)
        comp = dataclasses.replace(
            comp,
            cudagraph_mode=resolve_cudagraph_mode(
                comp.cudagraph_mode,
                backend,
                get_backend_cls(backend).cudagraph_support,
                piecewise_available(comp),
            ),
        )
        if comp.cudagraph_mode is not CUDAGraphMode.NONE and not comp.cudagraph_capture_sizes:
            raise ValueError(
                f"cudagraph_mode={comp.cudagraph_mode.name} needs at least one capture size, but "
                f"none is left under max_num_batched_tokens={max_num_batched_tokens}"
            )
        return VGraphConfig(
            model_config=model_config,
            cache_config=CacheConfig(
                block_size=block_size,
                gpu_memory_utilization=gpu_memory_utilization,
                cpu_kv_cache_bytes=cpu_kv_cache_bytes,
                num_gpu_blocks_override=num_gpu_blocks_override,
            ),
            scheduler_config=scheduler_config,
            parallel_config=ParallelConfig(),
            compilation_config=comp,
            device=dev,
            attention_backend=backend,
        )

    def replace(self, **changes: Any) -> VGraphConfig:
        return dataclasses.replace(self, **changes)


def resolve_model_path(model: str) -> str:
    """A model is a local folder, or the name of a config shipped in vgraph/models/configs."""
    path = Path(model).expanduser()
    if path.is_dir():
        return str(path.resolve())
    configs = Path(__file__).parent / "models" / "configs"
    if not path.is_absolute() and (configs / model).is_dir():
        return str(configs / model)
    raise ValueError(
        f"model={model!r} is not a folder; pass a Hugging Face checkpoint folder "
        f"(config.json, *.safetensors, tokenizer files) or one of the shipped configs: "
        f"{sorted(p.name for p in configs.iterdir() if p.is_dir())}"
    )


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
