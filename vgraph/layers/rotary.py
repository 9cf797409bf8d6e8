"""Rotary position embedding (neox / rotate-half style) with optional llama3 frequency scaling.

The cos/sin table is precomputed for max_position positions, so the forward is one gather:
no data-dependent shapes, graph-safe. On CUDA with a CUDA build of vgraph._C the forward is one
fused in-place kernel (vgraph_C::rotary_embedding); elsewhere the torch code, the float32 oracle.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from vgraph._ext import use_cuda_op


def _inv_freq(head_dim: int, base: float, scaling: dict[str, Any] | None) -> torch.Tensor:
    # float32 throughout, as Hugging Face computes it: the oracle's rounding, not a better one
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    if not scaling:
        return inv_freq
    rope_type = scaling.get("rope_type", scaling.get("type"))
    if rope_type == "default":
        return inv_freq
    if rope_type != "llama3":
        raise ValueError(
            f"rope_scaling.rope_type={rope_type!r} is not supported; use 'llama3' or none"
        )
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_len = scaling["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv_freq
    smooth = (old_len / wavelen - low) / (high - low)
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    mid = (1 - smooth) * scaled / factor + smooth * scaled
    is_mid = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(is_mid, mid, scaled)


def rope_parameters(cfg: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(rope_theta, scaling) from a config.json: transformers 4 ("rope_theta" + "rope_scaling")
    or transformers 5 ("rope_parameters" holding both)."""
    params = cfg.get("rope_parameters")
    if params:
        return float(params.get("rope_theta", cfg.get("rope_theta", 10000.0))), params
    return float(cfg.get("rope_theta", 10000.0)), cfg.get("rope_scaling")


class RotaryEmbedding(nn.Module):
    def __init__(
        self, head_dim: int, max_position: int, base: float, scaling: dict[str, Any] | None = None
    ) -> None:
        super().__init__()
        self.head_dim = head_dim
        inv_freq = _inv_freq(head_dim, base, scaling)
        t = torch.arange(max_position, dtype=torch.int64).float()
        freqs = torch.outer(t, inv_freq)  # [max_position, head_dim / 2]
        cache = torch.cat([freqs.cos(), freqs.sin()], dim=-1).float()  # [max_position, head_dim]
        self.register_buffer("cos_sin_cache", cache, persistent=False)
        self._fused: bool | None = None  # fused CUDA op or torch code; decided at the first call

    def forward(
        self,
        positions: torch.Tensor,  # [T]
        q: torch.Tensor,  # [T, num_heads * head_dim]
        k: torch.Tensor,  # [T, num_kv_heads * head_dim]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns the rotated (q, k). The fused op rotates q and k in place (they may be views of
        the fused qkv projection's output, the model's own intermediate) and returns them."""
        if self._fused is None:
            self._fused = use_cuda_op(q, "rotary_embedding")
        if self._fused:
            torch.ops.vgraph_C.rotary_embedding(
                positions, q, k, self.head_dim, self.cos_sin_cache, True
            )
            return q, k
        cos, sin = self.cos_sin_cache[positions].chunk(2, dim=-1)  # [T, head_dim / 2] each
        return self._rotate(q, cos, sin), self._rotate(k, cos, sin)

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        t, dtype = x.shape[0], x.dtype
        x1, x2 = x.view(t, -1, self.head_dim).float().chunk(2, dim=-1)
        cos, sin = cos[:, None, :], sin[:, None, :]
        out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
        return out.to(dtype).view(t, -1)
