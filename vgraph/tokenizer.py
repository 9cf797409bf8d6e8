"""Tokenizer loading (Hugging Face fast tokenizers) and the model's end-of-sequence ids."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vgraph.config import ModelConfig
from vgraph.config.engine import TOKENIZER_FILES


def load_tokenizer(config: ModelConfig) -> Any | None:
    """The checkpoint's tokenizer, or None when the folder has none (dummy configs); an
    explicit tokenizer folder was checked to hold one (resolve_tokenizer_path)."""
    folder = Path(config.tokenizer or config.model)
    if not any((folder / f).is_file() for f in TOKENIZER_FILES):
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(folder))
    except Exception as e:
        raise ValueError(f"tokenizer in {str(folder)!r} could not be loaded: {e}") from e


def eos_token_ids(config: ModelConfig, tokenizer: Any | None) -> list[int]:
    """EOS ids from generation_config.json, config.json and the tokenizer, deduplicated."""
    ids: list[int] = []
    sources = [config.hf_config.get("eos_token_id")]
    gen = Path(config.model) / "generation_config.json"
    if gen.is_file():
        sources.append(json.loads(gen.read_text()).get("eos_token_id"))
    if tokenizer is not None:
        sources.append(tokenizer.eos_token_id)
    for s in sources:
        for t in s if isinstance(s, list) else [s]:
            if isinstance(t, int) and t not in ids:
                ids.append(t)
    return ids
