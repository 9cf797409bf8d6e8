"""Graph-mode settings: CompilationConfig, its parsing from JSON / dict, and its resolution
(mode, capture sizes, splitting ops, Inductor) for a device and scheduler at start-up.

Mode downgrades against the attention backend happen later, in VGraphConfig.create.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from vgraph.cudagraph.modes import CUDAGraphMode

if TYPE_CHECKING:
    from vgraph.config.engine import SchedulerConfig

logger = logging.getLogger(__name__)

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
