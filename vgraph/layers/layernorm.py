"""RMSNorm, optionally fused with the residual add (as the decoder layers use it).

On CUDA with a CUDA build of vgraph._C the forward is one fused kernel (vgraph_C::rms_norm or
::fused_add_rms_norm, same rounding as the torch code); elsewhere it is the torch code below, the
float32 oracle compared with transformers.
"""

from __future__ import annotations

import torch
from torch import nn

from vgraph._ext import use_cuda_op


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size), requires_grad=False)
        self._fused: bool | None = None  # fused CUDA op or torch code; decided at the first call

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        orig = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(orig)

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """x: [T, hidden] (or [T, heads, hidden] without a residual). With a residual: returns
        (norm(x + residual), x + residual); the fused op writes those into x and residual in place
        (both are the model's own intermediates)."""
        if self._fused is None:
            self._fused = use_cuda_op(x, "rms_norm") and x.dtype == self.weight.dtype
        if self._fused:
            return self._forward_fused(x, residual)
        if residual is None:
            return self._norm(x)
        x = x + residual
        return self._norm(x), x

    def _forward_fused(
        self, x: torch.Tensor, residual: torch.Tensor | None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            rows = x if x.dim() == 2 else x.reshape(-1, x.shape[-1])  # [N, hidden], rows strided
            out = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
            torch.ops.vgraph_C.rms_norm(out, rows, self.weight, self.eps)
            return out.view(x.shape)
        torch.ops.vgraph_C.fused_add_rms_norm(x, residual, self.weight, self.eps)
        return x, residual
