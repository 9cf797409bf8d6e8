"""vLLM's compilation-config spellings -> vgraph's: `mode`/`level`, `backend`, `compile_sizes`,
`full_cuda_graph`, vLLM's attention op name in `splitting_ops`, and the `-O0..-O3` levels.

`translate_vllm_keys` runs before CompilationConfig.parse checks its keys, so a launch command
written for `vllm serve` means the same here or fails with a ValueError naming the key and why
vgraph cannot honour it. It never silently drops a key that changes what runs.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

ATTENTION_OP = "vgraph::unified_attention_with_output"
# vLLM's names of its attention op: the same role as ours (the op that splits the graph)
ATTENTION_OP_ALIASES = {
    "vllm::unified_attention_with_output": ATTENTION_OP,
    "vllm::unified_attention": ATTENTION_OP,
}

# vLLM CompilationMode (and the older CompilationLevel) numbers and names
_MODES = {
    "NONE": 0,
    "NO_COMPILATION": 0,
    "STOCK_TORCH_COMPILE": 1,
    "DYNAMO_AS_IS": 1,
    "DYNAMO_TRACE_ONCE": 2,
    "DYNAMO_ONCE": 2,
    "VLLM_COMPILE": 3,
    "PIECEWISE": 3,
}

# vLLM keys that tune machinery vgraph does not have; a value for them is an error, not a no-op
UNSUPPORTED_VLLM_KEYS = {
    "pass_config": "vgraph runs no custom fusion passes",
    "custom_ops": "vgraph has no custom-op enable/disable switches",
    "use_inductor_graph_partition": "vgraph splits the FX graph itself (splitting_ops)",
    "inductor_compile_config": "vgraph passes no Inductor options",
    "inductor_passes": "vgraph runs no custom Inductor passes",
    "cudagraph_copy_inputs": "vgraph's runner always copies inputs into static buffers",
    "cudagraph_specialize_lora": "vgraph has no LoRA",
    "use_cudagraph": "removed in vLLM; use cudagraph_mode",
    "debug_dump_path": "vgraph has no compile dump; set VGRAPH_DEBUG_GRAPHS instead",
    "compile_cache_save_format": "vgraph's compile cache has one format",
    "compile_ranges_split_points": "vgraph compiles one graph dynamic in the token count",
    "dynamic_shapes_config": "vgraph compiles one graph dynamic in the token count",
}

# -O levels as vLLM defines them: the graph mode (and compilation mode) each one implies
OPTIMIZATION_LEVELS: dict[int, dict[str, Any]] = {
    0: {"cudagraph_mode": "NONE", "mode": 0},
    1: {"cudagraph_mode": "PIECEWISE", "mode": 3},
    2: {"cudagraph_mode": "FULL_AND_PIECEWISE", "mode": 3},
    3: {"cudagraph_mode": "FULL_AND_PIECEWISE", "mode": 3},  # vLLM: currently -O2
}


def apply_optimization_level(level: int | None, cc: dict[str, Any]) -> dict[str, Any]:
    """-O<level>'s defaults under the user's own keys (which win, as in vLLM)."""
    if level is None:
        return cc
    if level not in OPTIMIZATION_LEVELS:
        raise ValueError(
            f"optimization_level={level!r} is not allowed; use 0, 1, 2 or 3 (-O0 .. -O3)"
        )
    out = dict(OPTIMIZATION_LEVELS[level])
    if "level" in cc:  # the user's older spelling of mode wins over the level's mode
        out.pop("mode")
    if "full_cuda_graph" in cc:
        out.pop("cudagraph_mode")
    return out | cc


def _mode_number(key: str, value: Any) -> int:
    if isinstance(value, str) and value.upper() in _MODES:
        return _MODES[value.upper()]
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 3:
        return value
    raise ValueError(
        f"compilation config: {key}={value!r} is not allowed; use 0..3 or one of {list(_MODES)}"
    )


def translate_vllm_keys(cc: dict[str, Any]) -> dict[str, Any]:
    """A compilation-config dict in vLLM's spelling -> vgraph's keys (see the module doc)."""
    cc = dict(cc)
    for key, why in UNSUPPORTED_VLLM_KEYS.items():
        if key in cc and cc[key] not in (None, {}, []):
            raise ValueError(f"compilation config: {key} is not supported: {why}")
        cc.pop(key, None)
    modes = {k: _mode_number(k, cc.pop(k)) for k in ("level", "mode") if cc.get(k) is not None}
    if len(set(modes.values())) > 1:
        raise ValueError(f"compilation config: level and mode disagree ({modes}); give one")
    mode = next(iter(modes.values()), None)
    if mode in (1, 2):
        raise ValueError(
            f"compilation config: mode={mode} (stock torch.compile / Dynamo trace once) is not "
            "supported: vgraph compiles piecewise (mode 3, the default) or not at all (mode 0)"
        )
    if mode == 0:  # no torch.compile: no pieces, so graph modes are FULL, decode-only or none
        if cc.get("splitting_ops"):
            raise ValueError("compilation config: mode=0 compiles nothing; drop splitting_ops")
        cc["splitting_ops"] = []
    if cc.get("compile_sizes"):
        raise ValueError(
            f"compilation config: compile_sizes={cc['compile_sizes']!r} is not supported: vgraph "
            "compiles one graph dynamic in the token count, no per-size Inductor graphs"
        )
    cc.pop("compile_sizes", None)
    backend = cc.pop("backend", None)
    if backend not in (None, ""):
        if backend not in ("inductor", "eager"):
            raise ValueError(
                f"compilation config: backend={backend!r} is not allowed; use 'inductor', "
                "'eager' or '' (auto)"
            )
        if cc.get("use_inductor") is not None and cc["use_inductor"] != (backend == "inductor"):
            raise ValueError(f"compilation config: backend={backend!r} contradicts use_inductor")
        cc["use_inductor"] = backend == "inductor"
    full = cc.pop("full_cuda_graph", None)
    if full:
        logger.warning(
            "compilation config: full_cuda_graph is deprecated (as in vLLM); it means "
            "cudagraph_mode=FULL_AND_PIECEWISE, write that instead"
        )
        if cc.get("cudagraph_mode") not in (None, "FULL_AND_PIECEWISE"):
            raise ValueError(
                f"compilation config: full_cuda_graph=true contradicts "
                f"cudagraph_mode={cc['cudagraph_mode']!r}; give cudagraph_mode only"
            )
        cc["cudagraph_mode"] = "FULL_AND_PIECEWISE"
    ops = cc.get("splitting_ops")
    if isinstance(ops, list):
        cc["splitting_ops"] = [ATTENTION_OP_ALIASES.get(op, op) for op in ops]
    return cc
