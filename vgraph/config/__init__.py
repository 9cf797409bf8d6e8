"""Engine configuration: frozen dataclasses resolved once at start-up.

engine.py: the model, cache, scheduler and parallel configs and VGraphConfig, whose `create`
resolves every "auto" (dtype, max_model_len, device, attention backend, graph mode) before
anything is frozen. compilation.py: CompilationConfig, the graph-mode settings. No other module
reads raw user input.
"""

from vgraph.config.compilation import ATTENTION_OP, CompilationConfig
from vgraph.config.engine import (
    LOAD_FORMATS,
    CacheConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    VGraphConfig,
)

__all__ = [
    "ATTENTION_OP",
    "LOAD_FORMATS",
    "CacheConfig",
    "CompilationConfig",
    "ModelConfig",
    "ParallelConfig",
    "SchedulerConfig",
    "VGraphConfig",
]
