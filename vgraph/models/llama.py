"""Llama-family decoder (Llama 2/3.x, SmolLM2) in plain PyTorch over flattened tokens.

Inputs are [num_tokens] ids and positions of every request in the step, concatenated; attention
metadata comes from the ForwardContext. Qwen2 (qkv bias) and Qwen3 (per-head q/k RMSNorm) are the
same graph with two switches, set by their subclasses.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from vgraph.layers.attention import Attention
from vgraph.layers.layernorm import RMSNorm
from vgraph.layers.linear import SiluAndMul, gate_up_linear, plain_linear, qkv_linear
from vgraph.layers.rotary import RotaryEmbedding, rope_parameters

# checkpoint name fragment -> (our fused parameter fragment, shard id)
STACKED_PARAMS = {
    ".q_proj.": (".qkv_proj.", "q"),
    ".k_proj.": (".qkv_proj.", "k"),
    ".v_proj.": (".qkv_proj.", "v"),
    ".gate_proj.": (".gate_up_proj.", 0),
    ".up_proj.": (".gate_up_proj.", 1),
}


class LlamaAttention(nn.Module):
    def __init__(
        self, cfg: dict[str, Any], prefix: str, bias: bool, qk_norm: bool, rope: RotaryEmbedding
    ) -> None:
        super().__init__()
        hidden = cfg["hidden_size"]
        self.num_heads = cfg["num_attention_heads"]
        self.num_kv_heads = cfg.get("num_key_value_heads") or self.num_heads
        self.head_dim = cfg.get("head_dim") or hidden // self.num_heads
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.qkv_proj = qkv_linear(hidden, self.num_heads, self.num_kv_heads, self.head_dim, bias)
        self.o_proj = plain_linear(self.q_size, hidden)
        self.qk_norm = qk_norm
        if qk_norm:
            eps = cfg.get("rms_norm_eps", 1e-6)
            self.q_norm = RMSNorm(self.head_dim, eps)
            self.k_norm = RMSNorm(self.head_dim, eps)
        self.rotary_emb = rope  # one table shared by every layer
        self.attn = Attention(
            self.num_heads, self.head_dim, self.head_dim**-0.5, self.num_kv_heads, f"{prefix}.attn"
        )

    def forward(self, positions: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        # positions: [T]; hidden: [T, hidden_size]
        qkv = self.qkv_proj(hidden)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        if self.qk_norm:
            t = q.shape[0]
            q = self.q_norm(q.reshape(t, -1, self.head_dim)).view(t, self.q_size)
            k = self.k_norm(k.reshape(t, -1, self.head_dim)).view(t, self.kv_size)
        q, k = self.rotary_emb(positions, q, k)
        return self.o_proj(self.attn(q, k, v.contiguous()))


class LlamaMLP(nn.Module):
    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        if cfg.get("hidden_act", "silu") != "silu":
            raise ValueError(f"hidden_act={cfg['hidden_act']!r} is not supported; use 'silu'")
        self.gate_up_proj = gate_up_linear(cfg["hidden_size"], cfg["intermediate_size"])
        self.down_proj = plain_linear(cfg["intermediate_size"], cfg["hidden_size"])
        self.act_fn = SiluAndMul()

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [T, hidden] -> [T, hidden]
        return self.down_proj(self.act_fn(self.gate_up_proj(x)))


class LlamaDecoderLayer(nn.Module):
    def __init__(
        self, cfg: dict[str, Any], prefix: str, bias: bool, qk_norm: bool, rope: RotaryEmbedding
    ) -> None:
        super().__init__()
        eps = cfg.get("rms_norm_eps", 1e-6)
        self.self_attn = LlamaAttention(cfg, f"{prefix}.self_attn", bias, qk_norm, rope)
        self.mlp = LlamaMLP(cfg)
        self.input_layernorm = RMSNorm(cfg["hidden_size"], eps)
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], eps)

    def forward(
        self, positions: torch.Tensor, hidden: torch.Tensor, residual: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            residual = hidden
            hidden = self.input_layernorm(hidden)
        else:
            hidden, residual = self.input_layernorm(hidden, residual)
        hidden = self.self_attn(positions, hidden)
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        return self.mlp(hidden), residual


class LlamaModel(nn.Module):
    def __init__(self, cfg: dict[str, Any], bias: bool, qk_norm: bool) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.embed_tokens.weight.requires_grad_(False)
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        theta, scaling = rope_parameters(cfg)
        rope = RotaryEmbedding(head_dim, cfg.get("max_position_embeddings", 2048), theta, scaling)
        self.layers = nn.ModuleList(
            LlamaDecoderLayer(cfg, f"model.layers.{i}", bias, qk_norm, rope)
            for i in range(cfg["num_hidden_layers"])
        )
        self.norm = RMSNorm(cfg["hidden_size"], cfg.get("rms_norm_eps", 1e-6))

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        hidden = self.embed_tokens(input_ids)  # [T, hidden]
        residual = None
        for layer in self.layers:
            hidden, residual = layer(positions, hidden, residual)
        hidden, _ = self.norm(hidden, residual)
        return hidden


class LlamaForCausalLM(nn.Module):
    attention_bias = False
    qk_norm = False

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        self.config = cfg
        bias = cfg.get("attention_bias", self.attention_bias)
        self.model = LlamaModel(cfg, bias, self.qk_norm)
        self.tie_word_embeddings = cfg.get("tie_word_embeddings", False)
        if not self.tie_word_embeddings:
            self.lm_head = plain_linear(cfg["hidden_size"], cfg["vocab_size"])

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """input_ids, positions: [T] -> hidden states [T, hidden_size]."""
        return self.model(input_ids, positions)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [R, hidden_size] -> float32 logits [R, vocab_size]."""
        weight = self.model.embed_tokens.weight if self.tie_word_embeddings else self.lm_head.weight
        return torch.nn.functional.linear(hidden, weight).float()

    def checkpoint_name_map(self, name: str) -> tuple[str, object] | None:
        """Map a checkpoint tensor name to (our parameter name, shard id); None to skip it."""
        if "rotary_emb.inv_freq" in name:
            return None
        if self.tie_word_embeddings and name == "lm_head.weight":
            return None
        for frag, (fused, shard) in STACKED_PARAMS.items():
            if frag in name:
                return name.replace(frag, fused), shard
        return name, None
