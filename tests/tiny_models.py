"""Tiny random checkpoints of each supported architecture, written with transformers itself."""

from __future__ import annotations

from pathlib import Path

import torch

TINY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    vocab_size=512,
    rms_norm_eps=1e-6,
)

ARCHS = ("llama", "qwen2", "qwen3")


def make_tiny_model(arch: str, folder: Path, seed: int = 0, **overrides: object) -> Path:
    """Save a random `arch` model (safetensors + config.json) into folder; returns folder."""
    import transformers

    cfg_cls, model_cls = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
    }[arch]
    kwargs = dict(TINY, **overrides)
    if arch == "qwen3":
        kwargs.setdefault("head_dim", 32)
    if arch == "llama":
        kwargs.setdefault("rope_scaling", {
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64,
        })
    config = cfg_cls(**kwargs)
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    with torch.no_grad():  # larger-than-default weights so the random model is not flat
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.normal_(0.0, 0.08)
            elif arch == "qwen3" or "bias" in name:
                p.normal_(1.0, 0.1)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def hf_greedy(folder: Path, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """Greedy continuation of each prompt by transformers, one prompt at a time (no padding)."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32)
    model.eval()
    outs = []
    for ids in prompts:
        x = torch.tensor([ids])
        with torch.no_grad():
            y = model.generate(
                x, max_new_tokens=max_new_tokens, do_sample=False, min_new_tokens=max_new_tokens,
                pad_token_id=0, eos_token_id=None,
            )
        outs.append(y[0, len(ids):].tolist())
    return outs
