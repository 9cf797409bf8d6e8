"""The built-in default model: converted once into a complete HF folder, then reused as is."""

from __future__ import annotations

import json
from pathlib import Path

from vgraph.models.default_model import (
    DEFAULT_MODEL_NAME,
    MARKER_NAME,
    cache_dir,
    ensure_default_model,
)


def test_default_model_folder_is_complete() -> None:
    folder = Path(ensure_default_model())
    assert folder == cache_dir() / "models" / DEFAULT_MODEL_NAME
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["vocab_size"] == 49152
    assert (folder / "model.safetensors").stat().st_size > 100 * 2**20
    assert (folder / "generation_config.json").is_file()

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert prompt.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_second_call_reuses_the_folder() -> None:
    folder = Path(ensure_default_model())
    marker = folder / MARKER_NAME
    weights = folder / "model.safetensors"
    before = (marker.stat().st_mtime_ns, weights.stat().st_mtime_ns, weights.stat().st_ino)
    assert ensure_default_model() == str(folder)
    after = (marker.stat().st_mtime_ns, weights.stat().st_mtime_ns, weights.stat().st_ino)
    assert before == after
