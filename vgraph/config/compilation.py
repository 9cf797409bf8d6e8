"""Graph-mode settings: CompilationConfig, its parsing from JSON / dict, and its resolution at
start-up (mode, capture sizes, splitting ops, Inductor, and the mode's downgrade against the
attention backend's graph support). `resolve` is the one place a requested mode becomes the mode
that runs; it takes plain numbers and the backend's support level, never other configs.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from typing import Any

import torch

from vgraph.config.compilation_keys import ATTENTION_OP, translate_vllm_keys
from vgraph.config.modes import AttentionCGSupport, CUDAGraphMode

logger = logging.getLogger(__name__)

__all__ = ["ATTENTION_OP", "CompilationConfig"]


@dataclass(frozen=True)
class CompilationConfig:
    """Graph-mode settings, as `--compilation-config` JSON or `LLM(compilation_config=...)`.

    None means "auto": resolved by `resolve()` at start-up (mode FULL_AND_PIECEWISE on CUDA and
    NONE on the CPU, default capture sizes, Inductor on CUDA only).
    """

    cudagraph_mode: CUDAGraphMode | None = None
    cudagraph_capture_sizes: tuple[int, ...] | None = None
    # token counts of PIECEWISE graphs; None: the same list as cudagraph_capture_sizes
    piecewise_capture_sizes: tuple[int, ...] | None = None
    max_cudagraph_capture_size: int | None = None
    cudagraph_num_of_warmups: int = 1
    splitting_ops: tuple[str, ...] | None = None
    use_inductor: bool | None = None
    enforce_eager: bool = False
    cache_dir: str | None = None  # compiled-artifact cache; default ~/.cache/vgraph/compile

    @staticmethod
    def parse(value: str | dict[str, Any] | CompilationConfig | None) -> CompilationConfig:
        """From a JSON string, a dict or a CompilationConfig; ValueError names the bad key.

        vLLM's keys (mode, level, backend, compile_sizes, full_cuda_graph, its attention op
        name) are translated first by compilation_keys.translate_vllm_keys."""
        if value is None:
            return CompilationConfig()
        if isinstance(value, CompilationConfig):
            # one built by hand (CompilationConfig(cudagraph_mode="FULL")) takes a dict's
            # checks and conversions: a mode as text, sizes as a list
            value = {
                f.name: list(v) if isinstance(v, tuple) else v
                for f in dataclasses.fields(CompilationConfig)
                for v in [getattr(value, f.name)]
            }
        if isinstance(value, str):
            value = CompilationConfig.parse_json(value)
        if not isinstance(value, dict):
            raise ValueError(
                f"compilation config must be a JSON object, got {type(value).__name__}"
            )
        value = translate_vllm_keys(value)
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
            elif key in ("cudagraph_capture_sizes", "piecewise_capture_sizes"):
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

    @staticmethod
    def parse_json(text: str) -> Any:
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"compilation config is not valid JSON: {e}") from None

    def resolve(
        self,
        device: torch.device,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        attention_backend: str,
        attention_support: AttentionCGSupport,
    ) -> CompilationConfig:
        """Fill every "auto" field for this device and batch limits, then downgrade the mode to
        what the attention backend and piecewise compilation allow. Raises ValueError when the
        resolved mode has graphs but no capture size is left."""
        mode = self.cudagraph_mode
        if self.enforce_eager:
            mode = CUDAGraphMode.NONE
        elif mode is None:
            mode = CUDAGraphMode.FULL_AND_PIECEWISE if device.type == "cuda" else CUDAGraphMode.NONE
        sizes = tuple(resolve_capture_sizes(self, max_num_seqs, max_num_batched_tokens))
        piecewise_sizes = sizes
        if self.piecewise_capture_sizes is not None:
            piecewise_sizes = tuple(
                _kept_sizes(
                    "piecewise_capture_sizes",
                    self.piecewise_capture_sizes,
                    _size_limit(self, max_num_batched_tokens),
                )
            )
        resolved = dataclasses.replace(
            self,
            cudagraph_capture_sizes=sizes,
            piecewise_capture_sizes=piecewise_sizes,
            splitting_ops=(ATTENTION_OP,) if self.splitting_ops is None else self.splitting_ops,
            use_inductor=_resolve_use_inductor(self.use_inductor, device),
        )
        mode = resolve_cudagraph_mode(
            mode, attention_backend, attention_support, resolved.piecewise_available()
        )
        for field, needed in (
            ("cudagraph_capture_sizes", mode.has_full()),
            ("piecewise_capture_sizes", mode.needs_piecewise()),
        ):
            if needed and not getattr(resolved, field):
                given = getattr(self, field)
                if given is not None and len(given) == 0:
                    raise ValueError(
                        f"cudagraph_mode={mode.name} needs at least one of {field}, which is "
                        f"empty; give sizes, or cudagraph_mode NONE for no graphs"
                    )
                raise ValueError(
                    f"cudagraph_mode={mode.name} needs at least one of {field}, but none is "
                    f"left under max_num_batched_tokens={max_num_batched_tokens}"
                    f" (max_cudagraph_capture_size={self.max_cudagraph_capture_size})"
                )
        if mode is CUDAGraphMode.FULL_DECODE_ONLY and min(sizes) > max_num_seqs:
            raise ValueError(
                f"cudagraph_mode=FULL_DECODE_ONLY captures decode graphs of at most "
                f"max_num_seqs={max_num_seqs} requests, but every size of "
                f"cudagraph_capture_sizes={list(sizes)} is larger; add a size <= {max_num_seqs}"
            )
        return dataclasses.replace(resolved, cudagraph_mode=mode)

    def piecewise_available(self) -> bool:
        """Whether PIECEWISE graphs can be built: splitting ops are configured (None means the
        default, the attention op) and torch.compile (Dynamo) works in this Python."""
        if self.splitting_ops is not None and len(self.splitting_ops) == 0:
            return False
        try:
            from torch._dynamo import is_dynamo_supported
        except ImportError:
            return False
        return bool(is_dynamo_supported())


def resolve_cudagraph_mode(
    requested: CUDAGraphMode,
    backend_name: str,
    support: AttentionCGSupport,
    piecewise_available: bool,
) -> CUDAGraphMode:
    """The mode to run, given the backend's graph support and whether piecewise graphs exist.

    Each downgrade logs one WARNING naming the backend, its support level and the mode chosen.
    """
    mode = requested
    why = ""
    M = CUDAGraphMode
    if mode.decode_mode() is M.FULL and support is AttentionCGSupport.NEVER:
        mode = M.PIECEWISE if piecewise_available else M.NONE
        why = "it can't run inside any full graph"
    elif mode is M.FULL and support is not AttentionCGSupport.ALWAYS:
        mode = M.FULL_AND_PIECEWISE if piecewise_available else M.FULL_DECODE_ONLY
        why = "full graphs of mixed prefill+decode steps need support ALWAYS"
    elif mode.mixed_mode() is M.PIECEWISE and not piecewise_available:
        if mode is M.PIECEWISE:
            mode = M.NONE
        else:  # FULL_AND_PIECEWISE: mixed steps go full where the backend allows it
            mode = M.FULL if support is AttentionCGSupport.ALWAYS else M.FULL_DECODE_ONLY
        why = "piecewise compilation is not available (splitting_ops is empty)"
    if mode is not requested:
        logger.warning(
            "cudagraph_mode %s is not available with attention backend %r (support %s): %s; "
            "using %s",
            requested.name,
            backend_name,
            support.name,
            why,
            mode.name,
        )
    return mode


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


def resolve_capture_sizes(
    cc: CompilationConfig, max_num_seqs: int, max_num_batched_tokens: int
) -> list[int]:
    """Default [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16), max = min(2 * seqs, 512);
    a user list is deduplicated and sorted. Sizes above max_num_batched_tokens (or the user's
    max_cudagraph_capture_size) are dropped, each with a warning."""
    limit = _size_limit(cc, max_num_batched_tokens)
    if cc.cudagraph_capture_sizes is None:
        top = cc.max_cudagraph_capture_size or min(2 * max_num_seqs, 512)
        sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, top + 1, 16))
        return [s for s in sizes if s <= min(top, limit)]
    return _kept_sizes("cudagraph_capture_sizes", cc.cudagraph_capture_sizes, limit)


def _size_limit(cc: CompilationConfig, max_num_batched_tokens: int) -> int:
    if cc.max_cudagraph_capture_size is None:
        return max_num_batched_tokens
    return min(max_num_batched_tokens, cc.max_cudagraph_capture_size)


def _kept_sizes(name: str, sizes: tuple[int, ...], limit: int) -> list[int]:
    kept = []
    for s in sorted(set(sizes)):
        if s > limit:
            logger.warning(
                "%s: size %d dropped: above the limit %d (max_num_batched_tokens, or "
                "max_cudagraph_capture_size when smaller)",
                name,
                s,
                limit,
            )
        else:
            kept.append(s)
    return kept
