"""Helpers of the compilation tests: a model runner with a compiled (but not captured) model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vgraph.engine.arg_utils import create_engine_config
from vgraph.worker.model_runner import ModelRunner


def load_runner(folder: Path, cache_dir: Path, **compilation: Any) -> ModelRunner:
    """A ModelRunner whose load_model() traced and split the model (PIECEWISE, CPU recorder)."""
    cc = {
        "cudagraph_mode": "PIECEWISE",
        "cudagraph_capture_sizes": [1, 2, 4],
        "cache_dir": str(cache_dir),
        **compilation,
    }
    config = create_engine_config(
        str(folder),
        max_model_len=128,
        max_num_batched_tokens=16,
        cpu_kv_cache_bytes=1 << 22,
        compilation_config=cc,
    )
    runner = ModelRunner(config)
    runner.load_model()
    return runner
