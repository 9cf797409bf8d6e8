"""Qwen3: the Llama graph with RMSNorm over each head of q and k before RoPE, no qkv bias."""

from __future__ import annotations

from vgraph.models.llama import LlamaForCausalLM


class Qwen3ForCausalLM(LlamaForCausalLM):
    qk_norm = True
