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


def make_tiny_model(
    arch: str, folder: Path, seed: int = 0, norm_std: float | None = None, **overrides: object
) -> Path:
    """Save a random `arch` model (safetensors + config.json) into folder; returns folder.
    norm_std: every norm weight drawn from N(1, norm_std) (by default only Qwen3's are, the rest
    stay at transformers' ones)."""
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
            elif norm_std is not None:
                p.normal_(1.0, norm_std)
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


def make_tiny_model_with_bos_tokenizer(folder: Path, seed: int = 0) -> Path:
    """make_tiny_model_with_tokenizer whose tokenizer adds a BOS (<|endoftext|>, id 0) to text
    and whose chat template writes it too, as Llama 3's do: a chat prompt tokenized with the
    tokenizer's special tokens would start with two."""
    from tokenizers.processors import TemplateProcessing
    from transformers import AutoTokenizer

    make_tiny_model_with_tokenizer(folder, seed)
    tok = AutoTokenizer.from_pretrained(folder)
    tok.backend_tokenizer.post_processor = TemplateProcessing(
        single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", 0)]
    )
    tok.bos_token = "<|endoftext|>"
    tok.chat_template = "{{ bos_token }}" + tok.chat_template
    tok.save_pretrained(folder)
    return folder


def make_scripted_model(folder: Path, pieces: list[str], chat_template: str | None = None) -> Path:
    """A tiny Qwen2 with the default model's tokenizer plus one added token per piece, whose
    weights make it write the pieces in order, then EOS, after any prompt.

    Every layer's output projections are zero, so the last hidden state is the current token's
    embedding: each regular token embeds as e0, piece k as e(k+1), and the LM head maps e0 to
    piece 0, e(k+1) to piece k+1 and the last piece to EOS, by a margin (logit 32 over 0) that
    sampling at temperature 1 does not overcome. Tool-call tests get a model that calls tools.
    """
    from tokenizers import AddedToken
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from vgraph.models.default_model import ensure_default_model

    tok = AutoTokenizer.from_pretrained(ensure_default_model())
    tok.add_tokens([AddedToken(p, normalized=False, special=False) for p in pieces])
    if chat_template is not None:
        tok.chat_template = chat_template
    tok.save_pretrained(folder)
    piece_ids = tok.convert_tokens_to_ids(pieces)
    eos = tok.eos_token_id
    kwargs = dict(TINY, vocab_size=len(tok), tie_word_embeddings=False)
    config = Qwen2Config(**kwargs, bos_token_id=tok.bos_token_id, eos_token_id=eos)
    model = Qwen2ForCausalLM(config).eval()
    hidden = config.hidden_size
    assert len(pieces) + 1 <= hidden
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.norm.weight.fill_(1.0)
        embed = model.model.embed_tokens.weight  # [vocab, hidden]
        embed.zero_()
        embed[:, 0] = 1.0
        head = model.lm_head.weight  # [vocab, hidden]
        head.zero_()
        # RMSNorm turns a one-hot e_j into sqrt(hidden) * e_j: logit = 4 * 8 = 32 at hidden 64
        for k, tid in enumerate(piece_ids):
            embed[tid] = 0.0
            embed[tid, k + 1] = 1.0
            head[tid, k] = 4.0
        head[eos, len(pieces)] = 4.0
    model.save_pretrained(folder, safe_serialization=True)
    return folder


# What the scripted tool model writes: content, then a Hermes tool call whose start tag is split
# across two tokens (so streaming must hold back a partial tag).
TOOL_PIECES = [
    "Checking. <tool",
    '_call>\n{"name": "get_weather", "arguments": ',
    '{"city": "Paris"}}\n</tool_call>',
]
# A Qwen2.5-style template, cut down: tools, assistant tool calls, tool results, and one template
# variable (`greeting`) for chat_template_kwargs.
TOOL_CHAT_TEMPLATE = (  # HF renders with trim_blocks: newlines after tags are written as {{ nl }}
    "{%- set nl = '\\n' %}"
    "{%- if greeting is defined %}{{ greeting + nl }}{% endif %}"
    "{%- if tools %}{{ '<|im_start|>system' + nl + '<tools>' }}"
    "{%- for tool in tools %}{{ nl + (tool | tojson) }}{% endfor %}"
    "{{ nl + '</tools><|im_end|>' + nl }}{% endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' and m.tool_calls %}{{ '<|im_start|>assistant' }}"
    "{%- for c in m.tool_calls %}{{ nl + '<tool_call>' + nl }}"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}'
    "{{ nl + '</tool_call>' }}{% endfor %}{{ '<|im_end|>' + nl }}"
    "{%- elif m.role == 'tool' %}"
    "{{ '<|im_start|>user' + nl + '<tool_response>' + nl + m.content + nl }}"
    "{{ '</tool_response><|im_end|>' + nl }}"
    "{%- else %}{{ '<|im_start|>' + m.role + nl + m.content + '<|im_end|>' + nl }}{% endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant' + nl }}{% endif %}"
)
