"""Device parameters shared by the kernel tests: the CPU always, CUDA under the `gpu` marker."""

from __future__ import annotations

import pytest
import torch

from vgraph._ext import has_cuda_kernels


def cuda_param(op: str = "paged_attention") -> object:
    """pytest param "cuda", skipped without a GPU or a CUDA build of vgraph._C carrying op."""
    return pytest.param(
        "cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(
                not (torch.cuda.is_available() and has_cuda_kernels(op)),
                reason=f"needs a GPU and a CUDA build of vgraph._C with {op}",
            ),
        ],
    )
