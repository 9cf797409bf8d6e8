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
        kwargs.setdefault(
            "rope_scaling",
            {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        )
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


def hf_greedy(folder: Path | str, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """Greedy continuation of each prompt by transformers: argmax of a full forward per token.

    No KV cache on purpose: transformers' cached generate() was seen to leave its own full
    forward's argmax (SmolLM2-135M, a 0.95 logprob gap), and the full forward is the oracle.
    """
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    outs = []
    for ids in prompts:
        seq = list(ids)
        with torch.no_grad():
            for _ in range(max_new_tokens):
                seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
        outs.append(seq[len(ids) :])
    return outs


_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "generation_config.json",
)


def make_tiny_model_with_tokenizer(folder: Path, seed: int = 0) -> Path:
    """A tiny random Llama sharing the default model's tokenizer (vocab 49152) and chat template,
    so text, chat and stop strings work at tiny-model speed."""
    import shutil

    from vgraph.models.default_model import ensure_default_model

    src = Path(ensure_default_model())
    make_tiny_model(
        "llama", folder, seed=seed, vocab_size=49152, bos_token_id=1, eos_token_id=2, pad_token_id=2
    )
    for name in _TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy(src / name, folder / name)
    return folder
