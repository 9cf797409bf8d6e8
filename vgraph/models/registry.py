"""Architecture name (config.json "architectures") -> model class."""

from __future__ import annotations

from torch import nn

from vgraph.models.llama import LlamaForCausalLM
from vgraph.models.qwen2 import Qwen2ForCausalLM
from vgraph.models.qwen3 import Qwen3ForCausalLM

MODEL_REGISTRY: dict[str, type[nn.Module]] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "Qwen2ForCausalLM": Qwen2ForCausalLM,
    "Qwen3ForCausalLM": Qwen3ForCausalLM,
}


def get_model_cls(architecture: str) -> type[nn.Module]:
    if architecture not in MODEL_REGISTRY:
        raise ValueError(
            f"architectures={architecture!r} is not supported; use one of {sorted(MODEL_REGISTRY)}"
        )
    return MODEL_REGISTRY[architecture]
