"""Engine configuration: frozen dataclasses, the ground floor of the package.

modes.py: CUDAGraphMode and AttentionCGSupport. compilation.py: CompilationConfig, the graph-mode
settings, and their resolution. engine.py: the model, cache, scheduler and parallel configs and
VGraphConfig. This package imports nothing else from vgraph (a test checks it); turning user
arguments into a VGraphConfig is vgraph/engine/arg_utils.py's job.
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
from vgraph.config.modes import AttentionCGSupport, CUDAGraphMode

__all__ = [
    "ATTENTION_OP",
    "LOAD_FORMATS",
    "AttentionCGSupport",
    "CUDAGraphMode",
    "CacheConfig",
    "CompilationConfig",
    "ModelConfig",
    "ParallelConfig",
    "SchedulerConfig",
    "VGraphConfig",
]
