"""A fake Hugging Face Hub cache, laid out as huggingface_hub writes it:

    <cache>/models--<org>--<name>/refs/<revision>         holds the commit hash
    <cache>/models--<org>--<name>/snapshots/<commit>/...  the files (config.json, ...)

So Hub-id resolution is tested without a network, through huggingface_hub's own lookup.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from tests.tiny_models import TINY


def tiny_config(**overrides: Any) -> dict[str, Any]:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **TINY, **overrides}


def add_to_cache(
    cache: Path, repo_id: str, revision: str = "main", config: dict[str, Any] | None = None
) -> Path:
    """Write repo_id@revision into cache; returns its snapshot folder."""
    commit = hashlib.sha1(f"{repo_id}@{revision}".encode()).hexdigest()
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    (snapshot / "config.json").write_text(json.dumps(config or tiny_config()))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / revision).write_text(commit)
    return snapshot
