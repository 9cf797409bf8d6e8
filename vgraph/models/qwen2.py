"""Qwen2: the Llama graph with a bias on the q/k/v projections."""

from __future__ import annotations

from vgraph.models.llama import LlamaForCausalLM


class Qwen2ForCausalLM(LlamaForCausalLM):
    attention_bias = True
